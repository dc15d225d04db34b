"""A generation per task, so a task stopped alone and started again is a new row (issue 17).

HiveD stops an incremental job's tasks one by one (preemption, node failure) and starts them
again inside the same attempt. The unique key (job, attempt, role, index) allowed one row per
task and attempt, and exits were matched by that key, so a late exit of the stopped process
would have counted against its restart. ``generation`` (1 for every existing row) joins the
key: each restart of a task within an attempt is the next generation.

Revision ID: 0007_task_generation
Revises: 0006_owner_ids
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_task_generation"
down_revision = "0006_owner_ids"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(
            sa.Column("generation", sa.Integer, nullable=False, server_default=sa.text("1"))
        )
        batch.drop_constraint("uq_task_attempt", type_="unique")
        batch.create_unique_constraint(
            "uq_task_generation", ["job_id", "attempt", "role", "idx", "generation"]
        )


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_constraint("uq_task_generation", type_="unique")
        batch.create_unique_constraint("uq_task_attempt", ["job_id", "attempt", "role", "idx"])
        batch.drop_column("generation")
