"""Which tasks run opportunistic on their own, so a restart restores them so (issue 17).

HiveD's lazy preemption may downgrade some tasks of a job (one task of an incremental job, one
affinity group) rather than the whole job; those tasks keep running on cells their VC no longer
guarantees. ``downgraded_by`` (the job id that caused it, NULL for every existing row) lets the
service's recovery hand the scheduler exactly which tasks are opportunistic: without it a
restarted service would adopt them as guaranteed, inside cells that are no longer their VC's.

Revision ID: 0008_task_downgrades
Revises: 0007_task_generation
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_task_downgrades"
down_revision = "0007_task_generation"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("downgraded_by", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("downgraded_by")
