"""``labhive serve`` as a separate process, for benchmarks and for tests that kill it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from pg_throwaway import free_port
from waiting import wait_until

from labhive.scheduler.client import Client, ServiceUnavailable


@dataclass(frozen=True)
class Served:
    url: str  # the API root, ``http://127.0.0.1:PORT/api/v1``
    port: int
    proc: subprocess.Popen[bytes]


@contextmanager
def serve_process(
    tmp: Path, cluster: Path, *args: str, stop_timeout_s: float = 120.0
) -> Iterator[Served]:
    """Start ``labhive serve`` on ``cluster`` with its data in ``tmp/data`` (and any further
    ``args``), wait until ``/health`` answers (its log in ``tmp/service.log`` if it never
    does), and stop it with SIGINT on exit."""
    port = free_port()
    cmd = [
        sys.executable, "-m", "labhive.scheduler.cli", "serve", "--port", str(port),
        "--data-dir", str(tmp / "data"), "--cluster", str(cluster), *args,
    ]  # fmt: skip
    log = (tmp / "service.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/api/v1"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError((tmp / "service.log").read_text())
        time.sleep(0.1)
    try:
        yield Served(url, port, proc)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=stop_timeout_s)
        log.close()


def spawn_service(
    data_dir: Path, port: int, grace_s: float = 1.0, *args: str
) -> subprocess.Popen[bytes]:
    """``labhive serve`` in its own session (a kill -9 of it leaves the tasks alone), once it
    answers on ``port``; the caller kills or stops it. ``args``: more options."""
    cmd = [sys.executable, "-m", "labhive.scheduler.cli", "serve", "--port", str(port)]
    cmd += ["--data-dir", str(data_dir), "--grace-s", str(grace_s), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, start_new_session=True)
    client = Client(f"http://127.0.0.1:{port}/api/v1", "unused")

    def up() -> bool:
        assert proc.poll() is None, "the service exited"
        try:
            client.health()
            return True
        except ServiceUnavailable:
            return False

    wait_until(up, what="the service to answer")
    return proc
