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

from labhive.scheduler.config import load_cluster_config
from labhive.scheduler.model import (
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
]
IDS = [name + "".join(f"-{k}={v}" for k, v in opts.items()) for name, opts in VARIANTS]

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


def counters(sched: Scheduler) -> tuple[dict[str, tuple[int, int]], dict[str, Any]]:
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


@pytest.mark.parametrize(("name", "options"), VARIANTS, ids=IDS)
@EVERY_POLICY
@given(data=st.data())
def test_every_policy_keeps_its_invariants_with_cells_smaller_than_a_node(
    name: str, options: dict[str, Any], data: Any
) -> None:
    run_events(data, name, options, gpu_cells=True)
