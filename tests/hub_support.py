"""A real JupyterHub for tests: configurable-http-proxy, the LabHive spawner, the service as a
hub-managed service, DummyAuthenticator, on loopback high ports; stopped by process group."""

from __future__ import annotations

import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

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
def real_hub(root: Path, *extra: str, **changes: Any) -> Iterator[Hub]:
    """The test hub on its own ports; ``extra``: lines added to the hub's config (after the
    plan's); ``changes`` replace fields of its plan (say, the native authenticator with
    passwords instead of DummyAuthenticator)."""
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
    plan = replace(plan, **changes)
    config = write_config(plan, Path(plan.data_dir), *extra)
    hub = Hub(plan, config, Path(plan.data_dir) / "jupyterhub.log")
    try:
        hub.start()
        yield hub
    finally:
        cancel_everything(hub)
        hub.stop()


def login_form(http: httpx.Client, page: str = "/hub/login") -> str:
    """A form's XSRF token, as a browser gets it with the page (and its cookie)."""
    form = http.get(page)
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', form.text)
    assert xsrf, f"no _xsrf in {page} ({form.status_code}): {form.text[:500]}"
    return xsrf.group(1)


def try_login(hub: str, name: str, password: str) -> tuple[httpx.Client, httpx.Response]:
    """Post the login form as a browser does; the session and the hub's answer (a 302 to
    /hub/spawn when the login worked)."""
    http = httpx.Client(base_url=hub, timeout=60)
    xsrf = login_form(http)
    answer = http.post(
        "/hub/login?next=%2Fhub%2Fspawn",
        data={"username": name, "password": password, "_xsrf": xsrf},
    )
    return http, answer


def logged_in(answer: httpx.Response) -> bool:
    return answer.status_code == 302 and answer.headers["location"].endswith("/hub/spawn")


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


def wait_for(predicate: Callable[[], T | None], timeout: float, what: str, step: float = 0.3) -> T:
    """The predicate's first truthy value (never None), polled until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(step)


@dataclass
class Up:
    """A ``labhive up`` started by a test: its banner, ports and data dir."""

    banner: str
    url: str
    service_url: str
    data: Path


#: The line every ``labhive up`` banner ends with, whatever the executor (``hub_extension/up.py``
#: prints it last: its own or the engine's ``GPU devices`` line).
BANNER_LAST = "  GPU devices: "


def read_up_banner(up: subprocess.Popen[str], timeout: float = 300.0, drain: bool = True) -> str:
    """``labhive up``'s output up to its banner's last line (the one reader of the banner, for
    the tests and the classroom benchmark). ``up`` is killed if the banner takes more than
    ``timeout`` s; a RuntimeError, with what it printed, if it did not come up. With ``drain``
    a thread keeps reading the rest, so ``up`` never blocks on a full pipe."""
    import threading

    lines: list[str] = []

    def kill_if_running() -> None:
        if up.poll() is None:
            up.kill()

    timer = threading.Timer(timeout, kill_if_running)
    timer.start()
    try:
        for line in up.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if line.startswith(BANNER_LAST):
                break
    finally:
        timer.cancel()
    banner = "".join(lines)
    if "LabHive is up" not in banner:
        raise RuntimeError(f"labhive up did not start (status {up.poll()}):\n{banner}")
    if drain:
        threading.Thread(target=up.stdout.read, daemon=True).start()  # type: ignore[union-attr]
    return banner


@contextmanager
def labhive_up(data: Path, *args: str) -> Iterator[Up]:
    """``labhive up --data-dir DATA ARGS`` as an instructor starts it, until its banner's last
    line; Ctrl-C at the end, as the instructor stops it."""
    import os
    import signal
    import sys

    port, service_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "labhive.scheduler.cli", "up", "--port", str(port)]
    cmd += ["--service-port", str(service_port), "--data-dir", str(data), "--grace-s", "2", *args]
    up = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=venv_env(),
        start_new_session=True,
    )  # fmt: skip
    try:
        banner = read_up_banner(up)
        yield Up(banner, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{service_port}", data)
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGINT)
            try:
                up.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(up.pid, signal.SIGKILL)
                up.wait()


def user_token(http: httpx.Client, name: str) -> str:
    """An API token a logged-in user makes for themselves (as on /hub/token)."""
    made = http.post(
        f"/hub/api/users/{name}/tokens",
        json={"note": "test"},
        headers={"X-XSRFToken": http.cookies.get("_xsrf") or ""},
    )
    assert made.status_code == 201, made.text
    return str(made.json()["token"])
