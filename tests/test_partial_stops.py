"""HiveD's unit of preemption, lazy preemption and node failure (issue 17 items 6 and 7): a task
of an incremental job (``gangAllocation: false``), an affinity group of a job of several, not
the whole job. Given this cluster and these submissions, expect these victims and placements."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from helpers import Cluster

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import (
    Adopt,
    Downgrade,
    NodeDown,
    Preempt,
    Stop,
    StopTasks,
    Submit,
)
from labhive.scheduler.drivers.replay import replay, snapshot
from labhive.scheduler.drivers.scenario import load_scenario
from labhive.scheduler.forecast.eta import RunningJob, WaitingJob, forecast
from labhive.scheduler.hived import HivedScheduler
from labhive.scheduler.hived.core import AdoptRefused
from labhive.scheduler.sim.engine import Simulation
from labhive.scheduler.sim.runner import run_scenario

DATA = Path(__file__).parent / "data" / "partial-stops"

ONE_NODE_VC = """\
physicalCluster:
  cellTypes:
    NODE: {childCellType: GPU, childCellNumber: 4, isNodeLevel: true}
    RACK: {childCellType: NODE, childCellNumber: 3}
  physicalCells:
  - cellType: RACK
    cellChildren: [{cellAddress: n0}, {cellAddress: n1}, {cellAddress: n2}]
virtualClusters:
  a: {virtualCells: [{cellType: RACK.NODE, cellNumber: 1}]}
  b: {virtualCells: [{cellType: RACK.NODE, cellNumber: 2}]}
"""

THREE_NODES = """\
physicalCluster:
  cellTypes:
    NODE: {childCellType: GPU, childCellNumber: 4, isNodeLevel: true}
    RACK: {childCellType: NODE, childCellNumber: 3}
  physicalCells:
  - cellType: RACK
    cellChildren: [{cellAddress: n0}, {cellAddress: n1}, {cellAddress: n2}]
virtualClusters:
  a: {virtualCells: [{cellType: RACK.NODE, cellNumber: 3}]}
"""


def stops(c: Cluster) -> list[tuple[str, list[str], str]]:
    return [
        (d.job_id, [f"{t.role}-{t.index}" for t in d.tasks], d.by)
        for d in c.last
        if isinstance(d, StopTasks)
    ]


def whole(c: Cluster) -> list[str]:
    return [d.job_id for d in c.last if isinstance(d, Preempt | Stop)]


def running_tasks(c: Cluster, name: str) -> list[str]:
    view = c.sched.job(name)
    assert view is not None
    return sorted(f"{t.role}-{t.index}@{t.node}" for t in view.tasks)


# ---- item 7: each task of an incremental job is its own unit --------------------------------


def test_a_preemptor_needing_one_gpu_stops_one_task_of_an_incremental_job():
    c = Cluster(ONE_NODE_VC)
    c.submit("inc", vc="a", priority="test", tasks=4, gpus=1, gang=False)
    assert running_tasks(c, "inc") == ["main-0@n0", "main-1@n0", "main-2@n0", "main-3@n0"]
    c.submit("boss", vc="a", priority="prod", gpus=1)
    assert whole(c) == []
    assert stops(c) == [("inc", ["main-0"], "boss")]
    assert c.nodes("boss") == ["n0"]
    assert c.state("inc") == "RUNNING"
    assert running_tasks(c, "inc") == ["main-1@n0", "main-2@n0", "main-3@n0"]
    why = c.why("inc")
    assert why is not None and "1 of 4 tasks waiting" in why
    c.finish("boss")  # the stopped task is placed again, as its own group
    assert [(d.job_id, [t.index for t in d.tasks]) for d in c.last] == [("inc", [0])]
    assert len(running_tasks(c, "inc")) == 4


def test_a_two_gpu_preemptor_stops_two_one_gpu_tasks_and_no_more():
    c = Cluster(ONE_NODE_VC)
    c.submit("inc", vc="a", priority="test", tasks=4, gpus=1, gang=False)
    c.submit("boss", vc="a", priority="prod", gpus=2)
    assert [len(t) for _, t, _ in stops(c)] == [2]
    assert len(running_tasks(c, "inc")) == 2


def test_a_gang_is_still_preempted_whole():
    c = Cluster(ONE_NODE_VC)
    c.submit("gang", vc="a", priority="test", tasks=4, gpus=1)
    c.submit("boss", vc="a", priority="prod", gpus=1)
    assert whole(c) == ["gang"] and stops(c) == []


def test_an_incremental_job_whose_every_running_task_is_hit_is_preempted_whole():
    c = Cluster(ONE_NODE_VC)
    c.submit("inc", vc="a", priority="test", tasks=2, gpus=2, gang=False)
    c.submit("boss", vc="a", priority="prod", gpus=4)
    assert whole(c) == ["inc"] and stops(c) == []
    assert c.state("inc") == "WAITING"


def test_a_node_going_down_stops_only_the_tasks_of_an_incremental_job_on_it():
    c = Cluster(THREE_NODES)
    c.submit("fill", vc="a", priority="test", gpus=4)  # n0
    # HiveD's free list after n0 is cut from the rack: [n2, n1] (the last takes its place).
    c.submit("inc", vc="a", priority="test", tasks=2, gpus=4, gang=False)  # n2, n1
    assert running_tasks(c, "inc") == ["main-0@n2", "main-1@n1"]
    c.handle(NodeDown("n1", reason="disk failed"))
    assert whole(c) == []
    assert stops(c) == [("inc", ["main-1"], "")]
    assert running_tasks(c, "inc") == ["main-0@n2"]
    why = c.why("inc")
    assert why is not None and "waiting" in why


def test_a_node_going_down_under_a_gang_stops_it_whole():
    c = Cluster(THREE_NODES)
    c.submit("gang", vc="a", priority="test", tasks=2, gpus=4)  # n0, n2 (HiveD's list order)
    c.handle(NodeDown("n2"))
    assert whole(c) == ["gang"] and stops(c) == []


def test_lazy_preemption_downgrades_only_the_task_in_the_way():
    c = Cluster(THREE_NODES.replace("cellNumber: 3", "cellNumber: 2"))
    c.submit("inc", vc="a", priority="test", tasks=2, gpus=4, gang=False, lazy_preemption=True)
    # HiveD's free list after n0 is cut from the rack: [n2, n1] (the last takes its place).
    assert running_tasks(c, "inc") == ["main-0@n0", "main-1@n2"]
    c.submit("boss", vc="a", priority="prod", gpus=4)
    downgrades = [d for d in c.last if isinstance(d, Downgrade)]
    assert [(d.job_id, [t.index for t in d.tasks]) for d in downgrades] == [("inc", [0])]
    assert whole(c) == [] and stops(c) == []
    # The downgraded task's cell is no longer a's: a binds the idle node n1 for boss.
    assert c.nodes("boss") == ["n1"]
    assert running_tasks(c, "inc") == ["main-0@n0", "main-1@n2"]
    view = c.sched.job("inc")
    assert view is not None and not view.opportunistic  # main-1 is still guaranteed
    assert view.why is not None and view.why.startswith(
        "task main-0 downgraded to opportunistic by boss"
    )
    leaves = {leaf.job: leaf.prio for leaf in c.sched.tree.nodes["n2"][0].leaf_cells()}
    assert leaves == {"inc": 10}
    leaves = {leaf.job: leaf.prio for leaf in c.sched.tree.nodes["n0"][0].leaf_cells()}
    assert leaves == {"inc": -1}


def leaf_priorities(sched: Any) -> dict[str, list[tuple[str, int]]]:
    """Per node, which job holds each used GPU and at what priority (-1: opportunistic)."""
    return {
        node: sorted((leaf.job, leaf.prio) for leaf in cells[0].leaf_cells() if leaf.job)
        for node, cells in sched.tree.nodes.items()
    }


def vc_counts(sched: Any) -> dict[str, tuple[int, int]]:
    return {v.name: (v.used_gpus, v.opportunistic_gpus) for v in sched.cluster().vcs.values()}


def test_a_restart_adopts_a_task_downgraded_alone_as_opportunistic_outside_its_vc():
    """Given the lazy preemption above (inc's main-0 on n0, no longer a's cell; boss on n1),
    a driver restarting adopts every running job in id order. Told which task runs
    opportunistic, the new scheduler counts exactly as the old one; not told, inc's tasks
    would take both of a's cells and boss, a prod job, could not be adopted."""
    config = THREE_NODES.replace("cellNumber: 3", "cellNumber: 2")
    c = Cluster(config)
    c.submit("inc", vc="a", priority="test", tasks=2, gpus=4, gang=False, lazy_preemption=True)
    c.submit("boss", vc="a", priority="prod", gpus=4)
    views = {j: c.sched.job(j) for j in ("inc", "boss")}
    specs = {j: c.sched._jobs[j].spec for j in views}

    def adopt_all(told: bool) -> Cluster:
        cold = Cluster(config)
        for j, view in views.items():
            assert view is not None
            downgraded = (("main", 0, "boss"),) if told and j == "inc" else ()
            cold.handle(Adopt(j, specs[j], view.tasks, view.opportunistic, 0.0, downgraded))
        return cold

    cold = adopt_all(told=True)
    assert leaf_priorities(cold.sched) == leaf_priorities(c.sched)
    assert vc_counts(cold.sched) == vc_counts(c.sched)
    why = cold.why("inc")
    assert why is not None and why.startswith("task main-0 downgraded to opportunistic by boss")
    with pytest.raises(AdoptRefused, match="GPU n1/0 lies outside a's free cells"):
        adopt_all(told=False)


def test_an_eta_forecast_adopts_a_task_downgraded_alone_where_lazy_preemption_left_it():
    """The same lazy preemption, then a 4-GPU job of a waits: a's two cells hold inc's main-1
    and boss, so it starts when boss ends (50 s), not at once on inc's main-0 node. The
    forecast learns the live state from the views, which carry the per-task downgrade; without
    it, the forecast's own adoption of inc is refused and the waiting job gets no estimate."""
    config = THREE_NODES.replace("cellNumber: 3", "cellNumber: 2")
    c = Cluster(config)
    c.submit("inc", vc="a", priority="test", tasks=2, gpus=4, gang=False, lazy_preemption=True)
    c.submit("boss", vc="a", priority="prod", gpus=4)
    c.submit("next", vc="a", priority="test", gpus=4)
    assert c.state("next") == "WAITING"
    left = {"inc": 100.0, "boss": 50.0}
    running = [
        RunningJob(
            v.job_id,
            c.sched._jobs[v.job_id].spec,
            v.tasks,
            (left[v.job_id],) * 3,
            v.opportunistic,
            v.downgraded,
        )
        for v in c.sched.jobs()
        if v.state == "RUNNING"
    ]
    assert [r.downgraded for r in running if r.job_id == "inc"] == [(("main", 0, "boss"),)]
    waiting = [WaitingJob("next", c.sched._jobs["next"].spec, 0.0, (10.0, 10.0, 10.0))]
    out = forecast(lambda: HivedScheduler(load_cluster_config(config)), 0.0, running, waiting)
    assert out["next"].eta == 50.0
    told_nothing = [dataclasses.replace(r, downgraded=()) for r in running]
    with pytest.raises(AdoptRefused):
        forecast(lambda: HivedScheduler(load_cluster_config(config)), 0.0, told_nothing, waiting)


def test_a_second_preemptor_downgrades_the_other_task_and_preempts_only_the_first():
    c = Cluster(THREE_NODES.replace("cellNumber: 3", "cellNumber: 2"))
    c.submit("inc", vc="a", priority="test", tasks=2, gpus=4, gang=False, lazy_preemption=True)
    c.submit("boss", vc="a", priority="prod", gpus=4)  # downgrades main-0 on n0; boss on n1
    c.submit("boss2", vc="a", priority="prod", gpus=4)
    # a's two cells hold main-1 (guaranteed) and boss: main-1 is downgraded in turn, its cell
    # unbound, and a binds again the cell in the first node holding one opportunistic job
    # (n0, cell order): only the already downgraded main-0 stops.
    downgrades = [
        (d.job_id, [t.index for t in d.tasks]) for d in c.last if isinstance(d, Downgrade)
    ]
    assert downgrades == [("inc", [1])]
    assert stops(c) == [("inc", ["main-0"], "boss2")]
    assert c.nodes("boss2") == ["n0"]
    assert c.state("inc") == "RUNNING"
    assert running_tasks(c, "inc") == ["main-1@n2"]


# ---- item 6: an affinity group is whole or not at all ---------------------------------------

GROUPS = {
    "protocolVersion": 2,
    "name": "groups",
    "type": "job",
    "defaults": {"virtualCluster": "a"},
    "taskRoles": {
        "ps": {"instances": 1, "resourcePerInstance": {"gpu": 2}, "commands": ["true"]},
        "worker": {"instances": 2, "resourcePerInstance": {"gpu": 4}, "commands": ["true"]},
    },
    "extras": {
        "hivedScheduler": {
            "jobPriorityClass": "test",
            "taskRoles": {
                "ps": {"affinityGroupName": "ps"},
                "worker": {"affinityGroupName": "workers"},
            },
        }
    },
}


def test_preempting_one_task_of_an_affinity_group_stops_its_group_and_no_other():
    c = Cluster(THREE_NODES)
    c.handle(Submit("groups", parse_job(GROUPS)))
    # HiveD's free list after n0 is cut from the rack: [n2, n1] (the last takes its place).
    assert running_tasks(c, "groups") == ["ps-0@n0", "worker-0@n2", "worker-1@n1"]
    c.submit("boss", vc="a", priority="prod", gpus=4, tasks=1)  # n0 has 2 free: not enough
    assert whole(c) == []
    assert stops(c) in (
        [("groups", ["worker-0", "worker-1"], "boss")],
        [("groups", ["ps-0"], "boss")],
    )
    group = stops(c)[0][1]
    if group == ["ps-0"]:
        assert running_tasks(c, "groups") == ["worker-0@n2", "worker-1@n1"]
    else:  # the worker group goes whole; it cannot come back on one node: it waits
        assert running_tasks(c, "groups") == ["ps-0@n0"]
    assert c.state("groups") == "RUNNING"


def test_a_node_going_down_stops_the_affinity_group_on_it_whole():
    c = Cluster(THREE_NODES)
    c.handle(Submit("groups", parse_job(GROUPS)))
    c.handle(NodeDown("n2"))
    assert whole(c) == []
    assert stops(c) == [("groups", ["worker-0", "worker-1"], "")]
    assert running_tasks(c, "groups") == ["ps-0@n0"]


# ---- the same through the virtual-time driver -----------------------------------------------


def test_partial_stop_scenarios_replay_as_described():
    paths = sorted(DATA.glob("*.yaml"))
    assert paths
    for path in paths:
        result = replay(load_scenario(path))
        assert result.failures == [], path.name


def test_replay_json_names_the_preempted_tasks_and_their_states():
    result = replay(load_scenario(DATA / "incremental-one-task-preempted.yaml"))
    step = next(s for s in result.steps if s["event"].startswith("submit boss"))
    assert step["preempted"] == [{"job": "inc", "by": "boss", "tasks": ["main-0"]}]
    inc = next(j for j in step["jobs"] if j["name"] == "inc")
    states = {(t["role"], t["index"]): t["state"] for t in inc["tasks"]}
    assert states == {
        ("main", 0): "WAITING",
        ("main", 1): "RUNNING",
        ("main", 2): "RUNNING",
        ("main", 3): "RUNNING",
    }
    waiting = next(t for t in inc["tasks"] if t["state"] == "WAITING")
    assert "preempted by boss" in waiting["reason"]


# ---- the simulator: the same placements, and each stopped task's work lost -----------------


def simulated(path: Path, checkpoint: float | None = None) -> tuple[list[dict], Any]:
    steps: list[dict] = []

    def observe(sim: Simulation, label: str) -> None:
        steps.append(snapshot(sim, label))

    run = run_scenario("hived", load_scenario(path), checkpoint=checkpoint, observe=observe)
    return steps, run.result


def test_partial_stop_scenarios_simulate_exactly_as_they_replay():
    for path in sorted(DATA.glob("*.yaml")):
        assert simulated(path)[0] == replay(load_scenario(path)).steps, path.name


def test_a_simulated_job_loses_only_the_stopped_tasks_gpu_time_and_ends_later():
    path = DATA / "incremental-one-task-preempted.yaml"
    _, result = simulated(path)
    inc = next(j for j in result.jobs if j.spec.name == "inc")
    # 4 tasks x 1 GPU; main-0 ran 10 s before boss took its GPU at 10, waited 50 s, then the
    # job ran its 100 s afresh: it ends at 160, held 4 GPUs for 10 s, 3 for 50 s, 4 for 100 s.
    assert inc.end == 160
    assert inc.gpu_seconds == 4 * 10 + 3 * 50 + 4 * 100
    assert inc.wasted_gpu_seconds == 10 * 1  # only main-0's 10 s of work was lost
    # With checkpoints every 5 s the job keeps its first 10 s: it ends 90 s after the restart.
    _, result = simulated(path, checkpoint=5)
    inc = next(j for j in result.jobs if j.spec.name == "inc")
    assert inc.end == 150 and inc.wasted_gpu_seconds == 0


# ---- the live service with --stops jobs, or an executor that cannot stop tasks alone --------


def test_whole_job_stops_stop_an_incremental_job_whole():
    from labhive.scheduler.service.loop import whole_job_stops

    c = Cluster(ONE_NODE_VC)
    whole_job_stops(c.sched)
    c.submit("inc", vc="a", priority="test", tasks=4, gpus=1, gang=False)
    c.submit("boss", vc="a", priority="prod", gpus=1)
    assert whole(c) == ["inc"] and stops(c) == []


def test_a_node_going_down_stops_only_the_cpu_only_task_on_it():
    c = Cluster(THREE_NODES)
    c.submit("cpu", vc="a", priority="test", tasks=2, gpus=0, cpu=20, gang=False)
    assert running_tasks(c, "cpu") == ["main-0@n0", "main-1@n1"]
    c.handle(NodeDown("n1"))
    assert stops(c) == [("cpu", ["main-1"], "")]
    # n2 has the CPUs: the stopped task is placed again at once.
    assert [(d.job_id, [t.node for t in d.tasks]) for d in c.last[1:]] == [("cpu", ["n2"])]
    assert running_tasks(c, "cpu") == ["main-0@n0", "main-1@n2"]


def test_replay_json_names_the_downgraded_tasks():
    result = replay(load_scenario(DATA / "incremental-lazy-one-task.yaml"))
    assert result.failures == []
    step = next(s for s in result.steps if s["event"].startswith("submit boss"))
    assert step["downgraded"] == [{"job": "inc", "by": "boss", "tasks": ["main-0"]}]
    assert step["preempted"] == []
