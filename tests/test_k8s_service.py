"""The job service with ``--executor kubernetes`` against the in-memory API server.

Given a HiveD config whose nodes are Kubernetes nodes, a kubeconfig, and the service built as
``labhive serve --executor kubernetes --cluster ... --kubeconfig ... --namespace ...`` builds it,
expect a submitted gang to run as bound pods and succeed, a failing job to be retried, and a node
that goes NotReady to reach the policy as a bad node.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from k8s_fake import FakeServer, Kubelet
from serving import serving
from waiting import wait_until

from labhive.scheduler.cli import build_parser
from labhive.scheduler.client import Client
from labhive.scheduler.service import commands

pytestmark = [pytest.mark.timeout(60), pytest.mark.k8s]

CLUSTER = """\
physicalCluster:
  cellTypes:
    NODE: {childCellType: GPU, childCellNumber: 4, isNodeLevel: true}
    RACK: {childCellType: NODE, childCellNumber: 2}
  physicalCells:
  - cellType: RACK
    cellChildren:
    - cellAddress: node-a
    - cellAddress: node-b
virtualClusters:
  vc1: {virtualCells: [{cellType: RACK.NODE, cellNumber: 2}]}
"""

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: "{url}"}}]
users: [{name: fake, user: {token: test}}]
contexts: [{name: fake, context: {cluster: fake, user: fake, namespace: labhive}}]
current-context: fake
"""


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[Client, FakeServer, Kubelet]]:
    from labhive.scheduler.service.server import build

    with FakeServer({"node-a": 4, "node-b": 4}) as fake:
        kubelet = Kubelet(fake.api).start()
        (tmp_path / "cluster.yaml").write_text(CLUSTER)
        (tmp_path / "kubeconfig").write_text(KUBECONFIG.replace("{url}", fake.url))
        argv = ["serve", "--executor", "kubernetes", "--cluster", str(tmp_path / "cluster.yaml")]
        argv += ["--kubeconfig", str(tmp_path / "kubeconfig"), "--namespace", "labhive"]
        argv += ["--data-dir", str(tmp_path / "data"), "--grace-s", "1", "--port", "0"]
        opts = commands._options(build_parser().parse_args(argv))
        running = build(opts)
        loop, executor = running.service.loop, running.service.loop.executor
        executor._node_poll_s = 0.1
        loop.poll_s = 0.05
        loop.start()
        token = running.token_file.read_text().strip()
        try:
            with serving(running.app) as port:
                yield Client(f"http://127.0.0.1:{port}/api/v1", token), fake, kubelet
        finally:
            loop.stop(stop_tasks=True)
            executor.close()
            running.service.store.dispose()
            kubelet.close()


def test_a_gang_runs_as_bound_pods_and_succeeds(service) -> None:
    client, fake, _ = service
    job = client.submit(command="echo rank=$RANK; exit 0", vc="vc1", gpus=4, tasks=2, name="g")
    job.wait(timeout=30, poll_s=0.1)
    assert job.state == "SUCCEEDED"
    pods = fake.api.list_pods("labhive", None)["items"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["node-a", "node-b"]
    assert {p["metadata"]["labels"]["labhive.io/vc"] for p in pods} == {"vc1"}
    assert "rank=" in client.logs(job.id, task="main-0").data


def test_a_failing_job_is_retried_then_fails(service) -> None:
    client, _, _ = service
    job = client.submit(command="exit 3", vc="vc1", gpus=1, retries=1, name="flaky")
    job.wait(timeout=30, poll_s=0.1)
    assert (job.state, job.attempt, job.exit_code) == ("FAILED", 2, 3)


def test_a_node_gone_not_ready_is_a_bad_node_for_the_policy(service) -> None:
    client, fake, _ = service
    fake.api.set_ready("node-b", False)

    def node_b_down() -> bool:
        return any(not n["healthy"] for n in client.cluster()["nodes"] if n["name"] == "node-b")

    wait_until(node_b_down, timeout=10, what="node-b reported down")
    job = client.submit(command="exit 0", vc="vc1", gpus=4, tasks=2, name="both")
    time.sleep(0.5)
    assert client.job(job.id).state == "WAITING"  # a 2-node gang cannot run on one node
    fake.api.set_ready("node-b", True)
    client.job(job.id).wait(timeout=30, poll_s=0.1)
    assert client.job(job.id).state == "SUCCEEDED"


def test_preemption_deletes_the_victims_pods_and_records_why(service) -> None:
    client, fake, kubelet = service
    low = client.submit(command="sleep", vc="vc1", gpus=4, tasks=2, priority="test", name="low")
    wait_until(lambda: len(kubelet.started) == 2, timeout=20, what="the low gang running")
    high = client.submit(command="exit 0", vc="vc1", gpus=4, priority="prod", name="high")
    client.job(high.id).wait(timeout=30, poll_s=0.1)
    assert client.job(high.id).state == "SUCCEEDED"
    stopped = {e["involvedObject"]["name"] for e in fake.api.events if e["reason"] == "Stopped"}
    assert stopped == {f"lh-{low.id}-main-0-a1", f"lh-{low.id}-main-1-a1"}
    wait_until(lambda: client.job(low.id).state == "RUNNING", timeout=20, what="low again")


def test_a_running_pods_ip_becomes_its_tasks_address(service) -> None:
    """A pod gets its IP from the pod network only after it is bound and started, so the task
    record written at launch has none; the executor reports it and ``GET /jobs/{id}`` then
    shows it (where the hub reaches a notebook server started with ``server_on_nodes``)."""
    client, fake, kubelet = service
    job = client.submit(command="sleep", vc="vc1", gpus=4, tasks=2, name="pair")
    wait_until(lambda: len(kubelet.started) == 2, timeout=20, what="both pods running")
    pod_ips = {
        p["metadata"]["name"]: p["status"]["podIP"]
        for p in fake.api.list_pods("labhive", None)["items"]
    }
    assert len(set(pod_ips.values())) == 2  # one per pod, each on its node's subnet

    def addresses() -> dict[str, str | None]:
        return {f"{t['role']}-{t['index']}": t["address"] for t in client.job(job.id).tasks}

    expected = {"main-0": pod_ips[f"lh-{job.id}-main-0-a1"]}
    expected["main-1"] = pod_ips[f"lh-{job.id}-main-1-a1"]
    wait_until(lambda: addresses() == expected, timeout=10, what=f"addresses {expected}")
    client.job(job.id).cancel()
