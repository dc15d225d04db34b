"""A notebook server's pieces on a real Slurm node (each node in its own network namespace).

Given the job service with ``--executor slurm`` and a server job as the spawner writes it in
``server_on_nodes`` mode, expect the task's address in ``GET /jobs/{id}`` to be its node's on
the bridge (not the hub's loopback), the hub (this test, in the root namespace) to hand the
server's token to the launcher on that node over TCP, and the server started there to be
reached from the root namespace at that address, holding the token, while neither the job
store nor the task's files on the shared filesystem ever held it.
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from pg_throwaway import free_port
from slurm_cluster import SlurmCluster
from test_slurm_service import service, state
from waiting import wait_until

from labhive.hub_extension.launch import hand_over
from labhive.hub_extension.spawner import handoff_command

pytestmark = pytest.mark.slow
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
