"""Given a cluster of virtual GPUs and jobs asking for shares of a GPU, expect HiveD to pack
the shares of one VC onto its own GPUs, never past one GPU, and to keep whole-GPU jobs apart."""

from __future__ import annotations

import pytest
from helpers import Cluster

from labhive.scheduler.core.jobs import SpecError, parse_job
from labhive.scheduler.core.model import Adopt, Finish, NodeDown, Start, Tick

#: vc1 owns one GPU of n0; vc2 owns the other three; n1 belongs to no VC (idle for oppo).
ONE_GPU_VC = """\
physicalCluster:
  cellTypes:
    NODE: {childCellType: GPU, childCellNumber: 4, isNodeLevel: true}
  physicalCells:
  - {cellType: NODE, cellAddress: n0}
  - {cellType: NODE, cellAddress: n1}
virtualClusters:
  vc1: {virtualCells: [{cellType: NODE.GPU, cellNumber: 1}]}
  vc2: {virtualCells: [{cellType: NODE.GPU, cellNumber: 3}]}
"""

#: Two VCs of one node each: nothing idle but what a VC leaves unused.
TWO_NODES = """\
physicalCluster:
  cellTypes:
    NODE: {childCellType: GPU, childCellNumber: 4, isNodeLevel: true}
  physicalCells:
  - {cellType: NODE, cellAddress: n0}
  - {cellType: NODE, cellAddress: n1}
virtualClusters:
  vc1: {virtualCells: [{cellType: NODE, cellNumber: 1}]}
  vc2: {virtualCells: [{cellType: NODE, cellNumber: 1}]}
"""


def shares_on(c: Cluster) -> dict[tuple[str, int], dict[str, int]]:
    """(node, GPU) -> job -> thousandths, as the cluster view shows them."""
    return {
        (n.name, gpu): dict(held) for n in c.sched.cluster().nodes for gpu, held in n.shares.items()
    }


def test_four_quarters_share_the_one_gpu_of_their_vc_a_fifth_and_a_whole_gpu_wait():
    c = Cluster(ONE_GPU_VC)
    for name in ("q1", "q2", "q3", "q4"):
        c.submit(name, vc="vc1", priority="prod", gpus=0.25)
        assert c.started() == [name]
    assert {c.gpus(n)["n0"] for n in ("q1", "q2", "q3", "q4")} == {(0,)}
    assert shares_on(c) == {("n0", 0): {"q1": 250, "q2": 250, "q3": 250, "q4": 250}}
    c.submit("q5", vc="vc1", priority="prod", gpus=0.25)
    assert c.started() == [] and c.state("q5") == "WAITING"
    assert "waits for 0.25 GPU in vc1" in (c.why("q5") or "")
    c.submit("whole", vc="vc1", priority="prod", gpus=1)
    assert c.state("whole") == "WAITING"
    assert c.sched.vc_views()["vc1"].used_gpus == 1.0  # four quarters: one GPU

    c.finish("q1")  # a quarter frees: the waiting quarter takes it, the whole GPU still waits
    assert c.started() == ["q5"] and c.gpus("q5") == {"n0": (0,)}
    for name in ("q2", "q3", "q4"):
        c.finish(name)
        assert c.state("whole") == "WAITING"
    c.finish("q5")  # the last share ends: the GPU is whole again
    assert c.started() == ["whole"] and c.gpus("whole") == {"n0": (0,)}
    assert shares_on(c) == {}


def test_shares_never_exceed_one_gpu_and_mix_sizes_best_fit():
    c = Cluster(ONE_GPU_VC)
    c.submit("half", vc="vc2", priority="prod", gpus=0.5)
    c.submit("quarter", vc="vc2", priority="prod", gpus=0.25)
    c.submit("eighth", vc="vc2", priority="prod", gpus=0.125)
    c.submit("half2", vc="vc2", priority="prod", gpus=0.5)  # 7/8 used: a second GPU
    first, second = c.gpus("half")["n0"], c.gpus("half2")["n0"]
    assert c.gpus("quarter")["n0"] == c.gpus("eighth")["n0"] == first != second
    c.submit("eighth2", vc="vc2", priority="prod", gpus=0.125)  # best fit: fills the first
    assert c.gpus("eighth2")["n0"] == first
    assert all(sum(held.values()) <= 1000 for held in shares_on(c).values())
    assert c.sched.vc_views()["vc2"].used_gpus == 1.5


def test_a_whole_gpu_job_never_lands_on_a_gpu_with_shares():
    c = Cluster(ONE_GPU_VC)
    c.submit("q", vc="vc2", priority="prod", gpus=0.25)
    c.submit("two", vc="vc2", priority="prod", gpus=2)
    assert c.started() == ["two"]
    assert c.gpus("q")["n0"][0] not in c.gpus("two")["n0"]
    c.submit("one", vc="vc2", priority="prod", gpus=1)  # vc2's last GPU hosts q: none is free
    assert c.state("one") == "WAITING"


def test_guaranteed_shares_stay_inside_their_vcs_cells():
    c = Cluster(ONE_GPU_VC)
    c.submit("w", vc="vc1", priority="prod", gpus=1)  # vc1's one GPU is taken
    c.submit("q", vc="vc1", priority="prod", gpus=0.25)
    assert c.state("q") == "WAITING"  # although n1 is idle: not vc1's
    c.finish("w")
    assert c.started() == ["q"]


def test_an_opportunistic_share_is_preempted_by_a_prod_whole_gpu_with_all_its_sharers():
    c = Cluster(TWO_NODES)
    for n in range(3):
        c.submit(f"w{n}", vc="vc1", priority="prod", gpus=1)  # vc1 keeps one GPU idle
    c.submit("o1", vc="vc2", priority="oppo", gpus=0.5)
    c.submit("o2", vc="vc1", priority="oppo", gpus=0.25)  # oppo shares join across VCs
    assert c.gpus("o1") == c.gpus("o2")
    c.submit("busy", vc="vc2", priority="prod", tasks=4, gpus=1)  # takes all of n1
    node = next(iter(c.gpus("o1")))
    assert node == "n0"  # the idle GPU left was vc1's
    c.submit("prod", vc="vc1", priority="prod", gpus=1)
    assert sorted(c.preempted()) == ["o1", "o2"] and c.started() == ["prod"]
    assert c.state("o1") == c.state("o2") == "WAITING"
    assert shares_on(c) == {}


def test_a_prod_share_preempts_a_lower_priority_whole_gpu_only_inside_its_vc():
    c = Cluster(ONE_GPU_VC)
    c.submit("low", vc="vc1", priority="test", gpus=1)
    c.submit("q", vc="vc1", priority="prod", gpus=0.25)
    assert c.preempted() == ["low"] and c.started() == ["q"]
    c.submit("q2", vc="vc1", priority="test", gpus=0.25)  # a test share cannot join prod's
    assert c.state("q2") == "WAITING"


def test_a_node_going_down_stops_every_sharer_on_it_and_they_share_again_elsewhere():
    c = Cluster(ONE_GPU_VC)
    c.submit("a", vc="vc1", priority="prod", gpus=0.5)
    c.submit("b", vc="vc1", priority="prod", gpus=0.5)
    assert shares_on(c) == {("n0", 0): {"a": 500, "b": 500}}
    out = c.handle(NodeDown("n0", "power"))
    assert sorted(d.job_id for d in out if type(d).__name__ == "Stop") == ["a", "b"]
    # vc1's one GPU cell binds to the healthy node: both shares run there, on one GPU
    assert sorted(d.job_id for d in out if isinstance(d, Start)) == ["a", "b"]
    assert shares_on(c) == {("n1", 0): {"a": 500, "b": 500}}


def test_adopt_puts_sharers_back_on_their_one_gpu():
    c = Cluster(ONE_GPU_VC)
    c.submit("a", vc="vc1", priority="prod", gpus=0.5)
    c.submit("b", vc="vc1", priority="prod", gpus=0.25)
    running = {j.job_id: j for j in c.sched.jobs()}
    fresh = Cluster(ONE_GPU_VC)
    for name in ("a", "b"):
        view = running[name]
        spec = parse_job(
            {"name": name, "vc": "vc1", "priority": "prod", "gpus": 0.5 if name == "a" else 0.25}
        )
        fresh.handle(Adopt(name, spec, view.tasks))
    fresh.handle(Tick(1.0))
    assert shares_on(fresh) == {("n0", c.gpus("a")["n0"][0]): {"a": 500, "b": 250}}
    fresh.submit("c", vc="vc1", priority="prod", gpus=0.5)  # 3/4 used: a half waits
    assert fresh.state("c") == "WAITING"
    fresh.submit("d", vc="vc1", priority="prod", gpus=0.25)
    assert [d.job_id for d in fresh.last if isinstance(d, Start)] == ["d"]
    fresh.handle(Finish("a"))
    assert fresh.state("c") == "RUNNING"


@pytest.mark.parametrize(
    ("gpus", "message"),
    [
        (1.5, "a share is only for a single task needing less than one GPU"),
        (0.3, "use 0.5, 0.25 or 0.125"),
        ("1/3", "use 0.5, 0.25 or 0.125"),
        (-0.25, "use 0.5, 0.25 or 0.125"),
    ],
)
def test_shares_that_do_not_divide_a_gpu_are_refused_saying_which_work(gpus, message):
    with pytest.raises(SpecError, match=message):
        parse_job({"name": "x", "gpus": gpus})


def test_a_share_is_for_a_single_task():
    with pytest.raises(SpecError, match="a GPU share is for a single task"):
        parse_job({"name": "x", "gpus": 0.5, "tasks": 2})
    with pytest.raises(SpecError, match="lazy preemption"):
        parse_job({"name": "x", "gpus": 0.5, "lazy_preemption": True})
    spec = parse_job(
        {
            "protocolVersion": 2,
            "name": "pai",
            "taskRoles": {"main": {"instances": 1, "resourcePerInstance": {"gpu": 0.25}}},
        }
    )
    assert (spec.roles[0].gpu, spec.roles[0].share_milli, spec.gpu_amount) == (1, 250, 0.25)


# ---- what a share's task gets: its variables, and what the cluster config says enforces it ----


def test_a_share_is_time_sliced_unless_the_admin_turns_on_mps(tmp_path):
    from labhive.scheduler.core.config import load_cluster_config
    from labhive.scheduler.executors.gpu_share_env import share_env, sharing_note

    def config(extra: str):
        path = tmp_path / "c.yaml"
        path.write_text(ONE_GPU_VC + extra)
        return load_cluster_config(path).gpu_sharing

    plain = config("")
    assert share_env(0, plain) == {}  # a whole-GPU task: nothing added
    assert share_env(250, plain) == {
        "LABHIVE_GPU_SHARE": "0.25",
        "LABHIVE_GPU_SHARING": sharing_note(plain),
    }
    assert sharing_note(plain).startswith("not enforced: shares are time-sliced")
    mps = config("gpuSharing: {mode: mps, gpuMemoryMB: 81920}\n")
    env = share_env(125, mps)
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "12"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=10240M"  # an eighth of 80 GiB
    assert "untested on hardware" in env["LABHIVE_GPU_SHARING"]
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in share_env(500, config("gpuSharing: mps\n"))
    with pytest.raises(Exception, match="gpuSharing: must be one of timeslice, mps"):
        config("gpuSharing: mig\n")


def test_fair_share_counts_a_share_as_its_fraction_of_a_gpu():
    """Given fair share in a VC, alice's quarter runs as long as bob's whole GPU: she has used
    a quarter of his GPU-seconds, so her next job goes first."""
    c = Cluster(ONE_GPU_VC + "fairShare: {halfLife: 7d}\n")
    c.handle(Tick(0.0))
    c.submit("alice-q", vc="vc2", priority="prod", gpus=0.25, user="alice")
    c.submit("bob-1", vc="vc2", priority="prod", gpus=1, user="bob")
    c.handle(Tick(3600.0))
    ledger = c.sched._ledger
    assert ledger is not None
    assert ledger.running[("vc2", "alice")] == 0.25 and ledger.running[("vc2", "bob")] == 1
    assert ledger.usage(("vc2", "alice")) == pytest.approx(ledger.usage(("vc2", "bob")) / 4)


# ---- what people read: the widget's map and banner, the CLI's cluster view -------------------


def test_the_widget_and_the_cli_show_a_shared_gpu_and_that_nothing_enforces_it(capsys):
    from labhive.kernel_ext.facts import ClusterFacts, JobFacts
    from labhive.kernel_ext.picture import cluster_svg, cluster_text
    from labhive.kernel_ext.render import job_html
    from labhive.scheduler.cli.client_commands import _gpu_cell

    node = {
        "name": "n0", "sku": "GPU", "gpus": [0, 1], "healthy": True, "reason": "",
        "used": {"0": 12, "1": 14},
        "shares": {"0": [{"job": 12, "share": 0.5}, {"job": 13, "share": 0.25}]},
    }  # fmt: skip
    cluster = ClusterFacts.from_api({"nodes": [node], "vcs": {}, "virtual": False})
    assert "GPU 0: 0.75 used by 2 jobs" in cluster_text(cluster)
    assert "n0 GPU 0: 0.75 used by 2 jobs (12: 0.5, 13: 0.25)" in cluster_svg(cluster)
    assert (_gpu_cell(node, 0), _gpu_cell(node, 1)) == ("0:12+13", "1:14")
    job = JobFacts.from_api(
        {"id": 12, "name": "nb", "state": "RUNNING", "gpus": 0.5,
         "gpu_sharing": "not enforced: shares are time-sliced (each sharer sees the whole GPU)"}
    )  # fmt: skip
    assert "0.5 of a GPU: not enforced: shares are time-sliced" in job_html(job, 0.0)


def test_the_widget_counts_a_vcs_shares_as_fractions():
    from labhive.kernel_ext.facts import vc_facts

    (used,) = vc_facts({"vc1": {"guaranteed_gpus": 1, "used_gpus": 0.75, "waiting": 1}})
    (whole,) = vc_facts({"vc1": {"guaranteed_gpus": 1, "used_gpus": 1.0}})
    assert (used.used_gpus, whole.used_gpus, str(whole.used_gpus)) == (0.75, 1, "1")
