"""The durable job store: SQLite (WAL) by default, PostgreSQL by URL, one schema through Alembic.

Everything the service must not lose lives here: jobs, every state transition as an event row,
the tasks of each attempt with what the executor needs to find them again, and the GPU
allocations. Allocations have the (node, gpu) pair as primary key, so the database itself refuses
to hand one GPU to two tasks, whatever happens to the process around it.

Writers on SQLite are serialised by an in-process lock and ``BEGIN IMMEDIATE`` (SQLite's own busy
handler sleeps in coarse steps, which ruins tail latency); readers on PostgreSQL use REPEATABLE
READ so a multi-query read sees one snapshot and never a half-applied transition.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
    create_engine,
    event,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError

from labhive.scheduler.errors import UserError

#: The newest migration; ``Store.migrate`` skips importing Alembic when the database is there.
HEAD_REVISION = "0009_journal"
MIGRATIONS = Path(__file__).with_name("migrations")

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
# GPU health cannot lift it: only ``POST /nodes/{node}/up`` does (service/loop.py holds them).
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


def database_url(db: str | None, data_dir: Path) -> str:
    """The SQLAlchemy URL for ``--db`` (None: SQLite in the data dir)."""
    if not db:
        return f"sqlite:///{data_dir / 'labhive.db'}"
    if db.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + db.split("://", 1)[1]
    if db.startswith(("sqlite:", "postgresql+")):
        return db
    if "://" not in db:  # a plain path means a SQLite file
        return f"sqlite:///{Path(db).resolve()}"
    raise UserError(
        f"unsupported --db {_masked(db)!r}: use a file path, sqlite:///PATH or postgresql://..."
    )


def _masked(db: str) -> str:
    """A database URL fit for an error message: its password (from --db-file or the
    environment) replaced by stars."""
    try:
        return make_url(db).render_as_string(hide_password=True)
    except ArgumentError:
        return db.split("://", 1)[0] + "://..." if "@" in db else db


class Store:
    """Engines and transactions; the queries themselves live next to their callers' ideas."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.is_sqlite = make_url(url).get_backend_name() == "sqlite"
        if self.is_sqlite:
            engine = create_engine(
                url, connect_args={"check_same_thread": False, "timeout": 30}, pool_size=20
            )
            _tune_sqlite(engine)
            self._reader = engine
        else:
            engine = create_engine(url, pool_size=20, max_overflow=20, pool_pre_ping=True)
            self._reader = engine.execution_options(isolation_level="REPEATABLE READ")
        self.engine: Engine = engine
        self._writer = engine.execution_options(labhive_write=True)
        self._write_lock = threading.Lock() if self.is_sqlite else None
        #: Called before each write transaction: the disk guard frees its reserve there when
        #: the data dir is full (``diskspace.py``), so cancels and settles still commit.
        self.before_write: Callable[[], None] | None = None

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """One write transaction: committed on exit, rolled back on any exception."""
        if self.before_write is not None:
            self.before_write()
        if self._write_lock is None:
            with self._writer.begin() as conn:
                yield conn
            return
        with self._write_lock, self._writer.begin() as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """One read transaction that sees a single consistent snapshot."""
        with self._reader.begin() as conn:
            yield conn

    def migrate(self) -> None:
        """Bring the schema to the newest revision (cheap when it is already there)."""
        if self.revision() == HEAD_REVISION:
            return
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        with self.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def revision(self) -> str | None:
        with self.engine.connect() as conn:
            if not inspect(conn).has_table("alembic_version"):
                return None
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()

    def dispose(self) -> None:
        self.engine.dispose()


def _tune_sqlite(engine: Engine) -> None:
    """WAL with synchronous=NORMAL survives kill -9 (only power loss could drop the last
    commits); explicit BEGIN makes SQLAlchemy's transactions SQLite's transactions."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get("labhive_write")
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def now() -> float:
    return time.time()


def job_row(conn: Connection, job_id: int) -> dict[str, Any] | None:
    row = conn.execute(select(jobs).where(jobs.c.id == job_id)).mappings().first()
    return dict(row) if row else None
