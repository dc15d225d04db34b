"""Per-job GPU history (downsampled NVML readings of the GPUs a job holds).

Revision ID: 0002_job_gpu_history
Revises: 0001_initial
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_job_gpu_history"
down_revision = "0001_initial"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_gpu_history",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("node", sa.String(256), nullable=False),
        sa.Column("gpu", sa.Integer, nullable=False),
        sa.Column("uuid", sa.String(64), nullable=True),
        sa.Column("t0", sa.Float, nullable=False),
        sa.Column("t1", sa.Float, nullable=False),
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("gpu_util", sa.Float, nullable=True),
        sa.Column("mem_copy_util", sa.Float, nullable=True),
        sa.Column("fb_used_mib", sa.Float, nullable=True),
        sa.Column("power_w", sa.Float, nullable=True),
        sa.Column("temperature_c", sa.Float, nullable=True),
    )
    op.create_index("ix_job_gpu_history_job", "job_gpu_history", ["job_id", "node", "gpu"])


def downgrade() -> None:
    op.drop_table("job_gpu_history")
