"""CPU seconds of one student's notebook server start, from its launcher until it answers.

A class of 50 on 2 cores is bound by the servers' start (docs/hub.md, "A class of 50"). This
starts the server the way the spawner does (``python -m labhive.hub_extension.launch FILE``,
FILE the launch document the spawner writes, with its command, environment and folder)
against a stub hub API (the server asks the hub its version at start), in a cgroup v1
``cpuacct`` group of its own, and reads the group's exact CPU once the server answers
``GET {prefix}api``. Runs of each variant are interleaved, so that the shared machine's load
falls on both alike; it prints each run and the min / median / max per variant.

    python benchmarks/bench_server_start.py [--runs 5] [--variant boot --variant exec]

Variants: ``boot`` is what the spawner writes now (``labhive.hub_extension.serverboot``, which
imports JupyterLab without ``node`` on PATH); ``exec`` is the plain ``jupyterhub-singleuser``
command the spawner wrote before. Run as root (the cgroup; the server gets ``--allow-root``).
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jupyterhub

from labhive.hub_extension.hubconfig import HubPlan, server_args
from labhive.hub_extension.spawner import JUPYTER_CONFIG, server_command
from labhive.scheduler.executors.env import free_port

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
VENV_BIN = Path(sys.executable).parent


TOKEN = "bench-token"
USER = "student"
SCOPES = [f"access:servers!user={USER}"]


class _StubHub(http.server.BaseHTTPRequestHandler):
    """The hub API calls a server makes: its version and activity while it starts, and who
    holds ``TOKEN`` (the student, allowed their server) when a request comes with it."""

    def do_GET(self) -> None:
        if self.path.startswith("/hub/api/user"):
            if self.headers.get("Authorization") != f"token {TOKEN}":
                self._answer({"status": 403, "message": "bad token"}, 403)
                return
            self._answer({"kind": "user", "name": USER, "admin": False, "groups": [],
                          "scopes": SCOPES, "session_id": None})  # fmt: skip
            return
        self._answer({"version": jupyterhub.__version__})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer({})

    def _answer(self, doc: dict[str, object], status: int = 200) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-JupyterHub-Version", jupyterhub.__version__)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def stub_hub() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _StubHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hub/api"
    finally:
        server.shutdown()


def launch_doc(variant: str, home: Path, port: int, hub_api: str) -> dict[str, object]:
    """The spawner's launch document for user ``student`` (see ``spawner._launch_doc``)."""
    prefix = f"/user/{USER}/"
    env = {
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
        "HOME": str(home),
        "JUPYTERHUB_API_URL": hub_api,
        "JUPYTERHUB_API_TOKEN": TOKEN,
        "JUPYTERHUB_CLIENT_ID": f"jupyterhub-user-{USER}",
        "JUPYTERHUB_USER": USER,
        "JUPYTERHUB_OAUTH_ACCESS_SCOPES": json.dumps(SCOPES),
        "JUPYTERHUB_SERVER_NAME": "",
        "JUPYTERHUB_BASE_URL": "/",
        "JUPYTERHUB_SERVICE_PREFIX": prefix,
        "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{port}{prefix}",
        "JUPYTERHUB_OAUTH_CALLBACK_URL": f"{prefix}oauth_callback",
        "JUPYTERHUB_HOST": "",
        "JUPYTER_CONFIG_PATH": str(JUPYTER_CONFIG),
        "LABHIVE_URL": "http://127.0.0.1:9/services/labhive",
    }
    args = [f"--ServerApp.port={port}", "--ServerApp.ip=127.0.0.1"]
    args += server_args(HubPlan(data_dir=str(home.parent / "hub"), service_token="unused"))
    single = str(VENV_BIN / "jupyterhub-singleuser")
    cmd = server_command([single, *args], quick_boot=variant == "boot")
    return {"env": env, "cmd": cmd, "cwd": str(home)}


@dataclass
class Server:
    """A started server: its launcher process, its URL (up to its prefix) and launch doc."""

    proc: subprocess.Popen[bytes]
    url: str
    doc: dict[str, Any]


@contextlib.contextmanager
def started_server(
    variant: str,
    tmp: Path,
    hub_api: str,
    wrap: list[str] = [],  # noqa: B006 - never changed
    group: Path | None = None,
    timeout_s: float = 180,
) -> Iterator[Server]:
    """A server started by the launcher from the spawner's launch doc (``wrap``: a command
    it runs under, e.g. strace; ``group``: a cgroup it starts in), once it answers; on the
    way out it and everything it started is killed."""
    home = Path(tempfile.mkdtemp(dir=tmp))
    port = free_port()
    doc = launch_doc(variant, home, port, hub_api)
    doc_file = home.parent / f"{home.name}.json"
    doc_file.write_text(json.dumps(doc))
    log_path = home.parent / f"{home.name}.log"
    cmd = [*wrap, sys.executable, "-m", "labhive.hub_extension.launch", str(doc_file)]

    def join() -> None:
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=join)  # fmt: skip
    url = f"http://127.0.0.1:{port}/user/{USER}/"
    try:
        deadline = time.monotonic() + timeout_s
        while not _answers(f"{url}api"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{variant}: server did not answer: {log_path.read_text()}")
            time.sleep(0.05)
        yield Server(proc, url, doc)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        shutil.rmtree(home, ignore_errors=True)


def one_start(variant: str, tmp: Path, hub_api: str) -> float:
    """CPU seconds from the launcher's start until the server answers (exact: cpuacct)."""
    group = CPUACCT / f"bench-server-start-{os.getpid()}-{time.monotonic_ns()}"
    group.mkdir()
    try:
        with started_server(variant, tmp, hub_api, group=group):
            return int((group / "cpuacct.usage").read_text()) / 1e9
    finally:
        for _ in range(50):  # the group goes once its last process is reaped
            with contextlib.suppress(OSError):
                group.rmdir()
                break
            time.sleep(0.1)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--variant", action="append", choices=["boot", "exec"])
    args = parser.parse_args()
    variants = args.variant or ["exec", "boot"]
    if not os.access(CPUACCT, os.W_OK):
        parser.error(f"needs a writable cgroup v1 {CPUACCT} (run as root)")
    seen: dict[str, list[float]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as tmp, stub_hub() as hub_api:
        for i in range(args.runs):
            for variant in variants if i % 2 == 0 else variants[::-1]:
                cpu = one_start(variant, Path(tmp), hub_api)
                seen[variant].append(cpu)
                load = os.getloadavg()[0]
                print(f"run {i + 1} {variant:<5} {cpu:.2f} CPU s (load {load:.1f})", flush=True)
    for variant, cpus in seen.items():
        print(f"{variant:<5} min {min(cpus):.2f} median {statistics.median(cpus):.2f} "
              f"max {max(cpus):.2f} CPU s over {len(cpus)} starts")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
