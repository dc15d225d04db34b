"""The store's tables (SQLAlchemy Core): what the service must not lose.

Jobs, every state transition as an event row, the tasks of each attempt with what the executor
needs to find them again, and the GPU allocations, whose (node, gpu) primary key lets the
database itself refuse to hand one GPU to two tasks. Alembic's migrations
(``service/store/migrations``) create and change them; these definitions are what the queries use.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

metadata = MetaData()

jobs = Table(
    "jobs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(256), nullable=False),
    Column("user", String(128), nullable=False),  # the owner's name, as shown
    Column("vc", String(128), nullable=False),
    Column("priority", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("attempt", Integer, nullable=False, default=1),
    Column("retries", Integer, nullable=False, default=0),
    Column("retries_used", Integer, nullable=False, default=0),
    Column("task_count", Integer, nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("opportunistic", Boolean, nullable=False, default=False),
    Column("cancel_requested", Boolean, nullable=False, default=False),
    Column("spec", JSON, nullable=False),
    Column("reason", String(64), nullable=False, default=""),
    Column("why", Text, nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("submitted_at", Float, nullable=False),
    Column("started_at", Float, nullable=True),
    Column("finished_at", Float, nullable=True),
    Column("updated_at", Float, nullable=False),
    # Who owns the job (accounts.id): every ownership check compares this, never the name.
    Column("owner_id", Integer, nullable=True),
    Index("ix_jobs_user", "user"),
    Index("ix_jobs_state", "state"),
    Index("ix_jobs_owner", "owner_id"),
)

events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, ForeignKey("jobs.id"), nullable=False),
    Column("time", Float, nullable=False),
    Column("from_state", String(16), nullable=True),
    Column("to_state", String(16), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("reason", String(64), nullable=False),
    Column("why", Text, nullable=True),
    Index("ix_events_job", "job_id"),
)

tasks = Table(
    "tasks",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, ForeignKey("jobs.id"), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("role", String(128), nullable=False),
    Column("idx", Integer, nullable=False),
    # A task stopped alone and started again within its attempt is the next generation.
    Column("generation", Integer, nullable=False, default=1, server_default=text("1")),
    Column("node", String(256), nullable=False),
    Column("gpus", JSON, nullable=False),
    Column("cells", JSON, nullable=False),
    Column("state", String(16), nullable=False),  # RUNNING, then ENDED
    Column("exit_code", Integer, nullable=True),
    Column("handle", JSON, nullable=True),
    Column("started_at", Float, nullable=False),
    Column("ended_at", Float, nullable=True),
    # The job whose priority downgraded this task alone to opportunistic (lazy preemption).
    Column("downgraded_by", String(64), nullable=True),
    UniqueConstraint("job_id", "attempt", "role", "idx", "generation", name="uq_task_generation"),
    Index("ix_tasks_job", "job_id"),
    Index("ix_tasks_state", "state"),
)

allocations = Table(
    "allocations",
    metadata,
    Column("node", String(256), primary_key=True),
    Column("gpu", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id"), nullable=False),
    Column("task_id", Integer, ForeignKey("tasks.id"), nullable=False),
    Index("ix_allocations_job", "job_id"),
)

# Per-job GPU readings, downsampled as the job runs (service/monitoring.py, observe/history.py).
job_gpu_history = Table(
    "job_gpu_history",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, ForeignKey("jobs.id"), nullable=False),
    Column("node", String(256), nullable=False),
    Column("gpu", Integer, nullable=False),
    Column("uuid", String(64), nullable=True),
    Column("t0", Float, nullable=False),
    Column("t1", Float, nullable=False),
    Column("n", Integer, nullable=False),
    Column("gpu_util", Float, nullable=True),
    Column("mem_copy_util", Float, nullable=True),
    Column("fb_used_mib", Float, nullable=True),
    Column("power_w", Float, nullable=True),
    Column("temperature_c", Float, nullable=True),
    Index("ix_job_gpu_history_job", "job_id", "node", "gpu"),
)

# Nodes an admin took out of service (``POST /nodes/{node}/down``). A mark outlives restarts and
# GPU health cannot lift it: only ``POST /nodes/{node}/up`` does (``runtime/nodes.py`` holds
# them).
node_marks = Table(
    "node_marks",
    metadata,
    Column("node", String(256), primary_key=True),
    Column("reason", Text, nullable=False),
    Column("marked_by", String(256), nullable=False),
    Column("marked_at", Float, nullable=False),
)

# Every identity that owns jobs (service/accounts.py): a number that never passes to anyone
# else, the kind and name it goes by, and its OS uid/gid (configured in users.yaml / the hub's
# grants, or allocated once from a range) so its files stay its own across restarts. A removed
# or replaced user's account is retired, not deleted: its jobs and uid stay with it.
accounts = Table(
    "accounts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(16), nullable=False),  # "user", "admin" or "service"
    Column("user", String(128), nullable=False),
    Column("uid", Integer, nullable=True, unique=True),  # None until first needed
    Column("gid", Integer, nullable=True),
    Column("source", String(16), nullable=False),  # "allocated", "configured", "jobs"
    Column("credential", String(64), nullable=True),  # users file: fingerprint of the token
    Column("created_at", Float, nullable=False),
    Column("retired_at", Float, nullable=True),
    Index(
        "uq_accounts_live",
        "kind",
        "user",
        unique=True,
        sqlite_where=text("retired_at IS NULL"),
        postgresql_where=text("retired_at IS NULL"),
    ),
)

# Each waiting job's ETA when it was first estimated, and its error once it started
# (service/eta.py): what /metrics and ``labhive eta-report`` say about the ETAs' accuracy.
job_etas = Table(
    "job_etas",
    metadata,
    Column("job_id", Integer, ForeignKey("jobs.id"), primary_key=True),
    Column("vc", String(128), nullable=False),
    Column("predicted_at", Float, nullable=False),
    Column("eta", Float, nullable=False),
    Column("eta_low", Float, nullable=False),
    Column("eta_high", Float, nullable=False),
    Column("started_at", Float, nullable=True),
    Column("error_s", Float, nullable=True),  # started_at - eta: late is positive
    Column("in_range", Boolean, nullable=True),
)
