"""Given the Kubernetes fake (tests/k8s_fake.py) and a pod that printed 5 MiB, expect the
service to be served its log as the local relay keeps one: the first CAP bytes, then one line
saying the rest was dropped, and nothing past it, whatever offset is asked for, followed or
not; and never to ask the API for more than CAP + 1 bytes of it."""

from __future__ import annotations

import pytest
from k8s_fake import FakeServer
from test_k8s_executor import NS, cluster, exits, gang, lh
from waiting import wait_until

from labhive.scheduler.executors.kubernetes import KubernetesExecutor
from labhive.scheduler.executors.output import cap_notice

__all__ = ["cluster", "lh"]  # fixtures, used by name
pytestmark = [pytest.mark.timeout(60), pytest.mark.k8s]
MIB = 1024 * 1024


def flood(server: FakeServer, pod: str, size: int) -> None:
    """The container printed ``size`` more bytes (no newline at the end): the kubelet has them."""
    with server.api.cond:
        uid = server.api.pods[(NS, pod)]["metadata"]["uid"]
        server.api.logs[uid] += b"x" * size
        server.api.cond.notify_all()


def test_a_pods_log_past_its_cap_is_served_cut_with_one_line_saying_so(cluster, lh) -> None:
    server, kubelet = cluster
    lh.output_cap = MIB
    (h,) = lh.launch(gang("job20", "echo start; sleep", nodes=("node-a",)))
    wait_until(lambda: lh.read_log(h, "stdout", 0, 100), what="the first log line")
    flood(server, h.info["pod"], 5 * MIB)
    served = b"start\n" + b"x" * (MIB - 6) + b"\n" + cap_notice("stdout", MIB, False)

    assert lh.read_log(h, "stdout", 0, 2 * MIB) == served
    assert lh.read_log(h, "stdout", MIB - 2, 10) == b"xx\nlabhive"
    assert lh.read_log(h, "stdout", 2 * MIB, 100) == b""  # nothing past the notice
    assert b"".join(lh.follow_log(h, "stdout", offset=10)) == served[10:]  # hung up at the cap
    asked = [int(q["limitBytes"][0]) for _, p, q, _ in server.api.requests if "limitBytes" in q]
    assert max(asked) <= MIB + 1, asked

    kubelet.finish[h.info["pod"]] = 0
    exits(lh, 1)
    assert lh.read_log(h, "stdout", 0, 2 * MIB) == served  # the same once it ended


def test_a_log_within_its_cap_is_served_whole(cluster, lh: KubernetesExecutor) -> None:
    server, kubelet = cluster
    lh.output_cap = MIB
    (h,) = lh.launch(gang("job21", "echo start; sleep", nodes=("node-b",)))
    wait_until(lambda: lh.read_log(h, "stdout", 0, 100), what="the first log line")
    flood(server, h.info["pod"], MIB - 6)  # exactly the cap: nothing dropped
    kubelet.finish[h.info["pod"]] = 0
    exits(lh, 1)
    assert lh.read_log(h, "stdout", 0, 2 * MIB) == b"start\n" + b"x" * (MIB - 6)
    assert b"".join(lh.follow_log(h, "stdout")) == b"start\n" + b"x" * (MIB - 6)
