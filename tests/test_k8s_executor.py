"""The Kubernetes executor against an in-memory API server (tests/k8s_fake.py) and fake kubelet.

Given a cluster of GPU nodes and the tasks the core placed, expect pods bound where the core
said, the gang created whole before any bind, exits and requeues from pod phases, and state that
survives a restart of LabHive and a 410 Gone on the watch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from k8s_fake import FakeServer, Kubelet
from kubernetes import client as k8s
from waiting import wait_until

from labhive.scheduler.core.model import NodeDown, NodeUp
from labhive.scheduler.executors.base import (
    LaunchError,
    TaskExit,
    TaskHandle,
    TaskKey,
    TaskLaunch,
)
from labhive.scheduler.executors.k8s_objects import (
    A_LEAF_CELLS,
    L_JOB,
    L_VC,
    PodOptions,
    pod_manifest,
    pod_name,
    task_env,
)
from labhive.scheduler.executors.kubernetes import KubernetesExecutor

NS = "labhive"
pytestmark = [pytest.mark.timeout(30), pytest.mark.k8s]


@dataclass(frozen=True)
class Node:
    """A node as the cluster config lists it: a name and its GPU count."""

    name: str
    gpus: int


CONFIG = (Node("node-a", 4), Node("node-b", 4))


@pytest.fixture
def cluster() -> Iterator[tuple[FakeServer, Kubelet]]:
    with FakeServer({"node-a": 4, "node-b": 4}) as server:
        kubelet = Kubelet(server.api).start()
        yield server, kubelet
        kubelet.close()


def executor(server: FakeServer, **options: object) -> KubernetesExecutor:
    conf = k8s.Configuration(host=server.url)
    options = {"watch_timeout_s": 1, "stop_slack_s": 3.0, "node_poll_s": 0.0, **options}
    return KubernetesExecutor(k8s.ApiClient(conf), NS, nodes=CONFIG, **options)  # type: ignore[arg-type]


@pytest.fixture
def lh(cluster: tuple[FakeServer, Kubelet]) -> Iterator[KubernetesExecutor]:
    ex = executor(cluster[0])
    yield ex
    ex.close()


def gang(job: str, command: str, nodes: tuple[str, ...] = ("node-a", "node-b"), **kw: object):
    return [
        TaskLaunch(
            key=TaskKey(job, 0, "worker", i),
            job_name=job,
            command=command,
            node=node,
            gpus=(2, 3),
            vc="vc1",
            env={"PAI_TASK_ROLE_LIST": "worker"},
            **kw,  # type: ignore[arg-type]
        )
        for i, node in enumerate(nodes)
    ]


def exits(lh: KubernetesExecutor, count: int) -> list[TaskExit]:
    got: list[TaskExit] = []

    def more() -> bool:
        got.extend(lh.poll())
        return len(got) >= count

    wait_until(more, what=f"{count} task exits")
    return sorted(got, key=lambda e: e.key.index)


def test_a_gang_is_created_whole_then_bound_where_the_core_placed_it(cluster, lh) -> None:
    server, _ = cluster
    handles = lh.launch(gang("job1", "echo hi; exit 0"))
    writes = [p for m, p, _, _ in server.api.requests if m == "POST" and "/events" not in p]
    assert writes == [
        "/api/v1/namespaces/labhive/pods",
        "/api/v1/namespaces/labhive/pods",
        "/api/v1/namespaces/labhive/services",
        f"/api/v1/namespaces/labhive/pods/{handles[0].info['pod']}/binding",
        f"/api/v1/namespaces/labhive/pods/{handles[1].info['pod']}/binding",
    ]
    pod = server.api.pod(handles[1].info["pod"])
    assert pod is not None
    assert pod["spec"]["nodeName"] == "node-b"
    assert pod["spec"]["schedulerName"] == "labhive"
    assert pod["metadata"]["labels"][L_JOB] == "job1"
    assert pod["metadata"]["labels"][L_VC] == "vc1"
    assert pod["metadata"]["annotations"][A_LEAF_CELLS] == "2,3"
    main = pod["spec"]["containers"][0]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "2"
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert env["PAI_HOST_IP_worker_0"] == f"worker-0.{handles[0].info['service']}"
    assert env["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"] == "1"
    assert [(e.exit_code, e.requeue) for e in exits(lh, 2)] == [(0, False), (0, False)]


def test_a_failing_task_reports_its_exit_code_and_spends_a_retry(cluster, lh) -> None:
    lh.launch(gang("job2", "echo oops; exit 3", nodes=("node-a",)))
    (end,) = exits(lh, 1)
    assert (end.exit_code, end.requeue, end.reason) == (3, False, "Error")


def test_a_failed_bind_deletes_the_gang_and_raises_launch_error(cluster, lh) -> None:
    server, _ = cluster
    tasks = gang("job3", "sleep")
    server.api.fail_binding.add(pod_name(tasks[1].key))
    with pytest.raises(LaunchError, match="etcdserver"):
        lh.launch(tasks)
    assert server.api.list_pods(NS, None)["items"] == []
    assert server.api.services == {}
    assert lh.poll() == []


def test_a_repeated_launch_finds_its_pods_and_takes_409_on_bind_as_bound(cluster, lh) -> None:
    server, _ = cluster
    tasks = gang("job4", "sleep")
    first = lh.launch(tasks)
    again = lh.launch(tasks)
    assert [h.info["uid"] for h in again] == [h.info["uid"] for h in first]
    binds = [p for m, p, _, _ in server.api.requests if m == "POST" and p.endswith("/binding")]
    assert len(binds) == 4  # the second two were answered 409: already bound, to the same node


def test_eviction_and_node_loss_requeue_without_spending_a_retry(cluster, lh) -> None:
    server, kubelet = cluster
    handles = lh.launch(gang("job5", "sleep"))
    wait_until(lambda: len(kubelet.started) == 2, what="both pods running")
    kubelet.evict.add(handles[0].info["pod"])
    server.api.delete_pod(NS, handles[1].info["pod"], 0)  # the pod GC after a lost node
    ends = exits(lh, 2)
    assert [(e.exit_code, e.requeue) for e in ends] == [(None, True), (None, True)]
    assert ends[0].reason.startswith("Evicted")


def test_stop_deletes_the_pods_with_a_grace_period_and_records_why(cluster, lh) -> None:
    server, kubelet = cluster
    handles = lh.launch(gang("job6", "sleep"))
    wait_until(lambda: len(kubelet.started) == 2, what="both pods running")
    lh.stop(handles, grace_s=2, reason="preempted by job7 (prod)")
    assert server.api.list_pods(NS, None)["items"] == []
    assert server.api.services == {}
    deletes = [q for m, p, q, _ in server.api.requests if m == "DELETE" and "/pods/" in p]
    assert {q["gracePeriodSeconds"][0] for q in deletes} == {"2"}
    assert {e["message"] for e in server.api.events} == {"preempted by job7 (prod)"}
    assert lh.poll() == []  # the service knows it stopped them
    assert lh.read_log(handles[0], "stdout", 0, 100) == b""  # 404: the log went with the pod
    lh.stop(handles, grace_s=2)  # 404 on delete: already gone, nothing to do


def test_after_a_restart_adopt_settles_what_ended_and_watches_the_rest(cluster) -> None:
    server, kubelet = cluster
    before = executor(server)
    handles = before.launch(gang("job8", "sleep", nodes=("node-a", "node-b", "node-b")))
    wait_until(lambda: len(kubelet.started) == 3, what="pods running")
    before.close()
    kubelet.finish[handles[0].info["pod"]] = 0  # ends while LabHive is down
    wait_until(lambda: server.api.pod(handles[0].info["pod"])["status"]["phase"] == "Succeeded")
    server.api.delete_pod(NS, handles[2].info["pod"], 0)

    after = executor(server)
    # LabHive died after launching index 1 but before recording its handle: the key finds it.
    recorded = [handles[0], TaskHandle(handles[1].key, {}), handles[2]]
    try:
        ended = sorted(after.adopt(recorded), key=lambda e: e.key.index)
        assert [(e.key.index, e.exit_code, e.requeue) for e in ended] == [
            (0, 0, False),
            (2, None, True),
        ]
        found = after.discover()
        assert [(h.info["config_node"], h.info["gpus"]) for h in found] == [("node-b", [2, 3])]
        kubelet.finish[handles[1].info["pod"]] = 4
        assert [(e.key.index, e.exit_code) for e in exits(after, 1)] == [(1, 4)]
    finally:
        after.close()


def test_a_pods_ip_is_reported_once_it_runs_and_again_after_a_restart(cluster) -> None:
    """Given a gang launched and running, expect each pod's IP (given by the pod network after
    the launch returned) from ``addresses`` once, and from a new executor that adopts them."""
    server, kubelet = cluster
    before = executor(server)
    handles = before.launch(gang("job9", "sleep"))
    assert all("address" not in h.info for h in handles)  # no IP at launch
    wait_until(lambda: len(kubelet.started) == 2, what="pods running")
    ips = {h.key: server.api.pod(h.info["pod"])["status"]["podIP"] for h in handles}
    learnt: dict[TaskKey, str] = {}

    def both() -> bool:
        learnt.update(before.addresses())
        return len(learnt) == 2

    wait_until(both, what="both pods' IPs")
    assert learnt == ips and before.addresses() == {}  # reported once
    before.close()
    after = executor(server)
    try:
        assert after.adopt(handles) == []
        assert after.addresses() == ips
    finally:
        after.close()


def _lists(server: FakeServer) -> int:
    """Plain (non-watch) lists of pods the executor made."""
    return sum(
        1
        for m, p, q, _ in server.api.requests
        if m == "GET" and p.endswith("/pods") and "watch" not in q
    )


def test_a_watch_answered_410_gone_lists_again_and_misses_nothing(cluster, lh) -> None:
    server, kubelet = cluster
    handles = lh.launch(gang("job9", "sleep", nodes=("node-a",)))
    wait_until(lambda: kubelet.started, what="pod running")
    lists_before = _lists(server)
    server.api.compact()  # ends open watches; resuming from the old version gets 410
    kubelet.finish[handles[0].info["pod"]] = 0
    assert [e.exit_code for e in exits(lh, 1)] == [0]
    wait_until(lambda: server.api.gone_sent >= 1, what="a 410 Gone")
    assert _lists(server) > lists_before


def test_logs_emulate_offsets_and_follow_until_the_task_ends(cluster, lh) -> None:
    server, kubelet = cluster
    (done,) = lh.launch(gang("job10", "echo hello; echo world; exit 0", nodes=("node-a",)))
    exits(lh, 1)
    assert lh.read_log(done, "stdout", 0, 5) == b"hello"
    assert lh.read_log(done, "stdout", 6, 100) == b"world\n"
    assert lh.read_log(done, "stderr", 0, 100) == b""  # interleaved into stdout by the kubelet
    limits = [q.get("limitBytes") for m, p, q, _ in server.api.requests if p.endswith("/log")]
    assert limits == [["5"], ["106"]]

    (running,) = lh.launch(gang("job11", "echo one; sleep", nodes=("node-b",)))
    wait_until(lambda: lh.read_log(running, "stdout", 0, 100), what="first log line")
    follow = lh.follow_log(running, offset=1)
    assert next(follow) == b"ne\n"
    kubelet.finish[running.info["pod"]] = 0
    assert list(follow) == []  # the stream ends with the container


def test_node_health_from_the_api_becomes_node_down_and_up(cluster, lh) -> None:
    server, _ = cluster
    config = (*CONFIG, Node("node-c", 4))
    first = lh.node_events(config)
    assert [(type(e), e.node) for e in first] == [(NodeDown, "node-c")]
    assert "not in the Kubernetes API" in first[0].reason
    assert lh.node_events(config) == []
    server.api.set_ready("node-a", False)
    (down,) = lh.node_events(config)
    assert (type(down), down.node) == (NodeDown, "node-a")
    assert "Kubelet stopped posting" in down.reason
    server.api.set_ready("node-a", True)
    assert [(type(e), e.node) for e in lh.node_events(config)] == [(NodeUp, "node-a")]
    (short,) = lh.node_events((Node("node-b", 8),))
    assert "allocatable nvidia.com/gpu is 4" in short.reason


def test_an_image_that_can_never_run_ends_the_task_and_frees_its_pod(cluster, lh) -> None:
    server, _ = cluster
    (h,) = lh.launch(gang("job12", "exit 0", nodes=("node-a",), image="bad/Image:UPPER"))
    (end,) = exits(lh, 1)
    assert (end.exit_code, end.requeue) == (None, False)
    assert end.reason.startswith("InvalidImageName")
    wait_until(lambda: server.api.pod(h.info["pod"]) is None, what="pod deleted")


def test_the_kubelet_refuses_gpus_given_twice_and_the_task_is_requeued(cluster, lh) -> None:
    _, kubelet = cluster
    lh.launch(gang("big", "sleep", nodes=("node-a",)))  # GPUs 2 and 3 of node-a
    wait_until(lambda: kubelet.started, what="first pod running")
    # A task placed on GPUs already in use (a core bug, or a stale store) is refused at admission.
    over = [TaskLaunch(TaskKey("over", 0, "w", 0), "over", "sleep", "node-a", (0, 1, 2))]
    lh.launch(over)
    (end,) = exits(lh, 1)
    assert (end.key.job_id, end.exit_code, end.requeue) == ("over", None, True)
    assert "OutOfnvidia.com/gpu" in end.reason


def test_pod_annotations_hold_the_exact_task_key(cluster, lh) -> None:
    server, _ = cluster
    odd = TaskLaunch(TaskKey("Job_With Spaces/1", 2, "Trainer", 0), "x", "exit 0", "node-a", (0,))
    (h,) = lh.launch([odd])
    pod = server.api.pod(h.info["pod"])
    assert pod is not None
    task = json.loads(pod["metadata"]["annotations"]["labhive.io/task"])
    assert (task["job_id"], task["attempt"], task["role"]) == ("Job_With Spaces/1", 2, "Trainer")
    assert exits(lh, 1)[0].key == odd.key


def test_a_pod_created_but_never_bound_before_a_crash_is_removed_and_requeued(cluster, lh) -> None:
    server, _ = cluster
    (task,) = gang("job13", "exit 0", nodes=("node-a",))
    opts = PodOptions(namespace=NS)
    server.api.create_pod(NS, pod_manifest(task, opts, task_env(task, [task], None)))
    (end,) = lh.adopt([TaskHandle(task.key, {})])
    assert (end.exit_code, end.requeue) == (None, True)
    assert "never bound" in end.reason
    assert server.api.pod(pod_name(task.key)) is None
