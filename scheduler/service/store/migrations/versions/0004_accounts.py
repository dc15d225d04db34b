"""Each user's OS uid/gid, allocated once and kept (or as configured).

Revision ID: 0004_accounts
Revises: 0003_node_marks
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_accounts"
down_revision = "0003_node_marks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "accounts",
        sa.Column("user", sa.String(128), primary_key=True),
        sa.Column("uid", sa.Integer, nullable=False, unique=True),
        sa.Column("gid", sa.Integer, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("accounts")
