"""The Jupyter server extension outside a hub: a plain ``jupyter server`` next to a standalone
``labhive serve``. The extension is enabled by the config file the package ships; it serves
the service under ``/labhive/api/`` with the server's LabHive identity, and the kernels it
starts find the service through ``LABHIVE_URL``."""

from __future__ import annotations

import json
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
from kernel_support import jupyter_app, labhive_serve

from labhive.hub_extension.spawner import JUPYTER_CONFIG

TOKEN = "labhive-ext-test"


def jupyter_server(root: Path, *args: str, **env: str) -> AbstractContextManager[str]:
    return jupyter_app("jupyter-server", root, *args, token=TOKEN, **env)


def env_dump_kernel(folder: Path, out: Path) -> Path:
    """A kernelspec whose 'kernel' writes the LABHIVE_URL it was started with, then exits."""
    spec = folder / "kernels" / "envdump"
    spec.mkdir(parents=True)
    code = "import os, sys; open(sys.argv[1], 'w').write(os.environ.get('LABHIVE_URL', '-'))"
    argv = [sys.executable, "-c", code, str(out), "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "env", "language": "python"})
    )
    return folder


def test_the_server_extension_serves_the_service_as_its_user_and_points_kernels_at_it(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    dumped = tmp_path / "kernel-env.txt"
    kernels = env_dump_kernel(tmp_path / "share", dumped)
    with (
        labhive_serve(tmp_path / "svc") as svc,
        jupyter_server(
            root,
            f"--LabHiveServerExt.service_url={svc.url}",
            JUPYTER_CONFIG_PATH=str(JUPYTER_CONFIG),  # the file the package installs
            JUPYTER_PATH=str(kernels),
            LABHIVE_TOKEN=svc.token("alice"),
        ) as base,
    ):
        http = httpx.Client(base_url=base, headers={"Authorization": f"token {TOKEN}"})
        vcs = http.get("/labhive/api/v1/vcs")
        assert vcs.status_code == 200, vcs.text
        assert vcs.json()["vcs"]["vc1"]["may_submit"] is True

        made = http.post("/labhive/api/v1/jobs", json={"name": "via-ext", "command": "true"})
        assert made.status_code == 201, made.text
        assert made.json()["user"] == "alice"
        missing = http.get("/labhive/api/v1/jobs/99999")
        assert missing.status_code == 404 and "no job 99999" in missing.json()["detail"]
        assert httpx.get(f"{base}/labhive/api/v1/vcs").status_code == 403  # no login

        started = http.post("/api/kernels", json={"name": "envdump"})
        assert started.status_code == 201, started.text
        deadline = time.monotonic() + 20
        while not dumped.exists() or not dumped.read_text():
            assert time.monotonic() < deadline, "the kernel never started"
            time.sleep(0.2)
        assert dumped.read_text() == f"{svc.url}/api/v1"
