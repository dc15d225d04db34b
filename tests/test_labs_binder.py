"""The one-click environment, built the way repo2docker builds it, in a fresh virtualenv:
``binder/requirements.txt``, then ``binder/postBuild`` from the repository root, then
``binder/start`` wrapping a command the way it wraps JupyterLab. Expect the command to find a
running LabHive service through the environment ``start`` exported, and a lab's magic to work.

uv makes the virtualenv and the installs fast (its cache is shared); without uv, the standard
library's venv and pip do the same steps, more slowly.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from kernel_support import free_port
from labs_support import REPO, last_output

BINDER = REPO / "binder"
BOUND_S = 600  # an install from a cold cache on a slow link; a warm one takes seconds


def fresh_venv(where: Path) -> Path:
    if shutil.which("uv"):
        subprocess.run(["uv", "venv", "-q", "--python", sys.executable, str(where)], check=True)
        pip = ["uv", "pip", "install", "-q", "--python", str(where / "bin" / "python")]
    else:
        subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
        pip = [str(where / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "-r", str(BINDER / "requirements.txt")], check=True, timeout=BOUND_S)
    return where / "bin"


def test_binder_installs_labhive_and_starts_the_service_beside_the_server(tmp_path: Path) -> None:
    bin_dir = fresh_venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LABHIVE_", "VIRTUAL_ENV"))}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(bin_dir.parent),
        HOME=str(tmp_path / "home"),
        LABHIVE_DATA_DIR=str(tmp_path / "labhive"),
        LABHIVE_PORT=str(free_port()),
        # repo2docker runs all of it as one unprivileged user, whose service runs tasks as
        # itself; this suite runs as root, where users' uids could not run the venv under /tmp
        LABHIVE_TASK_IDENTITY="service",
    )
    build = subprocess.run(
        ["bash", str(BINDER / "postBuild")], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=BOUND_S,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    assert build.stdout.strip().endswith("labhive 0.1.0")

    # What a student would do in JupyterLab: run a notebook against the service `start` launched.
    out = tmp_path / "watch.ipynb"
    notebook = REPO / "notebooks" / "submit_and_watch.ipynb"
    command = [str(bin_dir / "papermill"), "--cwd", str(notebook.parent), str(notebook), str(out)]
    pid_file = tmp_path / "labhive" / "serve.pid"
    try:
        started = subprocess.run(
            ["bash", str(BINDER / "start"), *command],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-3000:]
        assert f"LabHive service at http://127.0.0.1:{env['LABHIVE_PORT']}" in started.stdout
        assert last_output(json.loads(out.read_text())).startswith("job report: SUCCEEDED")
    finally:
        if pid_file.exists():
            pid = int(pid_file.read_text())
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
