"""What each executor says it can do beyond the ``Executor`` protocol, and what it does.

Given the shipped executors (local processes, Kubernetes against the in-memory API server,
Slurm's client), expect each to declare exactly the optional parts the table in
``executors/capabilities.py`` gives it, and the declared parts to work (a local task's notice
file is written; Kubernetes reports a down node and a pod's address). Given an executor that
lacks a required method, expect the service's loop to refuse it at construction, naming it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from k8s_fake import FakeServer, Kubelet
from kubernetes import client as k8s
from local_exec_util import launch_one
from waiting import wait_until

from labhive.scheduler.core.config import cluster_from_gpus
from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import NodeDown
from labhive.scheduler.executors.base import TaskExit, TaskHandle, TaskLaunch
from labhive.scheduler.executors.capabilities import (
    REQUIRED,
    DeviceGuard,
    NodeHealth,
    Notices,
    OutputCapped,
    TaskAddresses,
    require_executor,
)
from labhive.scheduler.executors.kubernetes import KubernetesExecutor
from labhive.scheduler.executors.local import LocalExecutor
from labhive.scheduler.executors.notice_file import notice_path
from labhive.scheduler.executors.slurm import SlurmExecutor
from labhive.scheduler.policies import get_policy
from labhive.scheduler.service.loop import SchedulerLoop
from labhive.scheduler.service.store import Store, database_url

PARTS = (Notices, NodeHealth, TaskAddresses, OutputCapped, DeviceGuard)
#: executor name -> (its optional parts, partial_stops): the module docstring's table.
DECLARED = {
    "local": ({Notices, OutputCapped, DeviceGuard}, True),
    "kubernetes": ({NodeHealth, TaskAddresses, OutputCapped}, False),
    "slurm": ({NodeHealth, OutputCapped}, False),
}


class _Node:
    def __init__(self, name: str, gpus: int) -> None:
        self.name, self.gpus = name, gpus


@pytest.fixture
def k8s_cluster() -> Iterator[tuple[FakeServer, KubernetesExecutor]]:
    with FakeServer({"node-a": 4}) as server:
        kubelet = Kubelet(server.api).start()
        conf = k8s.Configuration(host=server.url)
        ex = KubernetesExecutor(
            k8s.ApiClient(conf), "labhive", nodes=(_Node("node-a", 4),),
            watch_timeout_s=1, node_poll_s=0.0,
        )  # fmt: skip
        yield server, ex
        ex.close()
        kubelet.close()


def _shipped(tmp_path: Path, kube: KubernetesExecutor) -> dict[str, Any]:
    return {
        "local": LocalExecutor(tmp_path / "local"),
        "kubernetes": kube,
        "slurm": SlurmExecutor(tmp_path / "slurm"),
    }


def test_each_shipped_executor_declares_the_parts_of_the_table(
    tmp_path: Path, k8s_cluster: tuple[FakeServer, KubernetesExecutor]
) -> None:
    """Given each executor the service ships, expect it to be an ``Executor`` and to have
    exactly the optional parts the table gives it."""
    for name, executor in _shipped(tmp_path, k8s_cluster[1]).items():
        parts, partial = DECLARED[name]
        assert require_executor(executor) is executor
        assert executor.name == name
        assert executor.partial_stops is partial, name
        has = {part for part in PARTS if isinstance(executor, part)}
        assert has == parts, f"{name}: declares {has}, the table says {parts}"


def test_local_notices_are_written_where_the_task_reads_them(tmp_path: Path) -> None:
    """Given a running local task, expect its declared ``Notices`` part to write the notice
    file in the task's work dir, and to remove it again."""
    ex = LocalExecutor(tmp_path / "local")
    handle = launch_one(ex, "j1", "sleep 30")
    try:
        assert isinstance(ex, Notices)
        ex.notify([handle], {"deadline": 123.0})
        notice = notice_path(Path(handle.info["workdir"]))
        assert json.loads(notice.read_text())["deadline"] == 123.0
        ex.notify([handle], None)
        assert not notice.exists()
    finally:
        ex.stop([handle], 1.0)


def test_kubernetes_reports_node_health_and_pod_addresses(
    k8s_cluster: tuple[FakeServer, KubernetesExecutor],
) -> None:
    """Given a pod bound to a node, expect the declared ``TaskAddresses`` to report its IP
    once the kubelet runs it, and ``NodeHealth`` to report the node going down."""
    server, ex = k8s_cluster
    from test_k8s_executor import gang  # the k8s tests' own task builder

    [handle] = ex.launch(gang("j1", "sleep 30", nodes=("node-a",)))
    learnt: dict[Any, str] = {}
    wait_until(lambda: learnt.update(ex.addresses()) or handle.key in learnt, "pod address")
    server.api.set_ready("node-a", False)
    assert any(isinstance(e, NodeDown) and e.node == "node-a" for e in ex.node_events())


class NoPoll:
    """A half-written executor: everything but ``poll``."""

    name = "nopoll"
    partial_stops = False

    def launch(self, tasks: Sequence[TaskLaunch]) -> list[TaskHandle]:
        return []

    def stop(self, handles: Sequence[TaskHandle], grace_s: float) -> None:
        pass

    def adopt(self, handles: Sequence[TaskHandle]) -> list[TaskExit]:
        return []

    def read_log(self, handle: TaskHandle, stream: str, offset: int, limit: int) -> bytes:
        return b""

    def observations(self, handle: TaskHandle) -> list[str]:
        return []


def never_loaded(row: dict[str, Any]) -> JobSpec:
    raise AssertionError("a loop refused at its construction loads no job")


def test_an_executor_without_poll_is_refused_when_the_loop_is_built(tmp_path: Path) -> None:
    """Given an executor that lacks ``poll``, expect the loop's constructor to refuse it with
    an error that names ``poll``, before any pass could call it."""
    assert "poll" in REQUIRED and "partial_stops" in REQUIRED
    store = Store(database_url(None, tmp_path))
    store.migrate()
    config = cluster_from_gpus("n1", 1, vcs=("vc1",))
    try:
        with pytest.raises(TypeError, match=r"NoPoll is not an executor: it lacks poll \("):
            # NoPoll is no Executor: the point is that the loop's constructor says so.
            SchedulerLoop(store, lambda: get_policy("hived", config), NoPoll(), never_loaded)  # type: ignore[arg-type]
    finally:
        store.dispose()


def test_the_hub_authenticator_declares_its_browser_login_and_tokens_do_not(
    tmp_path: Path,
) -> None:
    """Given the two authenticators the service ships, expect the hub's to say it may block
    (it asks JupyterHub) and to bring a browser login (``wrap`` gates the app with OAuth),
    and the tokens' to answer inline with no login flow of its own."""
    from labhive.hub_extension.hubauth import HubAuthenticator, HubSettings, OAuthGate
    from labhive.scheduler.service.auth import BrowserLogin, TokenAuthenticator

    hub = HubAuthenticator(HubSettings("http://127.0.0.1:1/hub/api", "t" * 32), {})
    tokens = TokenAuthenticator("a" * 32, {})
    assert hub.blocking is True and tokens.blocking is False
    assert isinstance(hub, BrowserLogin) and not isinstance(tokens, BrowserLogin)
    app = object()
    assert isinstance(hub.wrap(app), OAuthGate)
