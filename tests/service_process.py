"""``labhive serve`` as a separate process, answering on a free loopback port (benchmarks)."""

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
