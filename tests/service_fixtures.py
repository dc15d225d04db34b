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
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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
