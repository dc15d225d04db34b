"""Given the real service with the local executor, a (non-virtual) node of two GPUs whose NVIDIA
device nodes are faked (``mknod c 195 N``, as ``test_isolation_devfilter`` makes them), and
alice and bob each submitting half a GPU, expect both halves on the same GPU at once, each with
that GPU's index in CUDA_VISIBLE_DEVICES and a device filter that lets it open that GPU's node
and not the other; a whole-GPU job beside them gets the other GPU and cannot open the shared
one. The job records and /gpus say so, and that nothing enforces the halves (time-sliced)."""

from __future__ import annotations

import errno
import json
import os
import shlex
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from isolation_util import isolated_service, needs_root, open_tmp_dir, user_python
from service_fixtures import Live
from waiting import job_done, job_in, wait_until

from labhive.scheduler.executors import limits

pytest_plugins = ["service_fixtures"]
pytestmark = needs_root

SUPPORT = limits.detect()
FILTER_HERE = SUPPORT.device_parent is not None or (
    SUPPORT.cgroup_parent is not None and not SUPPORT.why_not_filter
)

#: One node, two GPUs, all of them vc1's (alice and bob are students: vc1).
CLUSTER = """\
physicalCluster:
  cellTypes:
    NODE: {childCellType: GPU, childCellNumber: 2, isNodeLevel: true}
  physicalCells:
  - {cellType: NODE, cellAddress: localhost}
virtualClusters:
  vc1: {virtualCells: [{cellType: NODE, cellNumber: 1}]}
"""

#: Reports its GPU variables and which fake GPU nodes it could open, then waits for the gate
#: (so that the sharers run at the same time) before it exits.
PROBE = """
import errno, json, os, sys, time
nodes, gate = sys.argv[1], sys.argv[2]
out = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "LABHIVE_GPU_SHARE",
                                       "LABHIVE_GPU_SHARING", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")}
out["open"] = {}
for name in ("nvidia0", "nvidia1"):
    try:
        os.close(os.open(os.path.join(nodes, name), os.O_RDONLY))
        out["open"][name] = "ok"
    except OSError as err:
        out["open"][name] = errno.errorcode[err.errno]
print(json.dumps(out), flush=True)
deadline = time.time() + 120
while not os.path.exists(gate) and time.time() < deadline:
    time.sleep(0.1)
"""


@pytest.fixture
def setting() -> Iterator[tuple[Live, Path, Path]]:
    """The service on ``CLUSTER``, fake GPU nodes under /dev, a gate under /var/tmp."""
    with (
        open_tmp_dir("/dev") as devs,
        open_tmp_dir("/var/tmp") as shared,
        open_tmp_dir() as tmp,
    ):
        for minor in (0, 1):
            os.mknod(devs / f"nvidia{minor}", 0o666 | stat.S_IFCHR, os.makedev(195, minor))
            os.chmod(devs / f"nvidia{minor}", 0o666)
        cluster = tmp / "cluster.yaml"
        cluster.write_text(CLUSTER)
        with isolated_service(tmp / "data", cluster=str(cluster)) as live:
            yield live, devs, shared / "gate"


def probe(devs: Path, gate: Path) -> str:
    return " ".join(shlex.quote(str(a)) for a in (user_python(), "-c", PROBE, devs, gate))


def report(job) -> dict:
    text = wait_until(lambda: job.logs().data.strip(), f"job {job.id}'s report", 60)
    return json.loads(text.splitlines()[0])


@pytest.mark.skipif(not FILTER_HERE, reason=f"no device filter here: {SUPPORT.why_not_filter}")
def test_two_halves_of_one_gpu_both_open_it_and_a_whole_gpu_job_beside_them_cannot(
    setting: tuple[Live, Path, Path],
) -> None:
    live, devs, gate = setting
    alice, bob = live.client("alice-token-123"), live.client("bob-token-4567")
    halves = [
        who.submit(name=f"half-{n}", command=probe(devs, gate), vc="vc1", gpus=0.5)
        for n, who in (("alice", alice), ("bob", bob))
    ]
    whole = alice.submit(name="whole", command=probe(devs, gate), vc="vc1", gpus=1)
    for job in (*halves, whole):
        wait_until(job_in(job, "RUNNING"), f"job {job.id} running", 60)
    a, b, w = (report(j) for j in (*halves, whole))

    # both halves hold the same GPU, each sees its index, and its filter admits that GPU only
    assert a["CUDA_VISIBLE_DEVICES"] == b["CUDA_VISIBLE_DEVICES"] in ("0", "1")
    shared = f"nvidia{a['CUDA_VISIBLE_DEVICES']}"
    other = "nvidia1" if shared == "nvidia0" else "nvidia0"
    # (ENXIO: the filter let the open through to the driver, which is absent here)
    for half in (a, b):
        assert half["open"] == {shared: "ENXIO", other: "EPERM"}, half
        assert (half["LABHIVE_GPU_SHARE"], half["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]) == (
            "0.5", None,
        )  # fmt: skip
        assert half["LABHIVE_GPU_SHARING"].startswith("not enforced: shares are time-sliced")
    # the whole-GPU job got the other GPU, and the shared one's node is closed to it
    assert w["CUDA_VISIBLE_DEVICES"] == other[-1]
    assert w["open"] == {shared: "EPERM", other: "ENXIO"}, w
    assert w["LABHIVE_GPU_SHARE"] is None

    # what people read: the records, the GPU list (an admin's view) and the queue
    record = halves[0].refresh().data
    assert (record["gpus"], record["tasks"][0]["gpus"]) == (0.5, [int(shared[-1])])
    assert record["gpu_sharing"].startswith("not enforced: shares are time-sliced")
    share_record = record["tasks"][0]["limits"]["gpu_share"]
    assert (share_record["share"], share_record["enforced"]) == (0.5, False)
    assert share_record["why"].startswith("not enforced: shares are time-sliced")
    assert record["tasks"][0]["limits"]["devices"]["granted_gpus"] == [int(shared[-1])]
    assert whole.refresh().data["gpus"] == 1 and whole.data.get("gpu_sharing") is None
    gpus = {g["index"]: g for g in live.client().gpus()}
    held = gpus[int(shared[-1])]
    assert held["shared_used"] == 1.0
    assert sorted(s["job"] for s in held["shares"]) == sorted(j.id for j in halves)
    assert gpus[int(other[-1])]["shares"] == [] and gpus[int(other[-1])]["job"] == whole.id
    queue = live.client()._get("/queue")
    assert queue["vcs"]["vc1"]["used_gpus"] == 2.0
    assert {e["id"]: e["gpus"] for e in queue["running"]} == {
        halves[0].id: 0.5, halves[1].id: 0.5, whole.id: 1,
    }  # fmt: skip
    gate.touch()
    for job in (*halves, whole):
        wait_until(job_done(job), f"job {job.id} done", 60)
        assert job.state == "SUCCEEDED", job.data


def test_a_share_the_service_cannot_place_is_refused_with_what_works(
    setting: tuple[Live, Path, Path],
) -> None:
    from labhive.scheduler.client import LabHiveError

    live, _, _ = setting
    alice = live.client("alice-token-123")
    for gpus, words in ((1.5, "a share is only for a single task"), (0.3, "0.5, 0.25 or 0.125")):
        with pytest.raises(LabHiveError) as err:
            alice.submit(name="bad", command="true", vc="vc1", gpus=gpus)
        assert words in err.value.message
    with pytest.raises(LabHiveError, match="a GPU share is for a single task"):
        alice.submit(name="bad", command="true", vc="vc1", gpus=0.25, tasks=2)
    assert errno.EPERM  # (the module's other test reads errno names)
