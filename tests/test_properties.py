"""Given any cluster and any sequence of events, expect HiveD's invariants after every event:
no GPU used twice, a gang whole or not at all, a VC's guaranteed jobs within its cells, VC
safety, a reason for every waiting job, the core's counters true to its cells, a task inside one
of its VC's cells, and no guaranteed job preempted while the preemptor's VC could bind more of
its quota instead."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labhive.scheduler.core.config import ClusterConfig, load_cluster_config
from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import (
    Adopt,
    Cancel,
    Event,
    Finish,
    NodeDown,
    NodeUp,
    Preempt,
    Requeue,
    SpecRejected,
    Start,
    StopTasks,
    Submit,
    TaskPlacement,
    Tick,
)
from labhive.scheduler.hived.cells import Cell
from labhive.scheduler.hived.core import HivedScheduler
from labhive.scheduler.policies import get_policy

#: The events that end a job's attempt, by the name the drawn steps give them: all take
#: (job id, time).
ENDINGS: dict[str, Callable[[str, float], Event]] = {
    "finish": Finish,
    "requeue": Requeue,
    "cancel": Cancel,
}

PROPERTY_SETTINGS = settings(
    max_examples=settings().max_examples * 3 // 2,  # 150, or more when exploring
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def clusters(
    draw: Any, whole_racks: bool = False, gpu_cells: bool = False, sockets: bool = False
) -> dict[str, Any]:
    """Racks of nodes; VCs own node-level cells (some nodes left to no VC), with
    ``whole_racks`` some VCs own rack-level cells too, with ``gpu_cells`` single GPUs, with
    ``sockets`` the two socket cells (half a node each) of the loose nodes."""
    racks = draw(st.integers(1, 3))
    per_rack = draw(st.integers(1, 3))
    gpus = draw(st.sampled_from([2, 4] if sockets else [1, 2, 4]))
    vcs = draw(st.integers(1, 3))
    rack_owner = [-1] * racks
    if whole_racks:
        rack_owner = draw(st.lists(st.integers(-1, vcs - 1), min_size=racks, max_size=racks))
    loose = per_rack * sum(1 for o in rack_owner if o < 0)
    owners = draw(st.lists(st.integers(-1, vcs - 1), min_size=loose, max_size=loose))
    counts = [owners.count(v) for v in range(vcs)]
    rack_counts = [rack_owner.count(v) for v in range(vcs)]
    gpu_counts = [0] * vcs
    if gpu_cells:  # the loose nodes' GPUs go one by one instead
        split = draw(
            st.lists(st.integers(-1, vcs - 1), min_size=loose * gpus, max_size=loose * gpus)
        )
        gpu_counts = [split.count(v) for v in range(vcs)]
        counts = [0] * vcs
    socket_counts = [0] * vcs
    if sockets:  # the loose nodes' sockets go one by one instead
        split = draw(st.lists(st.integers(-1, vcs - 1), min_size=loose * 2, max_size=loose * 2))
        socket_counts = [split.count(v) for v in range(vcs)]
        counts = [0] * vcs
    if not any(counts) and not any(rack_counts) and not any(gpu_counts) and not any(socket_counts):
        counts[0] = 1 if loose else 0
        rack_counts[0] = 0 if loose else 1
    node = {"childCellType": "GPU", "childCellNumber": gpus, "isNodeLevel": True}
    types = {"NODE": node, "RACK": {"childCellType": "NODE", "childCellNumber": per_rack}}
    if sockets:
        types["SOCKET"] = {"childCellType": "GPU", "childCellNumber": gpus // 2}
        types["NODE"] = {"childCellType": "SOCKET", "childCellNumber": 2, "isNodeLevel": True}
    small = "RACK.NODE.SOCKET" if sockets else "RACK.NODE.GPU"
    return {
        "physicalCluster": {
            "cellTypes": types,
            "physicalCells": [
                {
                    "cellType": "RACK",
                    "cellChildren": [{"cellAddress": f"r{r}n{i}"} for i in range(per_rack)],
                }
                for r in range(racks)
            ],
        },
        "virtualClusters": {
            f"vc{v}": {
                "virtualCells": [
                    {"cellType": "RACK.NODE", "cellNumber": n},
                    {"cellType": "RACK", "cellNumber": rack_counts[v]},
                    {"cellType": small, "cellNumber": gpu_counts[v] + socket_counts[v]},
                ]
            }
            for v, n in enumerate(counts)
        },
    }


def operations(vcs: int) -> Any:
    submit = st.fixed_dictionaries(
        {
            "vc": st.integers(0, vcs - 1).map(lambda v: f"vc{v}"),
            "priority": st.sampled_from([-1, 0, 10, 100]),
            "tasks": st.integers(1, 3),
            "gpus": st.integers(1, 4),
            "gang": st.booleans(),
            "lazy_preemption": st.booleans(),
        }
    ).map(lambda d: ("submit", d))
    groups = st.fixed_dictionaries(
        {
            "vc": st.integers(0, vcs - 1).map(lambda v: f"vc{v}"),
            "priority": st.sampled_from([-1, 0, 10, 100]),
            "a": st.integers(1, 2),
            "b": st.integers(1, 2),
            "gpus": st.integers(1, 4),
            "lazy": st.booleans(),
        }
    ).map(lambda d: ("groups", d))
    other = st.tuples(
        st.sampled_from(["finish", "requeue", "cancel", "node_down", "node_up"]),
        st.integers(0, 1000),
    )
    return st.lists(st.one_of(submit, submit, groups, other), min_size=1, max_size=30)


def two_groups(name: str, d: dict[str, Any]) -> dict[str, Any]:
    """An OpenPAI job whose roles a and b are two affinity groups."""
    role = {"resourcePerInstance": {"gpu": d["gpus"]}, "commands": ["true"]}
    hived = {
        "jobPriorityClass": d["priority"],
        "lazyPreemptionEnable": d["lazy"],
        "taskRoles": {"a": {"affinityGroupName": "ga"}, "b": {"affinityGroupName": "gb"}},
    }
    return {
        "protocolVersion": 2,
        "name": name,
        "defaults": {"virtualCluster": d["vc"]},
        "taskRoles": {"a": {**role, "instances": d["a"]}, "b": {**role, "instances": d["b"]}},
        "extras": {"hivedScheduler": hived},
    }


def check_invariants(sched: HivedScheduler, config: Any) -> None:
    views = sched.jobs()
    used: set[tuple[str, int]] = set()
    per_vc: dict[str, int] = {}
    for view in views:
        job = sched._jobs[view.job_id]
        spec = job.spec
        gpus = [(t.node, g) for t in view.tasks for g in t.gpus]
        assert not used & set(gpus), f"a GPU is used twice: {used & set(gpus)}"
        used.update(gpus)
        if spec.gang and not job.grouped:
            assert len(view.tasks) in (0, spec.task_count), "a gang is placed partly"
        for group in {r.affinity_group for r in spec.roles} if job.grouped else ():
            roles = {r.name: r.instances for r in spec.roles if r.affinity_group == group}
            placed = sum(1 for t in view.tasks if t.role in roles)
            assert placed in (0, sum(roles.values())), f"affinity group {group} placed partly"
        held = {id(leaf) for _, leaves in job.placed.values() for leaf in leaves}
        owned = {id(leaf) for leaf in sched.tree.leaf.values() if leaf.job == view.job_id}
        assert held == owned, "a stopped task still holds cells, or a task holds none"
        if view.state == "WAITING" or len(view.tasks) < spec.task_count:
            assert view.why, f"{view.name} waits without a reason"
        if not view.opportunistic and view.tasks:
            # Tasks lazy preemption downgraded (``job.downgraded``) run opportunistically: their
            # cells may be unbound (the VC's guaranteed jobs left them) and are not the VC's.
            guaranteed = [
                leaves for key, (_, leaves) in job.placed.items() if key not in job.downgraded
            ]
            per_vc[view.vc] = per_vc.get(view.vc, 0) + sum(map(len, guaranteed))
            for leaves in guaranteed:
                owners: dict[int, Cell] = {}
                for leaf in leaves:
                    owner = leaf.owner()
                    assert owner is not None and owner.vc == view.vc, "guaranteed outside its VC"
                    owners[id(owner)] = owner
                assert len(owners) == 1 or all(not o.children for o in owners.values()), (
                    "a task spans several of its VC's cells"  # single-GPU cells excepted
                )
    for name, n in per_vc.items():
        assert n <= sched.vcs[name].leaves(sched.tree), f"{name} uses more than its cells"
    check_counters(sched)


def hived_policy(config: ClusterConfig) -> HivedScheduler:
    """The HiveD policy for this cluster, built as the service builds it."""
    policy = get_policy("hived", config)
    assert isinstance(policy, HivedScheduler)
    return policy


def check_counters(sched: HivedScheduler) -> None:
    """The incremental counters equal what the cells say."""
    for vc in sched.vcs.by_name.values():
        vc.check()
        bound = [c for cells in vc.bound.values() for c in cells.values() if not c.pinned]
        assert all(c.guaranteed > 0 for c in bound), "an idle VC cell stayed bound"
    tops = [t for c in sched.tree.chains.values() for t in c.tops]
    assert sched.tree.free_total == sum(t.free for t in tops)
    assert sched.tree.oppo_total == sum(t.oppo for t in tops)
    for chain in sched.tree.chains.values():
        for node in chain.node_cells:
            leaves = node.leaf_cells()
            assert node.free == sum(1 for x in leaves if x.job is None and x.bad == 0)
            assert (node in sched.tree.open[chain.name]) == (node.free > 0)


def running_part(job: Any) -> tuple[Any, tuple[TaskPlacement, ...]]:
    """The job's running guaranteed tasks as a job of their own (an incremental job may run
    some). Tasks lazy preemption downgraded run outside the VC's cells, as opportunistic
    ones: left out like the VC's opportunistic jobs (adopted as guaranteed they would bind
    a cell the VC no longer holds)."""
    tasks = sorted(
        (p for key, (p, _) in job.placed.items() if key not in job.downgraded),
        key=lambda p: (p.role, p.index),
    )
    roles = []
    renumbered = []
    for role in job.spec.roles:
        mine = [p for p in tasks if p.role == role.name]
        if mine:
            roles.append(replace(role, instances=len(mine)))
            renumbered += [replace(p, index=i) for i, p in enumerate(mine)]
    return replace(job.spec, roles=tuple(roles)), tuple(renumbered)


def check_vc_safety(sched: HivedScheduler, config: Any) -> None:
    """A waiting guaranteed job that fits in its VC's cells given only its VC's running jobs
    is not waiting: no other VC's job keeps it out (checked while every node is healthy)."""
    if any(c.bad for c in sched.tree.cells.values()):
        return
    for view in sched.jobs():
        job = sched._jobs[view.job_id]
        if view.state != "WAITING" or job.spec.opportunistic:
            continue
        alone = HivedScheduler(config)
        for other in sched._jobs.values():
            if other.vc == job.vc and other.placed and not other.opportunistic:
                spec, tasks = running_part(other)
                if tasks:  # (every running task downgraded: none is the VC's)
                    alone.handle(Adopt(other.job_id, spec, tasks))
        decisions = alone.handle(Submit(job.job_id, job.spec))
        started = any(getattr(d, "job_id", None) == job.job_id for d in decisions)
        assert not started, f"{view.name} waits though its VC has room: {view.why}"


def bindable(sched: HivedScheduler) -> dict[str, tuple[set[str], int]]:
    """Per VC, the healthy free physical nodes it may bind now, and its unbound node cells
    (node-level quota only: each binding leaves the others safe)."""
    out = {}
    for name, vc in sched.vcs.by_name.items():
        nodes: set[str] = set()
        unbound = 0
        for chain, levels in vc.unbound.items():
            level = sched.tree.chains[chain].node_level
            unbound += levels.get(level, 0)
            for roots in sched.tree.free_list[chain].values():
                for root in roots.values():
                    for cell in root.at_level(level):
                        if not cell.bad and sched.vcs.can_bind(vc, cell, root):
                            nodes.add(cell.node or "")
        out[name] = (nodes, unbound)
    return out


def check_binds_before_preempting(
    sched: HivedScheduler,
    guaranteed: dict[str, set[tuple[str, int]]],
    before: dict[str, tuple[set[str], int]],
    decisions: list[Any],
) -> None:
    """A guaranteed job is never preempted while the preemptor's VC could bind its unbound
    quota to free (idle or opportunistic, healthy) nodes: a preemptor of a guaranteed job
    used as many of the nodes its VC could bind as it had cells to bind."""
    placed: dict[str, set[str]] = {}  # an incremental job may start in several decisions
    for d in decisions:
        if isinstance(d, Start):
            placed.setdefault(d.job_id, set()).update(t.node for t in d.tasks)
    for d in decisions:
        if not isinstance(d, Preempt | StopTasks) or d.job_id not in guaranteed:
            continue
        downgraded = guaranteed[d.job_id]
        if isinstance(d, StopTasks) and all((t.role, t.index) in downgraded for t in d.tasks):
            continue  # only tasks already downgraded: opportunistic work
        if d.by not in placed:
            continue
        job = sched._jobs.get(d.by)
        if job is None or job.spec.opportunistic:
            continue
        nodes, unbound = before[job.vc]
        used = nodes & placed[d.by]
        assert len(used) >= min(len(nodes), unbound), (
            f"{d.by} preempted guaranteed {d.job_id} though {job.vc} could bind "
            f"{sorted(nodes - used)}"
        )


def guaranteed_running(sched: HivedScheduler) -> dict[str, set[tuple[str, int]]]:
    """The running guaranteed jobs, each with its tasks lazy preemption downgraded (they run
    opportunistically: stopping them preempts no guaranteed work)."""
    return {j.job_id: set(j.downgraded) for j in sched._jobs.values() if j.placed and j.prio >= 0}


def events(sched: Any, nodes: list[str], ops: list[Any]) -> Iterator[Event]:
    """The drawn operations as events, each built when it is due (a finish picks one of the
    jobs the scheduler holds then), so the caller handles an event before drawing the next.
    A submission the scheduler refuses is left out; without a node down, a node up is a tick."""
    down: set[str] = set()
    for i, (kind, arg) in enumerate(ops):
        now = float(i * 60)
        if kind in ("submit", "groups"):
            raw_spec = {"name": f"j{i}", **arg} if kind == "submit" else two_groups(f"j{i}", arg)
            spec = parse_job(raw_spec)
            try:
                sched.check(spec)
            except SpecRejected:
                continue
            yield Submit(f"j{i}", spec, now)
        elif kind in ("finish", "requeue", "cancel"):
            ids = sorted(view.job_id for view in sched.jobs())
            if ids:
                job_id = ids[arg % len(ids)]
                yield ENDINGS[kind](job_id, now)
        elif kind == "node_down":
            node = nodes[arg % len(nodes)]
            down.add(node)
            yield NodeDown(node, now, f"fault {i}")
        elif down:
            node = sorted(down)[arg % len(down)]
            down.discard(node)
            yield NodeUp(node, now)
        else:
            yield Tick(now)  # time passes (LAS demotes, Capacity rebalances)


def run_events(
    data: Any, whole_racks: bool, gpu_cells: bool = False, sockets: bool = False
) -> None:
    raw = data.draw(clusters(whole_racks, gpu_cells, sockets))
    config = load_cluster_config(raw)
    sched = HivedScheduler(config)
    nodes = sorted({n.name for n in config.nodes()})
    for event in events(sched, nodes, data.draw(operations(len(config.vcs)))):
        guaranteed = guaranteed_running(sched)
        before = bindable(sched) if not (whole_racks or gpu_cells or sockets) else {}
        decisions = sched.handle(event)
        check_invariants(sched, config)
        if before:
            check_binds_before_preempting(sched, guaranteed, before, decisions)
        if not (whole_racks or gpu_cells or sockets):  # re-creates bindings: exact for nodes
            check_vc_safety(sched, config)


@PROPERTY_SETTINGS
@given(data=st.data())
def test_invariants_hold_after_every_event(data: Any) -> None:
    run_events(data, whole_racks=False)


@PROPERTY_SETTINGS
@given(data=st.data())
def test_invariants_hold_with_rack_level_cells(data: Any) -> None:
    run_events(data, whole_racks=True)


@PROPERTY_SETTINGS
@given(data=st.data())
def test_invariants_hold_with_cells_smaller_than_a_node(data: Any) -> None:
    run_events(data, whole_racks=False, gpu_cells=True)


@PROPERTY_SETTINGS
@given(data=st.data())
def test_invariants_hold_with_socket_cells(data: Any) -> None:
    run_events(data, whole_racks=False, sockets=True)


def replay(raw: dict[str, Any], ops: list[Any], safety: bool = False) -> HivedScheduler:
    """Given this cluster and these operations (as ``operations`` draws them), expect the
    invariants after every event (with ``safety``, VC safety too): a falsifying case
    hypothesis found, kept as a plain test."""
    config = load_cluster_config(raw)
    sched = HivedScheduler(config)
    nodes = sorted({n.name for n in config.nodes()})
    for event in events(sched, nodes, ops):
        sched.handle(event)
        check_invariants(sched, config)
        if safety:
            check_vc_safety(sched, config)
    return sched


def submit(priority: int, tasks: int, gpus: int, lazy: bool = False) -> tuple[str, Any]:
    """A drawn submission to ``vc0`` of ``tasks`` tasks of ``gpus`` GPUs, not a gang."""
    return (
        "submit",
        {
            "vc": "vc0",
            "priority": priority,
            "tasks": tasks,
            "gpus": gpus,
            "gang": False,
            "lazy_preemption": lazy,
        },
    )


def two_racks_of_two_nodes(vc_cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Two racks ``r0``, ``r1`` of two 4-GPU nodes, one VC ``vc0`` with ``vc_cells``."""
    raw = two_racks_of_three_nodes(vc_cells)
    raw["physicalCluster"]["cellTypes"]["RACK"]["childCellNumber"] = 2
    for rack in raw["physicalCluster"]["physicalCells"]:
        del rack["cellChildren"][2:]
    return raw


def two_racks_of_three_nodes(vc_cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Two racks of three 4-GPU nodes, one VC ``vc0`` with ``vc_cells``."""
    racks = [
        {"cellType": "RACK", "cellChildren": [{"cellAddress": f"r{r}n{n}"} for n in range(3)]}
        for r in range(2)
    ]
    return {
        "physicalCluster": {
            "cellTypes": {
                "NODE": {"childCellType": "GPU", "childCellNumber": 4, "isNodeLevel": True},
                "RACK": {"childCellType": "NODE", "childCellNumber": 3},
            },
            "physicalCells": racks,
        },
        "virtualClusters": {"vc0": {"virtualCells": vc_cells}},
    }


def test_a_gang_that_gpu_cells_cannot_hold_leaves_the_free_list_as_it_was() -> None:
    """Given a VC of 24 single-GPU cells, a 3-GPU opportunistic job and two-group job holding
    GPUs, a gang of three 2-GPU tasks binds GPU cells node by node and gives up on nodes too
    full: those bindings must be undone exactly (not merged back), or undoing the earlier
    ones finds the free list reordered under them ("unbound out of binding order")."""
    raw = two_racks_of_three_nodes(
        [
            {"cellType": "RACK.NODE", "cellNumber": 0},
            {"cellType": "RACK", "cellNumber": 0},
            {"cellType": "RACK.NODE.GPU", "cellNumber": 24},
        ]
    )
    replay(
        raw,
        [
            (
                "submit",
                {
                    "vc": "vc0",
                    "priority": -1,
                    "tasks": 1,
                    "gpus": 3,
                    "gang": False,
                    "lazy_preemption": False,
                },
            ),
            ("groups", {"vc": "vc0", "priority": 0, "a": 2, "b": 2, "gpus": 3, "lazy": False}),
            (
                "submit",
                {
                    "vc": "vc0",
                    "priority": 0,
                    "tasks": 3,
                    "gpus": 2,
                    "gang": True,
                    "lazy_preemption": False,
                },
            ),
        ],
    )


def test_lazy_preemption_of_a_group_keeps_the_preemptor_in_its_gpu_cells() -> None:
    """Given a VC of 17 single-GPU cells, an opportunistic 1-GPU job and a lazily preemptible
    two-group job (1 and 2 tasks of 4 GPUs), a 2-task job of 3 GPUs at a higher priority
    downgrades group a (whose GPU cells are then unbound) and finds room elsewhere: j1's
    task a runs on opportunistically outside the VC's cells, which is HiveD's lazy
    preemption, not a guaranteed task outside its VC (the invariant once counted it as one).
    j2's GPUs must lie in cells bound to the VC."""
    raw = two_racks_of_three_nodes(
        [
            {"cellType": "RACK.NODE", "cellNumber": 0},
            {"cellType": "RACK", "cellNumber": 0},
            {"cellType": "RACK.NODE.GPU", "cellNumber": 17},
        ]
    )
    sched = replay(
        raw,
        [
            (
                "submit",
                {
                    "vc": "vc0",
                    "priority": -1,
                    "tasks": 1,
                    "gpus": 1,
                    "gang": False,
                    "lazy_preemption": False,
                },
            ),
            ("groups", {"vc": "vc0", "priority": 0, "a": 1, "b": 2, "gpus": 4, "lazy": True}),
            (
                "submit",
                {
                    "vc": "vc0",
                    "priority": 10,
                    "tasks": 2,
                    "gpus": 3,
                    "gang": False,
                    "lazy_preemption": False,
                },
            ),
        ],
    )
    j1, j2 = sched._jobs["j1"], sched._jobs["j2"]
    assert set(j1.downgraded) == {("a", 0)}
    assert all(leaf.owner() is None for leaf in j1.placed[("a", 0)][1])
    assert len(j2.placed) == 2


def test_a_spare_binding_leaves_no_cell_bound_for_the_preempting_fit() -> None:
    """Given two racks of two 4-GPU nodes and a VC of 12 single-GPU cells, two opportunistic
    1-GPU jobs (on r0n0), a lazily preemptible priority-0 job of two 3-GPU tasks (r0n1, r1n0)
    and a priority-10 job of two 4-GPU tasks: task 0 takes the free r1n1. Task 1 finds no
    room without preempting; binding r1n0/3 beside j2's task makes a preempting fit, so the
    search first binds the VC's spare quota on the opportunistic GPUs instead (r0n0), once
    lazy preemption has unbound j2's other task's cells. The cell bound for the preempting
    fit must be undone, not left bound to the VC and idle ("an idle VC cell stayed bound",
    issue 34; it then held an opportunistic job inside the VC's cells)."""
    raw = two_racks_of_two_nodes(
        [
            {"cellType": "RACK.NODE", "cellNumber": 0},
            {"cellType": "RACK", "cellNumber": 0},
            {"cellType": "RACK.NODE.GPU", "cellNumber": 12},
        ]
    )
    ops = [submit(-1, 1, 1), submit(-1, 1, 1), submit(0, 2, 3, lazy=True), submit(10, 2, 4)]
    sched = replay(raw, ops)
    j3 = sched._jobs["j3"]
    assert {p.node for p, _ in j3.placed.values()} == {"r1n1", "r0n0"}
    bound = {cell.id for cell in sched.vcs["vc0"].bound["RACK"].values()}
    held = {
        leaf.id
        for job in ("j2", "j3")
        for key, (_, leaves) in sched._jobs[job].placed.items()
        if key not in sched._jobs[job].downgraded
        for leaf in leaves
    }
    assert bound == held
    assert sched.tree.leaf["r1n0/3"].owner() is None


def test_vc_safety_leaves_a_downgraded_task_out_of_the_vc() -> None:
    """Given two racks of two 4-GPU nodes and a VC of two nodes, an opportunistic job on
    r0n0, a priority-0 job of 3 GPUs (r1n0), a lazily preemptible priority-10 job of two
    3-GPU groups (preempts it, r1n1 and r1n0) and a priority-100 job of 2 GPUs: it
    downgrades group b (r1n0 is unbound) and binds r0n1. The VC-safety check re-creates the
    VC's running jobs alone: the downgraded group runs outside the VC's cells and must be
    left out like an opportunistic job (adopted as guaranteed, it bound r1n0 again and j3
    found no cell: "GPU r0n1/0 lies outside vc0's free cells")."""
    raw = two_racks_of_two_nodes(
        [
            {"cellType": "RACK.NODE", "cellNumber": 2},
            {"cellType": "RACK", "cellNumber": 0},
            {"cellType": "RACK.NODE.GPU", "cellNumber": 0},
        ]
    )
    groups = {"vc": "vc0", "priority": 10, "a": 1, "b": 1, "gpus": 3, "lazy": True}
    ops = [submit(-1, 1, 1), submit(0, 1, 3), ("groups", groups), submit(100, 1, 2)]
    sched = replay(raw, ops, safety=True)
    assert set(sched._jobs["j2"].downgraded) == {("b", 0)}
    assert sched._jobs["j1"].placed == {}  # waits: the VC's two nodes hold j2a and j3


def test_stopping_downgraded_tasks_preempts_no_guaranteed_work() -> None:
    """Given two racks of three 4-GPU nodes and a VC of five nodes: j1's group b (two 3-GPU
    tasks) is downgraded by a priority-10 job and runs on opportunistically beside two
    opportunistic jobs; a priority-0 job of 2 GPUs then binds r1n0 and stops group b there.
    Group b was opportunistic work, so the check that a VC binds before it preempts
    guaranteed jobs must not count it (it did: "j6 preempted guaranteed j1 though vc0 could
    bind ['r0n0', 'r0n1']", where binding either stops opportunistic work too), and the
    reason must not call it preempted for its priority ("priority 0 > 0")."""
    raw = two_racks_of_three_nodes(
        [
            {"cellType": "RACK.NODE", "cellNumber": 5},
            {"cellType": "RACK", "cellNumber": 0},
            {"cellType": "RACK.NODE.GPU", "cellNumber": 0},
        ]
    )
    groups = {"vc": "vc0", "a": 1, "gpus": 3}
    ops = [
        submit(0, 2, 2),
        ("groups", {**groups, "priority": 0, "b": 2, "lazy": True}),
        ("groups", {**groups, "priority": 10, "b": 1, "lazy": False}),
        submit(-1, 1, 1),
        submit(-1, 1, 3),
        ("finish", 0),
        submit(0, 1, 2),
    ]
    config = load_cluster_config(raw)
    sched = HivedScheduler(config)
    nodes = sorted({n.name for n in config.nodes()})
    stops = []
    for event in events(sched, nodes, ops):
        guaranteed, before = guaranteed_running(sched), bindable(sched)
        decisions = sched.handle(event)
        check_invariants(sched, config)
        check_binds_before_preempting(sched, guaranteed, before, decisions)
        stops += [d for d in decisions if isinstance(d, StopTasks) and d.by == "j6"]
    (stop,) = stops
    assert stop.job_id == "j1" and {t.role for t in stop.tasks} == {"b"}
    # The reason says what was stopped: opportunistic work, not a priority-0 job by another.
    assert stop.reason == "preempted by j6: opportunistic jobs yield to guaranteed ones"
