"""On a real cluster (only when ``LABHIVE_KUBECONFIG`` names its kubeconfig): a gang of 2 pods,
created, bound by LabHive through the binding subresource, running to success.

Optional: ``LABHIVE_NAMESPACE`` (default ``default``; it must exist), ``LABHIVE_TEST_IMAGE``
(default ``busybox:1.36``). Nodes without ``nvidia.com/gpu`` get virtual GPU slots (no device
request), so a kind or minikube cluster runs it too.
"""

from __future__ import annotations

import os
import time

import pytest
from kubernetes import client as k8s

from labhive.scheduler.executors.base import TaskExit, TaskKey, TaskLaunch
from labhive.scheduler.executors.kubernetes import KubernetesExecutor, connect

KUBECONFIG = os.environ.get("LABHIVE_KUBECONFIG")
pytestmark = [
    pytest.mark.skipif(
        not KUBECONFIG,
        reason="no Kubernetes API server here: set LABHIVE_KUBECONFIG to a real cluster's "
        "kubeconfig to run this test",
    ),
    pytest.mark.timeout(300),
    pytest.mark.k8s,
]


# The API server always fills a node's metadata, spec and status; the client types them as
# optional because the same classes also build requests.
def schedulable(node: k8s.V1Node) -> bool:
    """Ready and not cordoned."""
    assert node.status is not None and node.spec is not None
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or ())
    return ready and not node.spec.unschedulable


def gpus(node: k8s.V1Node) -> int:
    assert node.status is not None
    return int((node.status.allocatable or {}).get("nvidia.com/gpu", "0"))


def name(node: k8s.V1Node) -> str:
    assert node.metadata is not None and node.metadata.name is not None
    return node.metadata.name


def test_a_gang_of_two_pods_is_bound_by_labhive_and_succeeds() -> None:
    api = connect(KUBECONFIG)
    nodes = [n for n in k8s.CoreV1Api(api).list_node().items if schedulable(n)]
    assert nodes, "the cluster has no Ready, schedulable node"
    picked = [nodes[0], nodes[-1]]
    has_gpu = all(gpus(n) for n in picked)
    job = f"real-{int(time.time())}"
    tasks = [
        TaskLaunch(
            TaskKey(job, 0, "worker", i),
            job,
            "echo hello from $PAI_CURRENT_TASK_ROLE_NAME-$PAI_TASK_INDEX",
            name(n),
            (0,),
            virtual=not has_gpu,
            cpu=0.1,
            memory_mb=64,
            image=os.environ.get("LABHIVE_TEST_IMAGE", "busybox:1.36"),
        )
        for i, n in enumerate(picked)
    ]
    lh = KubernetesExecutor(api, os.environ.get("LABHIVE_NAMESPACE", "default"))
    handles = lh.launch(tasks)
    try:
        got: list[TaskExit] = []
        deadline = time.monotonic() + 240
        while len(got) < 2 and time.monotonic() < deadline:
            got.extend(lh.poll())
            time.sleep(1)
        assert sorted((e.key.index, e.exit_code) for e in got) == [(0, 0), (1, 0)], got
        assert b"hello from worker-0" in lh.read_log(handles[0], "stdout", 0, 4096)
    finally:
        lh.stop(handles, grace_s=5, reason="test finished")
        lh.close()


def test_a_pod_runs_as_its_users_uid_with_no_capabilities() -> None:
    """Given a task of uid 23456 (gid 23457), expect the pod to see that identity, an empty
    effective capability set and no_new_privs: the kubelet applied the securityContext."""
    api = connect(KUBECONFIG)
    node = next(n for n in k8s.CoreV1Api(api).list_node().items if schedulable(n))
    job = f"asuser-{int(time.time())}"
    task = TaskLaunch(
        TaskKey(job, 0, "who", 0), job,
        "id -u; id -g; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status",
        name(node), (0,), virtual=True, cpu=0.1, memory_mb=64, uid=23456, gid=23457,
        image=os.environ.get("LABHIVE_TEST_IMAGE", "busybox:1.36"),
    )  # fmt: skip
    lh = KubernetesExecutor(api, os.environ.get("LABHIVE_NAMESPACE", "default"))
    handles = lh.launch([task])
    try:
        got: list[TaskExit] = []
        deadline = time.monotonic() + 240
        while not got and time.monotonic() < deadline:
            got.extend(lh.poll())
            time.sleep(1)
        assert [e.exit_code for e in got] == [0], got
        out = lh.read_log(handles[0], "stdout", 0, 4096).decode().split()
        assert out[:2] == ["23456", "23457"], out
        assert out[2:] == ["CapEff:", "0000000000000000", "NoNewPrivs:", "1"], out
    finally:
        lh.stop(handles, grace_s=5, reason="test finished")
        lh.close()
