"""A throwaway PostgreSQL server on loopback, for the service tests and its benchmark.

Debian's ``postgresql`` package (installed by .ci/deps.sh) provides the binaries; the server is
initdb'ed into a temp dir and run as the ``postgres`` user when we are root (PostgreSQL refuses
to run as root), with trust auth on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from labhive.scheduler.executors.env import free_port

_counter = itertools.count()


def _pg_bin(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        raise RuntimeError(f"{name} not found: install Debian's postgresql package (.ci/deps.sh)")
    return found


def _as_postgres(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


@contextmanager
def throwaway_postgres(fsync: bool = False, password: str | None = None) -> Iterator[str]:
    """A running server; yields its base URL (append /DBNAME). ``fsync=False`` trades crash
    safety of the throwaway data for test speed. With ``password`` every connection must give
    it (scram-sha-256, as a real deployment's server asks; the URL carries it), else anyone on
    loopback is let in (trust)."""
    # Not under pytest's tmp_path: its parents are private to root, and the server runs as
    # the postgres user.
    root = Path(tempfile.mkdtemp(prefix="labhive-pg-"))
    data = root / "data"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    initdb = [_pg_bin("initdb"), "-D", str(data), "-U", "postgres", "-E", "UTF8"]
    if password is None:
        initdb.append("--auth=trust")
    else:
        pwfile = root / "pwfile"
        pwfile.write_text(password + "\n")
        if os.geteuid() == 0:
            shutil.chown(pwfile, "postgres")
        initdb += ["--auth=scram-sha-256", f"--pwfile={pwfile}"]
    subprocess.run(_as_postgres(initdb), check=True, capture_output=True)
    port = free_port()
    cmd = [
        _pg_bin("postgres"), "-D", str(data), "-p", str(port), "-h", "127.0.0.1",
        "-k", str(root), "-c", "max_connections=200",
    ]  # fmt: skip
    if not fsync:
        cmd.append("-F")
    log = (root / "server.log").open("wb")
    proc = subprocess.Popen(
        _as_postgres(cmd), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    who = "postgres" if password is None else f"postgres:{password}"
    url = f"postgresql://{who}@127.0.0.1:{port}"
    try:
        _wait_ready(url, proc, root)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # PostgreSQL's fast shutdown
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(root, ignore_errors=True)


def _wait_ready(url: str, proc: subprocess.Popen[bytes] | None, root: Path) -> None:
    import psycopg

    deadline = time.monotonic() + 30
    while True:
        try:
            psycopg.connect(f"{url}/postgres", connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
                raise RuntimeError(
                    f"PostgreSQL did not start: {(root / 'server.log').read_text()}"
                ) from None
            time.sleep(0.1)


def new_database(server: str) -> str:
    """A fresh, empty database on the server; returns its URL."""
    import psycopg

    name = f"labhive_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{server}/{name}"


class PgCtlServer:
    """A throwaway server run by ``pg_ctl``, which a test can stop and start again under a
    running service (a database outage): same data, same port."""

    def __init__(self, root: Path, port: int) -> None:
        self.root, self.port = root, port
        self.data = root / "data"
        self.url = f"postgresql://postgres@127.0.0.1:{port}"

    def _ctl(self, *args: str) -> None:
        cmd = [_pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log")]
        subprocess.run(_as_postgres([*cmd, *args]), check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        opts = f"-p {self.port} -h 127.0.0.1 -k {self.root} -F"
        self._ctl("-w", "-o", opts, "start")
        _wait_ready(self.url, None, self.root)

    def stop(self) -> None:
        self._ctl("-w", "-m", "fast", "stop")


@contextmanager
def pg_ctl_postgres() -> Iterator[PgCtlServer]:
    """A running ``PgCtlServer``; stopped and removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="labhive-pgctl-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    initdb = [_pg_bin("initdb"), "-D", str(root / "data"), "-U", "postgres", "--auth=trust"]
    subprocess.run(_as_postgres([*initdb, "-E", "UTF8"]), check=True, capture_output=True)
    server = PgCtlServer(root, free_port())
    try:
        server.start()
        yield server
    finally:
        with contextlib.suppress(subprocess.SubprocessError):
            server.stop()
        shutil.rmtree(root, ignore_errors=True)
