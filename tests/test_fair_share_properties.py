"""Given any cluster and any sequence of events, with fair share and per-user caps on, expect
HiveD's invariants to hold after every event (no GPU used twice, gangs whole, guaranteed jobs
inside their VC's cells, VC safety), the ledger's GPUs per user to equal what the jobs hold,
no user above the cap; and given any finite workload, expect every job to end: no job waits
forever with finite work ahead of it (the reservation of ``reserveAfter`` included)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_properties import (
    PROPERTY_SETTINGS,
    check_invariants,
    check_vc_safety,
    clusters,
    events,
    operations,
)

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.jobs import JobSpec, RoleSpec
from labhive.scheduler.core.model import Submit
from labhive.scheduler.hived.core import HivedScheduler
from labhive.scheduler.policies import get_policy
from labhive.scheduler.sim.engine import SimJob, Simulation
from labhive.scheduler.sim.machines import Machine, cluster_dict

USERS = ("ann", "bob", "cy")
FEWER = settings(PROPERTY_SETTINGS, max_examples=max(20, PROPERTY_SETTINGS.max_examples // 3))


def held_per_user(sched: HivedScheduler) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for view in sched.jobs():
        gpus = sum(len(t.gpus) for t in view.tasks)
        if gpus:
            key = (view.vc, sched._jobs[view.job_id].spec.user or "")
            out[key] = out.get(key, 0) + gpus
    return out


def check_ledger(sched: HivedScheduler) -> None:
    ledger = sched._ledger
    assert ledger is not None
    held = held_per_user(sched)
    assert ledger.running == held, "the ledger's GPUs per user differ from the jobs'"
    for (vc, user), gpus in held.items():
        cap = ledger.caps.get(vc)
        assert cap is None or gpus <= cap, f"{user} runs {gpus} GPUs in {vc}, above {cap}"


def run(data: Any, cap: int | None, reserve: bool) -> None:
    raw = data.draw(clusters())
    raw["fairShare"] = {
        "halfLife": data.draw(st.sampled_from([60, 3600, 7 * 86400])),
        "reserveAfter": data.draw(st.sampled_from([0.5, 120])) if reserve else "never",
        "shares": {"ann": 2},
    }
    if cap is not None:
        for vc in raw["virtualClusters"].values():
            vc["userLimits"] = {"maxRunningGpus": cap}
    config = load_cluster_config(raw)
    sched = HivedScheduler(config)
    nodes = sorted({n.name for n in config.nodes()})
    for i, event in enumerate(events(sched, nodes, data.draw(operations(len(config.vcs))))):
        if isinstance(event, Submit):
            event = replace(event, spec=replace(event.spec, user=USERS[i % len(USERS)]))
        sched.handle(event)
        check_invariants(sched, config)
        check_ledger(sched)
        if cap is None and not reserve:  # a cap or a reservation may keep a fitting job out
            check_vc_safety(sched, config)


@FEWER
@given(data=st.data())
def test_invariants_hold_under_fair_share(data: Any) -> None:
    run(data, cap=None, reserve=False)


@FEWER
@given(data=st.data())
def test_invariants_and_caps_hold_with_caps_and_reservations(data: Any) -> None:
    run(data, cap=data.draw(st.integers(4, 12)), reserve=True)


@st.composite
def workloads(draw: Any) -> tuple[Any, list[SimJob]]:
    nodes = draw(st.lists(st.sampled_from([2, 4]), min_size=1, max_size=3))
    raw = cluster_dict([Machine(f"n{i}", g) for i, g in enumerate(nodes)], {"a": 1, "b": 1})
    smallest = min(
        sum(c["cellNumber"] for c in vc["virtualCells"]) for vc in raw["virtualClusters"].values()
    )
    raw["fairShare"] = {
        "halfLife": draw(st.sampled_from([30, 3600])),
        "reserveAfter": draw(st.sampled_from([1, 50, "never"])),
    }
    cap = draw(st.sampled_from([None, 2, 4]))
    for vc in raw["virtualClusters"].values():
        if cap is not None:
            vc["userLimits"] = {"maxRunningGpus": cap}
    config = load_cluster_config(raw)
    vcs = sorted(config.vcs)
    jobs = []
    for i in range(draw(st.integers(1, 40))):
        gpus = draw(st.sampled_from([1, 2]))
        tasks = draw(st.integers(1, 2))
        gang = draw(st.booleans())
        spec = JobSpec(
            name=f"j{i}",
            vc=draw(st.sampled_from(vcs)),
            priority=draw(st.sampled_from([100, 10, -1])),
            roles=(RoleSpec("main", tasks, gpu=gpus),),
            gang=gang,
            user=draw(st.sampled_from(USERS)),
        )
        try:
            get_policy("hived", config).check(spec)
        except ValueError:
            continue  # refused at admission (larger than a VC, or than the cap)
        submit = float(draw(st.integers(0, 100)))
        duration = float(draw(st.integers(1, 60)))
        jobs.append(SimJob(job_id=f"j{i}", spec=spec, submit=submit, duration=duration))
    assert smallest >= 1
    return config, sorted(jobs, key=lambda j: j.submit)


@FEWER
@given(workload=workloads())
def test_every_job_of_a_finite_workload_ends(workload: tuple[Any, list[SimJob]]) -> None:
    config, jobs = workload
    sim = Simulation(get_policy("hived", config), jobs, total_gpus=config.total_gpus())
    result = sim.run()
    waiting = [j.job_id for j in result.jobs if j.end is None]
    assert not waiting, f"jobs never ended: {waiting}"
