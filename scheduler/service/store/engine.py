"""The durable job store's engines and transactions: SQLite (WAL) by default, PostgreSQL by
URL, one schema through Alembic (its tables are ``tables.py``'s).

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

from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError

from labhive.scheduler.core.errors import UserError

#: The newest migration; ``Store.migrate`` skips importing Alembic when the database is there.
HEAD_REVISION = "0009_journal"
MIGRATIONS = Path(__file__).with_name("migrations")  # service/store/migrations


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
