"""A real JupyterHub for tests: configurable-http-proxy, the LabHive spawner, the service as a
hub-managed service, DummyAuthenticator, on loopback high ports; stopped by process group."""

from __future__ import annotations

import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx
from kernel_support import free_port, venv_env

from labhive.client import Client
from labhive.hub_extension.hubconfig import HubPlan, write_config
from labhive.hub_extension.up import start_hub, stop_group, wait_ready

T = TypeVar("T")
#: One node of 4 GPU slots: vc1 and default get 2 each.
CLUSTER = """\
physicalCluster:
  cellTypes:
    NODE: {childCellType: GPU, childCellNumber: 4, isNodeLevel: true}
  physicalCells:
    - {cellType: NODE, cellAddress: node-0}
virtualClusters:
  vc1: {virtualCells: [{cellType: NODE.GPU, cellNumber: 2}]}
  default: {virtualCells: [{cellType: NODE.GPU, cellNumber: 2}]}
"""
GRANTS = """\
groups:
  vc1-users: {vcs: [vc1]}
  others: {vcs: [default]}
  instructors: {vcs: ["*"], admin: true}
"""


@dataclass
class Hub:
    plan: HubPlan
    config: Path
    log: Path
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return self.plan.public_url

    def admin(self) -> Client:
        """The service as the spawner's token sees it: a LabHive admin."""
        return Client(self.plan.service_url, self.plan.service_token)

    def start(self) -> None:
        assert shutil.which("configurable-http-proxy"), "npm install -g configurable-http-proxy"
        self.proc = start_hub(self.config, self.log, env=venv_env())
        wait_ready(self.plan, self.proc, self.log, timeout=150)

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, grace_s=30)
            self.proc = None
        for port in (self.plan.public_port, self.plan.service_port):
            _wait_port_free(port)


@contextmanager
def real_hub(root: Path, *extra: str) -> Iterator[Hub]:
    """``extra``: lines added to the hub's config (after the plan's)."""
    (root / "cluster.yaml").write_text(CLUSTER)
    (root / "grants.yaml").write_text(GRANTS)
    plan = HubPlan(
        data_dir=str(root / "hub"),
        service_token=secrets.token_hex(32),
        public_port=free_port(),
        hub_port=free_port(),
        proxy_api_port=free_port(),
        service_port=free_port(),
        grants=str(root / "grants.yaml"),
        cluster=str(root / "cluster.yaml"),
        authenticator="dummy",
        admin_users=["teacher"],
        groups={"vc1-users": ["alice"], "others": ["bob"]},
        cleanup_servers=False,  # a restarted hub must find alice's server still running
        profiles=[{"slug": "1gpu", "display_name": "1 GPU", "gpus": 1}],
        server_args=[
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        notebook_dir=str(root / "home" / "{username}"),
        grace_s=2,
        poll_interval=2,  # the hub notices a preempted server quickly
    )
    config = write_config(plan, Path(plan.data_dir), *extra)
    hub = Hub(plan, config, Path(plan.data_dir) / "jupyterhub.log")
    try:
        hub.start()
        yield hub
    finally:
        cancel_everything(hub)
        hub.stop()


def cancel_everything(hub: Hub) -> None:
    """Cancel every job until none is left (a cancel can let a waiting job start)."""
    try:
        with hub.admin() as admin:
            for _ in range(10):
                active = admin.jobs(state="RUNNING") + admin.jobs(state="WAITING")
                if not active:
                    return
                for job in active:
                    admin.cancel(job.id, wait=10)
        print("teardown: jobs still active after 10 rounds of cancelling")
    except Exception as err:  # teardown goes on: the process group is stopped next
        print(f"teardown: could not cancel jobs: {err}")


def _wait_port_free(port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
        except httpx.TransportError:
            return
        time.sleep(0.3)
    raise AssertionError(f"port {port} still answers after the hub stopped")


def wait_for(predicate: Callable[[], T], timeout: float, what: str, step: float = 0.3) -> T:
    """The predicate's first truthy value, polled until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(step)
