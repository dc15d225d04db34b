"""Given any cluster and any sequence of events, expect every policy (HiveD and each queue
policy, with its options) to keep the invariants a driver relies on, after every event: no GPU
used twice, a gang whole or not at all, a reason for every waiting job, and counters (each VC's
used and borrowed GPUs, each node's GPUs in use) equal to those of a cold rebuild, a new policy
that is handed the running jobs (``Adopt``) and the down nodes (``NodeDown``) as a restarted
service does. HiveD's own invariants (its cells, VC safety) are in ``test_properties``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_properties import PROPERTY_SETTINGS, clusters, events, operations

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.model import (
    Adopt,
    NodeDown,
    NodeUp,
    Scheduler,
    Stop,
    Submit,
)
from labhive.scheduler.policies import available, get_policy

#: Every policy, and each option that changes how it schedules.
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("hived", {}),
    ("hived", {"fair_share": "1h", "reserve_after": "120"}),
    ("fifo", {}),
    ("fifo", {"backfill": True}),
    ("fifo", {"per_vc": True}),
    ("sjf", {}),
    ("sjf", {"per_vc": True}),
    ("drf", {}),
    ("drf", {"backfill": True}),
    ("capacity", {}),
    ("capacity", {"backfill": False}),
    ("las", {}),
    ("las", {"per_vc": True}),
    ("fifo", {"vc_nodes": True}),
    ("las", {"vc_nodes": True}),
]
IDS = [name + "".join(f"-{k}={v}" for k, v in opts.items()) for name, opts in VARIANTS]
#: vc_nodes gives VCs whole nodes: a config whose VC cells are smaller is refused (tested in
#: test_sim_presets.py), so the cells-smaller-than-a-node search leaves it out.
SUB_NODE = [(v, i) for v, i in zip(VARIANTS, IDS, strict=True) if "vc_nodes" not in v[1]]

#: Fewer examples than HiveD's own properties: the same search runs once per variant.
EVERY_POLICY = settings(
    PROPERTY_SETTINGS, max_examples=max(10, PROPERTY_SETTINGS.max_examples // 5)
)


def test_every_shipped_policy_is_checked() -> None:
    assert {name for name, _ in VARIANTS} == set(available())


def check_invariants(sched: Scheduler) -> None:
    used: set[tuple[str, int]] = set()
    for view in sched.jobs():
        gpus = {(t.node, g) for t in view.tasks for g in t.gpus}
        assert not used & gpus, f"a GPU is used twice: {sorted(used & gpus)}"
        used |= gpus
        if view.state == "WAITING":
            assert view.why, f"{view.name} waits without a reason"
    on_nodes = {(n.name, g) for n in sched.cluster().nodes for g in n.used}
    assert on_nodes == used, "the nodes' GPUs in use differ from the jobs' placements"


def check_gangs(sched: Scheduler, specs: dict[str, Any]) -> None:
    for view in sched.jobs():
        spec = specs[view.job_id]
        groups = {r.affinity_group for r in spec.roles}
        if spec.gang and len(groups) > 1:  # OpenPAI affinity groups: each one whole
            for group in groups:
                roles = {r.name: r.instances for r in spec.roles if r.affinity_group == group}
                placed = sum(1 for t in view.tasks if t.role in roles)
                assert placed in (0, sum(roles.values())), f"group {group} placed partly"
        elif spec.gang:
            assert len(view.tasks) in (0, spec.task_count), f"gang {view.name} placed partly"
        if len(view.tasks) < spec.task_count and view.state != "WAITING":
            assert view.why, f"{view.name} has tasks waiting without a reason"


def counters(
    sched: Scheduler,
) -> tuple[dict[str, tuple[float, float]], dict[str, tuple[bool, dict[int, str]]]]:
    cluster = sched.cluster()
    vcs = {v.name: (v.used_gpus, v.opportunistic_gpus) for v in cluster.vcs.values()}
    nodes = {n.name: (n.healthy, dict(n.used)) for n in cluster.nodes}
    return vcs, nodes


def check_cold_rebuild(
    sched: Scheduler, build: Any, specs: dict[str, Any], down: dict[str, str], now: float
) -> None:
    """A new policy told what runs where (and which nodes are down) counts the same."""
    cold = build()
    for view in sched.jobs():
        if view.tasks:
            event = Adopt(view.job_id, specs[view.job_id], view.tasks, view.opportunistic, now)
            assert not [d for d in cold.handle(event) if isinstance(d, Stop)], view
    for node, reason in sorted(down.items()):
        cold.handle(NodeDown(node, now, reason))
    assert counters(cold) == counters(sched)


def run_events(data: Any, name: str, options: dict[str, Any], **cluster: bool) -> None:
    config = load_cluster_config(data.draw(clusters(**cluster)))
    build = lambda: get_policy(name, config, **options)  # noqa: E731
    sched = build()
    nodes = sorted({n.name for n in config.nodes()})
    specs: dict[str, Any] = {}
    down: dict[str, str] = {}
    for event in events(sched, nodes, data.draw(operations(len(config.vcs)))):
        if isinstance(event, Submit):
            specs[event.job_id] = event.spec
        elif isinstance(event, NodeDown):
            down[event.node] = event.reason
        elif isinstance(event, NodeUp):
            del down[event.node]
        decisions = sched.handle(event)
        if isinstance(event, NodeDown):
            stops = [d for d in decisions if isinstance(d, Stop)]
            assert all(d.reason == f"node {event.node} went down ({event.reason})" for d in stops)
        check_invariants(sched)
        check_gangs(sched, specs)
        check_cold_rebuild(sched, build, specs, down, event.time)


@pytest.mark.parametrize(("name", "options"), VARIANTS, ids=IDS)
@EVERY_POLICY
@given(data=st.data())
def test_every_policy_keeps_its_invariants(name: str, options: dict[str, Any], data: Any) -> None:
    run_events(data, name, options)


@pytest.mark.parametrize(
    ("name", "options"), [v for v, _ in SUB_NODE], ids=[i for _, i in SUB_NODE]
)
@EVERY_POLICY
@given(data=st.data())
def test_every_policy_keeps_its_invariants_with_cells_smaller_than_a_node(
    name: str, options: dict[str, Any], data: Any
) -> None:
    run_events(data, name, options, gpu_cells=True)


# ---- GPU shares (HiveD) ----------------------------------------------------------------------


def share_operations(vcs: int) -> Any:
    """``operations`` with GPU shares mixed in: halves, quarters and eighths of one GPU."""
    share = st.fixed_dictionaries(
        {
            "vc": st.integers(0, vcs - 1).map(lambda v: f"vc{v}"),
            "priority": st.sampled_from([-1, 0, 10, 100]),
            "gpus": st.sampled_from([0.5, 0.25, 0.125]),
        }
    ).map(lambda d: ("submit", d))
    return st.lists(
        st.one_of(share, share, share, operations(vcs).map(lambda ops: ops[0])),
        min_size=1,
        max_size=40,
    )


def check_shares(sched: Any) -> None:
    """Per GPU: shares sum to at most one GPU, never beside a whole-GPU task, all of one VC
    (guaranteed) and priority; a guaranteed share only in its VC's cells; each VC's use (a
    share as its fraction) within its cells; the cluster view says the same."""
    on: dict[tuple[str, int], list[Any]] = {}
    for job in sched._jobs.values():
        for placement, leaves in job.placed.values():
            for g in placement.gpus:
                on.setdefault((placement.node, g), []).append(job)
            if job.share and not job.opportunistic:
                owner = leaves[0].owner()
                assert owner is not None and owner.vc == job.vc, "a share outside its VC"
    shown = {(n.name, g): held for n in sched.cluster().nodes for g, held in n.shares.items()}
    for gpu, jobs in on.items():
        if len(jobs) == 1 and not jobs[0].share:
            continue
        assert all(j.share for j in jobs), f"a whole-GPU task beside shares on {gpu}"
        assert sum(j.share for j in jobs) <= 1000, f"shares over one GPU on {gpu}"
        assert len({(None if j.opportunistic else j.vc, j.prio) for j in jobs}) == 1, gpu
        assert shown.get(gpu) == {j.job_id: j.share for j in jobs}, gpu
    used: dict[str, float] = {}
    for job in sched._jobs.values():
        if job.placed and not job.opportunistic:
            amount = job.share / 1000 if job.share else sum(len(x) for _, x in job.placed.values())
            used[job.vc] = used.get(job.vc, 0) + amount
    for name, view in sched.vc_views().items():
        assert view.used_gpus == used.get(name, 0), name
        assert view.used_gpus <= view.guaranteed_gpus, f"{name} uses more than its cells"


@EVERY_POLICY
@given(data=st.data())
def test_hived_keeps_shares_within_one_gpu_and_their_vcs_guarantees(data: Any) -> None:
    """Random clusters and workloads with GPU shares: after every event the share invariants
    hold, HiveD's own (``test_properties``: cells, counters, VC safety) hold, and a cold
    rebuild from the running jobs counts the same."""
    from test_properties import check_counters, check_vc_safety, hived_policy

    config = load_cluster_config(data.draw(clusters()))
    build = lambda: hived_policy(config)  # noqa: E731
    sched = build()
    nodes = sorted({n.name for n in config.nodes()})
    specs: dict[str, Any] = {}
    down: dict[str, str] = {}
    for event in events(sched, nodes, data.draw(share_operations(len(config.vcs)))):
        if isinstance(event, Submit):
            specs[event.job_id] = event.spec
        elif isinstance(event, NodeDown):
            down[event.node] = event.reason
        elif isinstance(event, NodeUp):
            del down[event.node]
        sched.handle(event)
        check_shares(sched)
        check_counters(sched)
        check_gangs(sched, specs)
        for view in sched.jobs():
            assert view.state != "WAITING" or view.why, f"{view.name} waits without a reason"
        check_vc_safety(sched, config)
        cold = build()
        for view in sched.jobs():
            if view.tasks:
                opp = view.opportunistic
                adopt = Adopt(view.job_id, specs[view.job_id], view.tasks, opp, event.time)
                assert not [d for d in cold.handle(adopt) if isinstance(d, Stop)], view
        for node, reason in sorted(down.items()):
            cold.handle(NodeDown(node, event.time, reason))
        use = lambda s: {v.name: (v.used_gpus, v.opportunistic_gpus) for v in s.vc_views().values()}  # noqa: E731
        assert use(cold) == use(sched)
        assert {(n.name, g) for n in cold.cluster().nodes for g in n.used} == {
            (n.name, g) for n in sched.cluster().nodes for g in n.used
        }
