"""Each waiting job's first estimated start (its ETA at submit) and, once it starts, the error.

Revision ID: 0005_job_etas
Revises: 0004_accounts
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_job_etas"
down_revision = "0004_accounts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_etas",
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), primary_key=True),
        sa.Column("vc", sa.String(128), nullable=False),
        sa.Column("predicted_at", sa.Float, nullable=False),
        sa.Column("eta", sa.Float, nullable=False),
        sa.Column("eta_low", sa.Float, nullable=False),
        sa.Column("eta_high", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("error_s", sa.Float, nullable=True),
        sa.Column("in_range", sa.Boolean, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("job_etas")
