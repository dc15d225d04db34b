"""Nodes an admin took out of service, kept across restarts.

Revision ID: 0003_node_marks
Revises: 0002_job_gpu_history
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_node_marks"
down_revision = "0002_job_gpu_history"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_marks",
        sa.Column("node", sa.String(256), primary_key=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("marked_by", sa.String(256), nullable=False),
        sa.Column("marked_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("node_marks")
