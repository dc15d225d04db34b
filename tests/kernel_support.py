"""Real things for the kernel extension's tests: a ``labhive serve`` subprocess with users, an
IPython kernel that runs cells the way a notebook front end or papermill sends them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import nbformat
import yaml
from jupyter_client.manager import KernelManager

from labhive.scheduler.executors.env import free_port

USERS = {
    "alice": {"token": "alice-token-123", "groups": ["students"]},
    "bob": {"token": "bob-token-456", "groups": ["students"]},
}
GROUPS = {"students": {"vcs": ["default", "vc1"]}}
VENV_BIN = str(Path(sys.executable).parent)


def venv_env(**extra: str) -> dict[str, str]:
    """This environment with the test's interpreter first on PATH: kernelspecs say ``python``."""
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.update(extra)
    return env


@dataclass
class Service:
    url: str
    data_dir: Path
    log: Path

    def token(self, user: str) -> str:
        return str(USERS[user]["token"])

    def env(self, user: str) -> dict[str, str]:
        return {"LABHIVE_URL": self.url, "LABHIVE_TOKEN": self.token(user)}


def stop_group(proc: subprocess.Popen[Any], grace_s: float = 10.0) -> None:
    """TERM the process group, then KILL it if it lingers."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


#: Debian's Chromium, driven by Playwright without a browser download.
CHROMIUM = "/usr/bin/chromium"
#: Flags for headless Chromium on a machine with no network but loopback.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]


def write_notebook(path: Path, *cells: str) -> None:
    """A notebook of code cells on the venv's python3 kernel."""
    path.parent.mkdir(parents=True, exist_ok=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)


@contextmanager
def jupyter_app(program: str, root: Path, *args: str, token: str, **env: str) -> Iterator[str]:
    """``jupyter-lab`` or ``jupyter-server`` serving ``root`` on a loopback port, stopped by
    process group afterwards; yields its base URL once it answers."""
    port = free_port()
    cmd = [
        f"{VENV_BIN}/{program}", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", *args,
    ]  # fmt: skip
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log = root.parent / f"{program}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=venv_env(**env), start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/api/status?token={token}", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, f"{program} exited: {log.read_text()}"
            assert time.monotonic() < deadline, f"{program} not up: {log.read_text()}"
            time.sleep(0.3)
        yield base
    finally:
        stop_group(proc)


@contextmanager
def labhive_serve(root: Path, *more: str) -> Iterator[Service]:
    """``labhive serve`` on a loopback port: default (virtual) cluster, local executor;
    ``more``: further options (``--fair-share 7d``)."""
    root.mkdir(parents=True, exist_ok=True)
    users = root / "users.yaml"
    users.write_text(yaml.safe_dump({"users": USERS, "groups": GROUPS}))
    port = free_port()
    data = root / "data"
    log = root / "serve.log"
    cmd = [
        *(VENV_BIN + "/labhive", "serve", "--port", str(port)),
        *("--data-dir", str(data), "--users", str(users)),
        *more,
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=venv_env(), start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"labhive serve exited {proc.returncode}: {log.read_text()}")
            try:
                if httpx.get(f"{url}/api/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"labhive serve not healthy after 60 s: {log.read_text()}")
            time.sleep(0.2)
        yield Service(url, data, log)
    finally:
        stop_group(proc)


@dataclass
class Outcome:
    """What one cell produced, with display updates applied as a notebook would."""

    stdout: str = ""
    stderr: str = ""
    displays: dict[str, dict[str, Any]] = field(default_factory=dict)  # display id -> data
    anonymous: list[dict[str, Any]] = field(default_factory=list)
    error: tuple[str, str] | None = None

    def texts(self) -> list[str]:
        items = [*self.displays.values(), *self.anonymous]
        return [d.get("text/plain", "") for d in items]


class Kernel:
    """One IPython kernel with LabHive loaded, driven over the Jupyter protocol.

    ``allow_stdin=False`` is what papermill and nbclient send; the extension reads it as "no one
    is watching" and waits for jobs by default.
    """

    def __init__(self, env: dict[str, str]) -> None:
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=venv_env(**env))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.displays: dict[str, dict[str, Any]] = {}

    def run(self, code: str, timeout: float = 60) -> Outcome:
        out = Outcome()

        def hook(msg: dict[str, Any]) -> None:
            kind, content = msg["msg_type"], msg["content"]
            transient = content.get("transient") or {}
            if kind == "stream":
                name = content["name"]
                setattr(out, name, getattr(out, name) + content["text"])
            elif kind in ("display_data", "execute_result") and transient.get("display_id"):
                self.displays[transient["display_id"]] = content["data"]
                out.displays[transient["display_id"]] = content["data"]
            elif kind in ("display_data", "execute_result"):
                out.anonymous.append(content["data"])
            elif kind == "update_display_data":
                self.displays[transient["display_id"]] = content["data"]
                out.displays[transient["display_id"]] = content["data"]
            elif kind == "error":
                out.error = (content["ename"], content["evalue"])

        reply = self.kc.execute_interactive(
            code, allow_stdin=False, output_hook=hook, timeout=timeout
        )
        if reply["content"]["status"] == "error" and out.error is None:
            out.error = (reply["content"]["ename"], reply["content"]["evalue"])
        return out

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)
