"""The event journal (issue 35): every event the loop gave its policy and every decision it got
back, one row per pass, written in the pass's transaction (``service/journal/table.py``).

Revision ID: 0009_journal
Revises: 0008_task_downgrades
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_journal"
down_revision = "0008_task_downgrades"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "journal",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("t", sa.Float, nullable=False),
        sa.Column("fresh", sa.Boolean, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_index("ix_journal_t", "journal", ["t"])


def downgrade() -> None:
    op.drop_index("ix_journal_t", table_name="journal")
    op.drop_table("journal")
