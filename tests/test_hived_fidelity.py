"""HiveD's own rules where LabHive used to decide differently (issue 17): given this cluster
and these submissions, expect what HiveD's algorithm does."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import Cluster

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import SpecRejected
from labhive.scheduler.drivers.replay import replay
from labhive.scheduler.drivers.scenario import load_scenario

ONE_RACK = """\
physicalCluster:
  cellTypes:
    NODE: {childCellType: GPU, childCellNumber: 4, isNodeLevel: true}
    RACK: {childCellType: NODE, childCellNumber: 4}
  physicalCells:
  - cellType: RACK
    cellChildren: [{cellAddress: n0}, {cellAddress: n1}, {cellAddress: n2}, {cellAddress: n3}]
virtualClusters:
  a: {virtualCells: [{cellType: RACK.NODE, cellNumber: 4}]}
"""

ONE_NODE = """\
physicalCluster:
  cellTypes:
    NODE: {childCellType: GPU, childCellNumber: 4, isNodeLevel: true}
  physicalCells:
  - {cellType: NODE, cellAddress: n0}
  - {cellType: NODE, cellAddress: n1}
virtualClusters:
  a: {virtualCells: [{cellType: NODE, cellNumber: 2}]}
"""

PINNED = """\
physicalCluster:
  cellTypes:
    NODE: {childCellType: GPU, childCellNumber: 4, isNodeLevel: true}
    RACK: {childCellType: NODE, childCellNumber: 2}
  physicalCells:
  - cellType: RACK
    cellChildren: [{cellAddress: n0}, {cellAddress: n1, pinnedCellId: PIN}]
virtualClusters:
  a:
    virtualCells: [{cellType: RACK.NODE, cellNumber: 1}]
    pinnedCells: [{pinnedCellId: PIN}]
"""

TWO_SKUS = """\
physicalCluster:
  skuTypes:
    SMALL: {gpu: 1, cpu: 2, memory: 4096Mi}
    BIG: {gpu: 1, cpu: 8, memory: 32768Mi}
  cellTypes:
    SMALL-NODE: {childCellType: SMALL, childCellNumber: 4, isNodeLevel: true}
    BIG-NODE: {childCellType: BIG, childCellNumber: 4, isNodeLevel: true}
  physicalCells:
  - {cellType: SMALL-NODE, cellAddress: s0}
  - {cellType: BIG-NODE, cellAddress: b0}
virtualClusters:
  small: {virtualCells: [{cellType: SMALL-NODE, cellNumber: 1}]}
  big: {virtualCells: [{cellType: BIG-NODE, cellNumber: 1}]}
"""


# ---- bug 1: bind unbound quota before preempting the VC's guaranteed jobs ------------------


def test_unbound_quota_on_opportunistic_cells_is_bound_before_guaranteed_jobs_are_preempted():
    c = Cluster(ONE_RACK)
    c.submit("t1", vc="a", priority="test", gpus=4)
    c.submit("t2", vc="a", priority="test", gpus=4)
    c.submit("borrow", vc="a", priority="oppo", gpus=4)
    # HiveD's free list: cutting n0 from the rack leaves [n3, n1, n2] (the list's last cell
    # takes the cut one's place), so t2 binds n3; the opportunistic job takes n1.
    assert (c.nodes("t1"), c.nodes("t2"), c.nodes("borrow")) == (["n0"], ["n3"], ["n1"])
    c.submit("p", vc="a", priority="prod", tasks=2, gpus=4)
    assert c.preempted() == ["borrow"]  # HiveD: only the opportunistic job goes
    assert c.nodes("p") == ["n1", "n2"]
    assert c.state("t1") == c.state("t2") == "RUNNING"
    assert len(c.sched.vcs["a"].bound["RACK"]) == 4


def test_a_gang_binds_an_idle_cell_and_preempts_one_guaranteed_job_not_two():
    c = Cluster(ONE_RACK)
    c.submit("t1", vc="a", priority="test", gpus=4)
    c.submit("t2", vc="a", priority="test", gpus=4)
    c.submit("t3", vc="a", priority="test", gpus=4)
    idle = {"n0", "n1", "n2", "n3"} - {n for j in ("t1", "t2", "t3") for n in c.nodes(j)}
    c.submit("p", vc="a", priority="prod", tasks=2, gpus=4)
    assert len(c.preempted()) == 1
    assert idle <= set(c.nodes("p"))  # the idle node HiveD's free list left (n1) is bound


# ---- bug 2: a pinned job is not pruned by an unrelated failure -----------------------------


def test_a_pinned_job_is_not_skipped_behind_a_failed_job_of_the_vcs_other_cells():
    c = Cluster(PINNED)
    c.submit("busy", vc="a", priority="prod", gpus=4)
    c.submit("pin1", vc="a", priority="prod", gpus=4, pinned_cell="PIN")
    assert (c.nodes("busy"), c.nodes("pin1")) == (["n0"], ["n1"])
    c.submit("big", vc="a", priority="prod", gpus=3)  # waits: n0 is full
    c.submit("pin2", vc="a", priority="test", gpus=4, pinned_cell="PIN")  # waits for pin1
    c.finish("pin1")  # one pass tries big (fails), then pin2: larger and lower, but pinned
    assert c.started() == ["pin2"] and c.nodes("pin2") == ["n1"]
    assert c.state("big") == "WAITING"


def test_a_pinned_job_and_a_plain_job_of_one_shape_do_not_share_a_class():
    c = Cluster(PINNED)
    c.submit("busy", vc="a", priority="prod", gpus=4)
    c.submit("pin1", vc="a", priority="prod", gpus=4, pinned_cell="PIN")
    c.submit("plain", vc="a", priority="test", gpus=4)
    c.submit("pin2", vc="a", priority="test", gpus=4, pinned_cell="PIN")
    c.finish("pin1")
    assert c.started() == ["pin2"] and c.state("plain") == "WAITING"


# ---- bug 3: a CPU-heavy job without a skuType is sized by its VC's smallest SKU -------------


def test_a_cpu_heavy_job_without_sku_is_sized_by_its_vcs_sku_and_rejected_when_too_big():
    c = Cluster(TWO_SKUS)
    # 12 CPUs: 6 SMALL leaf cells (2 CPUs each), more than a SMALL node's 4; on BIG it
    # would take 2, but the VC small has no BIG cells.
    with pytest.raises(SpecRejected) as err:
        c.sched.check(parse_job({"name": "j", "vc": "small", "gpus": 1, "cpu": 12}))
    assert str(err.value) == (
        "task role main needs 6 leaf cells in one task, but the largest SMALL node of small "
        "has 4; split it into tasks of at most 4 leaf cells"
    )
    c.submit("ok", vc="big", priority="prod", gpus=1, cpu=12)
    assert c.gpus("ok") == {"b0": (0, 1)}  # 12 CPUs of 8 per BIG cell: 2 leaf cells


def test_a_vc_of_two_skus_sizes_a_job_without_sku_by_its_smallest_in_every_chain():
    mixed = TWO_SKUS.split("virtualClusters:")[0] + (
        "virtualClusters:\n"
        "  mixed: {virtualCells: [{cellType: BIG-NODE, cellNumber: 1}, "
        "{cellType: SMALL-NODE, cellNumber: 1}]}\n"
    )
    c = Cluster(mixed)
    c.submit("j", vc="mixed", priority="prod", gpus=1, cpu=6)
    assert c.gpus("j") == {"b0": (0, 1, 2)}  # 6 CPUs = 3 SMALL cells, 3 cells on BIG too


# ---- bug 4: as few victims as possible ------------------------------------------------------


def test_one_victim_where_one_suffices():
    c = Cluster(ONE_NODE)
    c.submit("x", vc="a", priority="test", gpus=1)
    c.submit("y", vc="a", priority="test", gpus=1)
    c.submit("z", vc="a", priority="test", gpus=2)
    c.submit("w", vc="a", priority="test", gpus=4)
    assert c.nodes("z") == ["n0"]
    c.submit("p", vc="a", priority="prod", gpus=2)
    assert c.preempted() == ["z"] and c.gpus("p") == {"n0": (2, 3)}


def test_the_node_with_fewest_victims_wins():
    c = Cluster(ONE_NODE)
    c.submit("x", vc="a", priority="test", gpus=1)
    c.submit("y", vc="a", priority="test", gpus=1)
    c.submit("h", vc="a", priority="prod", gpus=2)
    c.submit("z", vc="a", priority="test", gpus=2)
    c.submit("h2", vc="a", priority="prod", gpus=2)
    assert c.nodes("x") == c.nodes("y") == ["n0"] and c.nodes("z") == ["n1"]
    c.submit("p", vc="a", priority="prod", gpus=2)
    assert c.preempted() == ["z"]


# ---- item 8: HiveD's submit-time rules ------------------------------------------------------

PINNED_SKU = """\
physicalCluster:
  skuTypes:
    K80: {gpu: 1, cpu: 4, memory: 8192Mi}
    V100: {gpu: 1, cpu: 8, memory: 16384Mi}
  cellTypes:
    K80-NODE: {childCellType: K80, childCellNumber: 4, isNodeLevel: true}
    V100-NODE: {childCellType: V100, childCellNumber: 4, isNodeLevel: true}
  physicalCells:
  - {cellType: K80-NODE, cellAddress: k0}
  - {cellType: V100-NODE, cellAddress: v0, pinnedCellId: PIN}
virtualClusters:
  a:
    virtualCells: [{cellType: K80-NODE, cellNumber: 1}]
    pinnedCells: [{pinnedCellId: PIN}]
"""


@pytest.mark.parametrize(
    ("short", "message"),
    [
        (
            {"priority": "oppo", "pinned_cell": "PIN"},
            "an opportunistic job cannot run in pinned cell PIN (HiveD gives pinned cells to "
            "their VC's guaranteed jobs only); give it a guaranteed priority or drop "
            "pinnedCellId",
        ),
        (
            {"priority": "prod", "sku": "V100"},
            "a has V100 cells only in its pinned cells (PIN); name one with pinnedCellId, or "
            "ask for a skuType of its other cells",
        ),
    ],
)
def test_hived_submit_rules_reject_at_once(short, message):
    c = Cluster(PINNED_SKU)
    with pytest.raises(SpecRejected) as err:
        c.sched.check(parse_job({"name": "j", "vc": "a", "gpus": 1, **short}))
    assert str(err.value) == message


def test_a_job_naming_the_pinned_cell_is_accepted_and_runs_there():
    c = Cluster(PINNED_SKU)
    c.submit("j", vc="a", priority="prod", gpus=1, pinned_cell="PIN")
    assert c.nodes("j") == ["v0"]


def test_skutype_together_with_pinnedcellid_is_refused_as_openpai_does():
    # OpenPAI: "Taskrole main has both skuType and pinnedCellId, only one is allowed."
    c = Cluster(PINNED_SKU)
    with pytest.raises(SpecRejected) as err:
        c.sched.check(
            parse_job({"name": "j", "vc": "a", "gpus": 1, "sku": "V100", "pinned_cell": "PIN"})
        )
    assert str(err.value) == (
        "task role main names both skuType V100 and pinnedCellId PIN; OpenPAI allows only one "
        "(a pinned cell has one leaf type): drop skuType"
    )


def test_a_priority_outside_hiveds_range_is_rejected_and_the_replay_goes_on(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        """\
events:
  - {at: 0, submit: {name: huge, vc: vc1, priority: 2000, gpus: 1, duration: 10}}
  - {at: 0, submit: {name: low, vc: vc1, priority: -5, gpus: 1, duration: 10}}
  - {at: 1, submit: {name: fine, vc: vc1, priority: 1000, gpus: 1, duration: 10}}
expect:
  - {at: 0, job: huge, state: REJECTED, reason: "priority 2000 is outside HiveD's range"}
  - {at: 0, job: low, state: REJECTED, reason: "use -1 (opportunistic) or 0..1000"}
  - {at: 1, job: fine, state: RUNNING}
"""
    )
    result = replay(load_scenario(path))
    assert result.failures == []
    rejected = [j for j in result.steps[0]["jobs"] if j["name"] == "huge"]
    assert rejected[0]["priority"] == 2000 and rejected[0]["state"] == "REJECTED"


# ---- replay output a lab or a test can assert on --------------------------------------------


def test_replay_shows_victims_downgrades_and_bindings_per_event(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        """\
cluster: virtual
events:
  - {at: 0, submit: {name: lazy, vc: vc1, priority: test, gpus: 4, duration: 100,
                     lazy_preemption: true}}
  - {at: 0, submit: {name: borrow, vc: default, priority: oppo, gpus: 2, duration: 100}}
  - {at: 5, submit: {name: boss, vc: vc1, priority: prod, gpus: 4, duration: 10}}
expect:
  - {at: 0, job: borrow, state: RUNNING, preempted: false}
  - {at: 5, job: borrow, state: WAITING, preempted: true}
  - {at: 5, job: lazy, state: RUNNING, downgraded: true, preempted: false}
  - {at: 5, job: boss, state: RUNNING, downgraded: false}
"""
    )
    result = replay(load_scenario(path))
    assert result.failures == []
    # Two submissions at t=0 are two steps; each step says whom it preempted or downgraded.
    assert [(s["t"], s["event"]) for s in result.steps[:3]] == [
        (0, "submit lazy"),
        (0, "submit borrow"),
        (5, "submit boss"),
    ]
    boss = result.steps[2]
    assert boss["downgraded"] == [{"job": "lazy", "by": "boss"}]
    assert boss["preempted"] == [{"job": "borrow", "by": "boss"}]
    assert result.steps[0]["preempted"] == result.steps[0]["downgraded"] == []
    # lazy, now opportunistic, holds no cell of vc1: vc1's one cell is bound where boss runs.
    bound = boss["vcs"]["vc1"]["bound"]
    assert [(b["virtual"], b["physical"], b["used"]) for b in bound] == [
        ("vc1/VGPU-POOL.VGPU-NODE/0", "0/vnode-1", 4)
    ]
    assert boss["vcs"]["vc1"]["free_cells"] == {"VGPU-POOL.VGPU-NODE": 0}
    assert boss["free_list"] == {"VGPU-POOL": {"VGPU-POOL.VGPU-NODE": 1}}


def test_preempted_expectation_is_not_fooled_by_an_opportunistic_jobs_reason(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        """\
cluster: virtual
events:
  - {at: 0, submit: {name: borrow, vc: default, priority: oppo, gpus: 1, duration: 100}}
expect:
  - {at: 0, job: borrow, preempted: true}
"""
    )
    result = replay(load_scenario(path))
    assert result.failures == ["at 0, borrow: preempted: True (line 5): preempted is False"]
    assert "preempted first" in result.steps[0]["jobs"][0]["reason"]


# ---- item 5: a task lies inside ONE of its VC's cells ---------------------------------------

SOCKETS = """\
physicalCluster:
  cellTypes:
    SOCKET: {childCellType: GPU, childCellNumber: 4}
    NODE: {childCellType: SOCKET, childCellNumber: 2, isNodeLevel: true}
    RACK: {childCellType: NODE, childCellNumber: 4}
  physicalCells:
  - cellType: RACK
    cellChildren: [{cellAddress: n0}, {cellAddress: n1}, {cellAddress: n2}, {cellAddress: n3}]
virtualClusters:
  a: {virtualCells: [{cellType: RACK.NODE.SOCKET, cellNumber: 2}]}
  b:
    virtualCells:
    - {cellType: RACK.NODE, cellNumber: 2}
    - {cellType: RACK.NODE.SOCKET, cellNumber: 2}
"""


def test_two_socket_cells_never_make_a_node_for_one_task():
    c = Cluster(SOCKETS)
    c.submit("wide", vc="a", priority="prod", gpus=8)
    assert c.state("wide") == "WAITING"
    assert c.why("wide") == (
        "a task of 8 GPUs can never start in a: a task lies inside one of its VC's cells, and "
        "the largest of a's holds 4; ask for at most 4 per task; position 1 of 1 in a"
    )
    assert c.sched.vcs["a"].bound["RACK"] == {}  # nothing bound for it
    c.submit("pair", vc="a", priority="prod", tasks=2, gpus=4)  # one task per socket cell
    view = c.sched.job("pair")
    assert view is not None and [len(t.gpus) for t in view.tasks] == [4, 4]


def test_a_gang_needs_as_many_cells_as_it_has_tasks_of_that_size():
    c = Cluster(SOCKETS)
    c.submit("g3", vc="b", priority="prod", tasks=3, gpus=8)  # 24 GPUs: b has 24, in 4 cells
    assert c.state("g3") == "WAITING"
    assert "b's cells hold at most 2 such tasks; ask for at most 2 tasks" in (c.why("g3") or "")
    c.submit("g2", vc="b", priority="prod", tasks=2, gpus=8)
    assert c.state("g2") == "RUNNING" and len(set(c.nodes("g2"))) == 2


def test_single_gpu_cells_of_a_generated_one_node_cluster_still_combine():
    # Documented departure: LabHive's generated one-node clusters share a node GPU by GPU.
    from labhive.scheduler.core.config import cluster_from_gpus

    c = Cluster(cluster_from_gpus("box", 4))
    c.submit("two", vc="default", priority="prod", gpus=2)
    assert c.gpus("two") == {"box": (0, 1)}


# ---- item 9: binding splits the cell with the fewest opportunistic jobs ---------------------

TWO_RACKS = """\
physicalCluster:
  cellTypes:
    NODE: {childCellType: GPU, childCellNumber: 4, isNodeLevel: true}
    RACK: {childCellType: NODE, childCellNumber: 2}
  physicalCells:
  - {cellType: RACK, cellChildren: [{cellAddress: n0}, {cellAddress: n1}]}
  - {cellType: RACK, cellChildren: [{cellAddress: n2}, {cellAddress: n3}]}
virtualClusters:
  b: {virtualCells: [{cellType: RACK.NODE, cellNumber: 4}]}
"""


def test_binding_splits_the_rack_with_fewer_opportunistic_jobs():
    c = Cluster(TWO_RACKS)
    c.submit("o", vc="b", priority="oppo", gpus=1)
    assert c.nodes("o") == ["n0"]
    c.submit("j", vc="b", priority="prod", gpus=4)
    assert c.nodes("j") == ["n2"]  # not n1: rack 0 holds an opportunistic job
    c.submit("k", vc="b", priority="prod", gpus=4)
    assert c.nodes("k") == ["n3"]  # the idle rack's other node, then rack 0
    c.submit("m", vc="b", priority="prod", gpus=4)
    assert c.nodes("m") == ["n1"] and c.preempted() == []


# ---- the documented differences from HiveD, each a scenario ---------------------------------

DIFFERENCES = sorted((Path(__file__).parent / "data" / "hived-differences").glob("*.yaml"))


@pytest.mark.parametrize("path", DIFFERENCES, ids=lambda p: p.stem)
def test_each_documented_difference_from_hived_replays_as_described(path):
    scenario = load_scenario(path)
    assert scenario.expects
    assert replay(scenario).failures == []


def test_every_difference_scenario_is_listed_in_the_docs():
    docs = (Path(__file__).parents[1] / "docs" / "scheduler-core.md").read_text()
    section = docs.split("## Where LabHive differs from HiveD, and why")[1]
    assert len(DIFFERENCES) == 9
    for path in DIFFERENCES:
        assert f"tests/data/hived-differences/{path.name}" in section


# ---- item 6: affinity groups, each placed whole and apart -----------------------------------

TWO_GROUPS = {
    "protocolVersion": 2,
    "name": "two-groups",
    "type": "job",
    "defaults": {"virtualCluster": "a"},
    "taskRoles": {
        "ps": {"instances": 1, "resourcePerInstance": {"gpu": 4}, "commands": ["true"]},
        "worker": {"instances": 2, "resourcePerInstance": {"gpu": 2}, "commands": ["true"]},
    },
    "extras": {
        "hivedScheduler": {
            "jobPriorityClass": "prod",
            "taskRoles": {
                "ps": {"pinnedCellId": "PIN", "affinityGroupName": "ps"},
                "worker": {"affinityGroupName": "workers"},
            },
        }
    },
}


def test_affinity_groups_place_a_pinned_role_beside_the_vcs_other_cells():
    result = replay(load_scenario(Path(__file__).parent / "data" / "affinity-groups.yaml"))
    assert result.failures == []
    job = result.steps[0]["jobs"][0]
    assert {(t["role"], t["node"]) for t in job["tasks"]} == {
        ("ps", "node-1"),
        ("worker", "node-0"),
    }


def test_each_affinity_group_starts_on_its_own_when_it_fits():
    from labhive.scheduler.core.model import Submit

    c = Cluster(PINNED)
    c.submit("busy", vc="a", priority="prod", gpus=3)  # n0 has 1 GPU left: workers wait
    c.handle(Submit("two-groups", parse_job(TWO_GROUPS)))
    view = c.sched.job("two-groups")
    assert view is not None and view.state == "RUNNING"
    assert [(t.role, t.node) for t in view.tasks] == [("ps", "n1")]
    c.finish("busy")
    view = c.sched.job("two-groups")
    assert view is not None
    assert sorted((t.role, t.node) for t in view.tasks) == [
        ("ps", "n1"),
        ("worker", "n0"),
        ("worker", "n0"),
    ]


def test_roles_of_one_affinity_group_share_a_chain_but_groups_need_not():
    c = Cluster(PINNED_SKU)
    roles = {
        "k": {"instances": 1, "resourcePerInstance": {"gpu": 1}, "commands": ["true"]},
        "v": {"instances": 1, "resourcePerInstance": {"gpu": 1}, "commands": ["true"]},
    }

    def job(groups: dict[str, str], v: dict[str, str]) -> object:
        hived = {
            "jobPriorityClass": "prod",
            "taskRoles": {
                "k": {"skuType": "K80", "affinityGroupName": groups["k"]},
                "v": {**v, "affinityGroupName": groups["v"]},
            },
        }
        return parse_job(
            {
                "protocolVersion": 2,
                "name": "j",
                "defaults": {"virtualCluster": "a"},
                "taskRoles": roles,
                "extras": {"hivedScheduler": hived},
            }
        )

    # The V100 role runs in the pinned cell (V100), the K80 role on the VC's K80 cells.
    c.sched.check(job({"k": "one", "v": "two"}, {"pinnedCellId": "PIN"}))
    with pytest.raises(SpecRejected, match="a gang stays within one chain, but its roles ask"):
        c.sched.check(job({"k": "same", "v": "same"}, {"skuType": "V100"}))


def test_an_openpai_job_with_a_priority_outside_hiveds_range_is_rejected_in_a_replay():
    spec = {
        "protocolVersion": 2,
        "name": "huge",
        "defaults": {"virtualCluster": "vc1"},
        "taskRoles": {"main": {"resourcePerInstance": {"gpu": 1}, "commands": ["true"]}},
        "extras": {"hivedScheduler": {"jobPriorityClass": 1001}},
    }
    scenario = load_scenario(
        {
            "events": [
                {"at": 0, "submit": {"spec": spec, "duration": 5}},
                {"at": 1, "submit": {"name": "next", "vc": "vc1", "gpus": 1, "duration": 5}},
            ],
            "expect": [
                {"at": 0, "job": "huge", "state": "REJECTED", "reason": "priority 1001"},
                {"at": 1, "job": "next", "state": "RUNNING"},
            ],
        }
    )
    assert replay(scenario).failures == []
