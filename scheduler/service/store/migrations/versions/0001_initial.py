"""Jobs, their events, tasks and GPU allocations.

Revision ID: 0001_initial
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_initial"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("user", sa.String(128), nullable=False),
        sa.Column("vc", sa.String(128), nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("retries", sa.Integer, nullable=False),
        sa.Column("retries_used", sa.Integer, nullable=False),
        sa.Column("task_count", sa.Integer, nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("opportunistic", sa.Boolean, nullable=False),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("why", sa.Text, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("submitted_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ix_jobs_user", "jobs", ["user"])
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("from_state", sa.String(16), nullable=True),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("why", sa.Text, nullable=True),
    )
    op.create_index("ix_events_job", "events", ["job_id"])
    op.create_table(
        "tasks",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("role", sa.String(128), nullable=False),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("node", sa.String(256), nullable=False),
        sa.Column("gpus", sa.JSON, nullable=False),
        sa.Column("cells", sa.JSON, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("handle", sa.JSON, nullable=True),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("ended_at", sa.Float, nullable=True),
        sa.UniqueConstraint("job_id", "attempt", "role", "idx", name="uq_task_attempt"),
    )
    op.create_index("ix_tasks_job", "tasks", ["job_id"])
    op.create_index("ix_tasks_state", "tasks", ["state"])
    op.create_table(
        "allocations",
        sa.Column("node", sa.String(256), primary_key=True),
        sa.Column("gpu", sa.Integer, primary_key=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("task_id", sa.Integer, sa.ForeignKey("tasks.id"), nullable=False),
    )
    op.create_index("ix_allocations_job", "allocations", ["job_id"])


def downgrade() -> None:
    op.drop_table("allocations")
    op.drop_table("tasks")
    op.drop_table("events")
    op.drop_table("jobs")
