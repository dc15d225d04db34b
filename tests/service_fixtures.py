"""Fixtures for the job service tests: a throwaway PostgreSQL server and stores on both backends.

PostgreSQL runs for real: Debian's ``postgresql`` package (installed by .ci/deps.sh), initdb
into a temp dir, a server on a loopback port (as the ``postgres`` user when the tests run as
root, since PostgreSQL refuses root), one fresh database per test.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from labhive.scheduler.client import Client
from labhive.scheduler.service.store import Store

_counter = itertools.count()


def _pg_bin(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        pytest.fail(f"{name} not found: install Debian's postgresql package (.ci/deps.sh does)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The base URL (no database) of a PostgreSQL server that lives for the test session."""
    # Not under pytest's tmp_path: its parents are private to root, and the server runs as
    # the postgres user.
    root = Path(tempfile.mkdtemp(prefix="labhive-pg-"))
    data = root / "data"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    initdb = _as_postgres(
        [_pg_bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
    )
    subprocess.run(initdb, check=True, capture_output=True)
    port = _free_port()
    cmd = _as_postgres(
        [
            _pg_bin("postgres"), "-D", str(data), "-p", str(port), "-h", "127.0.0.1",
            "-k", str(root), "-F", "-c", "max_connections=200",
        ]
    )  # fmt: skip
    log = (root / "server.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"postgresql://postgres@127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"PostgreSQL did not start: {(root / 'server.log').read_text()}")
            time.sleep(0.1)
    _wait_ready(url)
    yield url
    os.killpg(proc.pid, signal.SIGINT)  # PostgreSQL's fast shutdown
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    shutil.rmtree(root, ignore_errors=True)


def _wait_ready(url: str) -> None:
    import psycopg

    deadline = time.monotonic() + 30
    while True:
        try:
            psycopg.connect(f"{url}/postgres", connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def new_pg_database(server: str) -> str:
    """A fresh, empty database on the server; returns its URL."""
    import psycopg

    name = f"labhive_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{server}/{name}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL for each backend (the --db forms ``labhive serve`` accepts)."""
    if request.param == "sqlite":
        return str(tmp_path / "labhive.db")
    return new_pg_database(request.getfixturevalue("pg_server"))


@pytest.fixture
def store(db_url: str, tmp_path: Path) -> Iterator[Store]:
    from labhive.scheduler.service.store import database_url

    s = Store(database_url(db_url, tmp_path))
    s.migrate()
    yield s
    s.dispose()


# ---- a live service in this process (real HTTP on loopback, real local processes) -----------

USERS = """
users:
  alice: {token: alice-token-123, groups: [students]}
  bob: {token: bob-token-4567, groups: [others]}
groups:
  students: {vcs: [vc1]}
  others: {vcs: [default]}
"""


@dataclass
class Live:
    url: str
    admin: str
    running: Any
    data_dir: Path

    def client(self, token: str | None = None) -> Client:
        return Client(self.url, token or self.admin)


@contextmanager
def live_service(data_dir: Path, db: str | None = None, grace_s: float = 2.0) -> Iterator[Live]:
    import uvicorn

    from labhive.scheduler.service.server import ServeOptions, build

    data_dir.mkdir(parents=True, exist_ok=True)
    users = data_dir / "users.yaml"
    users.write_text(USERS)
    port = _free_port()
    opts = ServeOptions(port=port, db=db, data_dir=data_dir, users=users, grace_s=grace_s)
    running = build(opts)
    running.service.loop.poll_s = 0.05
    running.service.loop.start()
    config = uvicorn.Config(running.app, host="127.0.0.1", port=port, log_level="warning")
    config.lifespan = "off"
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the service did not start"
        time.sleep(0.02)
    try:
        yield Live(running.url, running.token_file.read_text().strip(), running, data_dir)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        running.service.loop.stop(stop_tasks=True)
        running.service.store.dispose()


@pytest.fixture
def live(db_url: str, tmp_path: Path) -> Iterator[Live]:
    """The service on both backends."""
    with live_service(tmp_path / "data", db_url) as service:
        yield service


@pytest.fixture
def live_sqlite(tmp_path: Path) -> Iterator[Live]:
    with live_service(tmp_path / "data") as service:
        yield service
