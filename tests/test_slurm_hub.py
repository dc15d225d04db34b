"""A notebook server's pieces on a real Slurm node (each node in its own network namespace).

Given the job service with ``--executor slurm`` and a server job as the spawner writes it in
``server_on_nodes`` mode, expect the task's address in ``GET /jobs/{id}`` to be its node's on
the bridge (not the hub's loopback), the hub (this test, in the root namespace) to hand the
server's token to the launcher on that node over TCP, and the server started there to be
reached from the root namespace at that address, holding the token, while neither the job
store nor the task's files on the shared filesystem ever held it.
"""

from __future__ import annotations

import secrets
import socket
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hub_support import Hub, cancel_everything, wait_for
from kernel_support import CHROMIUM, CHROMIUM_FLAGS, write_notebook
from pg_throwaway import free_port
from slurm_cluster import SlurmCluster
from test_hub_real import jobs_named, login
from test_slurm_service import service, state
from waiting import wait_until

from labhive.hub_extension.hubconfig import HubPlan, write_config
from labhive.hub_extension.launch import hand_over
from labhive.hub_extension.spawner import handoff_command

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
pytest_plugins = ["slurm_cluster"]

TOKEN = "hub-token-for-alices-server-0123456789"
KEY = "one-time-handoff-key-abcdefghijklmnopqrstu"
#: A stand-in for jupyterhub-singleuser: answers GET / with its node's name and its token.
SERVER = (
    "import http.server, os, socket, sys\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        body = f\"{socket.gethostname()} {os.environ['JUPYTERHUB_API_TOKEN']}\".encode()\n"
    "        self.send_response(200); self.end_headers(); self.wfile.write(body)\n"
    "http.server.HTTPServer(('0.0.0.0', int(sys.argv[1])), H).serve_forever()\n"
)


def test_a_server_on_a_slurm_node_gets_its_token_by_handoff_and_is_reached_there(
    slurm: SlurmCluster, data_dir: Path
) -> None:
    port = free_port()  # the hub picks it; the launcher checks it is free on its node
    doc = {
        "env": {"JUPYTERHUB_USER": "alice"},
        "cmd": [sys.executable, "-c", SERVER, str(port)],
        "cwd": str(data_dir / "alice-home"),
    }
    launcher = f"{sys.executable} -m labhive.hub_extension.launch"
    with service(slurm, data_dir) as alice:
        job = alice.submit(command=handoff_command(launcher, port, doc, KEY), name="jupyter-alice")
        state(job, "RUNNING")  # recorded before Slurm is asked: the address comes with the launch
        task = wait_until(lambda: _addressed(job), "the task's address", timeout=60)
        assert task["address"] == slurm.address(task["node"]) != "127.0.0.1"

        def handed() -> bool:
            try:
                hand_over(task["address"], port, KEY, {"JUPYTERHUB_API_TOKEN": TOKEN})
            except OSError:
                return False
            return True

        wait_until(handed, "the launcher on the node to take the token", timeout=60)
        url = f"http://{task['address']}:{port}/"
        body = wait_until(lambda: _get(url), f"the server at {url}", timeout=60)
        assert body == f"{task['node']} {TOKEN}"
        assert (data_dir / "alice-home").is_dir()  # made by the launcher on the node
        assert TOKEN not in str(alice.job(job.id).data)
        alice.cancel(job.id, wait=30)
    assert not [p for p in data_dir.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]


def _addressed(job: Any) -> dict[str, Any] | None:
    tasks = job.refresh().tasks
    return tasks[0] if tasks and tasks[0].get("address") else None


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return str(r.read().decode())
    except OSError:
        return None


# ---- the whole chain: a real hub in the root namespace, the server on a Slurm node ------------


@contextmanager
def hub_on_slurm(slurm: SlurmCluster, root: Path) -> Iterator[Hub]:
    """A real JupyterHub whose LabHive service runs jobs on the namespaced Slurm nodes: the
    hub's API and proxy listen on the bridge too, so a server on a node reaches the hub, and
    its kernel reaches the service through the proxy."""
    from labhive.scheduler.executors.slurm_cli import Slurm
    from labhive.scheduler.executors.slurm_config import cluster_from_slurm

    (root / "cluster.yaml").write_text(cluster_from_slurm(Slurm(conf=str(slurm.conf))))
    (root / "grants.yaml").write_text("groups:\n  lab: {vcs: [default]}\n")
    bridge = f"{slurm.subnet}.1"
    plan = HubPlan(
        data_dir=str(root / "hub"), service_token=secrets.token_hex(32),
        public_port=free_port(), hub_port=free_port(), proxy_api_port=free_port(),
        service_port=free_port(), grants=str(root / "grants.yaml"),
        cluster=str(root / "cluster.yaml"), authenticator="dummy", admin_users=["teacher"],
        groups={"lab": ["alice"]}, notebook_dir=str(root / "home" / "{username}"), grace_s=2,
        server_args=["--LabApp.expose_app_in_browser=True",
                     "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
    )  # fmt: skip
    slurm_opts = ["--executor", "slurm", "--slurm-conf", str(slurm.conf)]
    extra = [
        f"c.JupyterHub.bind_url = 'http://0.0.0.0:{plan.public_port}'",
        f"c.JupyterHub.hub_bind_url = 'http://0.0.0.0:{plan.hub_port}'",
        f"c.JupyterHub.hub_connect_ip = {bridge!r}",
        "c.LabHiveSpawner.server_on_nodes = True",
        f"c.LabHiveSpawner.server_service_url = 'http://{bridge}:{plan.public_port}/services/labhive'",
        f"c.JupyterHub.services[0]['command'] += {slurm_opts!r}",
    ]
    config = write_config(plan, Path(plan.data_dir), *extra)
    hub = Hub(plan, config, Path(plan.data_dir) / "jupyterhub.log")
    try:
        hub.start()
        yield hub
    finally:
        cancel_everything(hub)
        hub.stop()


def test_a_hub_users_server_runs_on_a_slurm_node_opens_lab_and_submits(
    slurm: SlurmCluster, data_dir: Path
) -> None:
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "install Debian's chromium (.ci/deps.sh does)"
    home = data_dir / "home" / "alice"
    write_notebook(
        home / "submit.ipynb",
        "import socket; open('where.txt', 'w').write(socket.gethostname())",
        "%load_ext labhive.kernel_ext\n%submit --name from-kernel --gpus 1 -- hostname",
    )
    with hub_on_slurm(slurm, data_dir) as hub, sync_playwright() as pw:
        admin = hub.admin()
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        alice = login(browser, hub, "alice")
        alice.wait_for_url("**/user/alice/lab**", timeout=180_000)
        alice.wait_for_selector("#jp-main-dock-panel", timeout=60_000)
        (server,) = jobs_named(admin, "jupyter-alice")
        task = server.refresh().tasks[0]
        assert task["address"] == slurm.address(task["node"])  # reached on the bridge

        alice.goto(f"{hub.url}/user/alice/lab/tree/submit.ipynb")
        alice.wait_for_function("() => document.body.innerText.includes('| Idle')")
        alice.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        (mine,) = wait_for(lambda: jobs_named(admin, "from-kernel"), 90, "%submit's job")
        assert mine.user == "alice"
        wait_for(lambda: mine.refresh().done, 90, "alice's job to finish")
        assert mine.state == "SUCCEEDED", mine.data
        assert (home / "where.txt").read_text() == task["node"]  # the kernel ran on the node
        assert socket.gethostname() != task["node"]
        browser.close()
    leaked = [p for p in data_dir.rglob("*") if p.is_file() and "servers" in p.parts]
    assert not leaked, f"launch files on the hub's filesystem: {leaked}"
