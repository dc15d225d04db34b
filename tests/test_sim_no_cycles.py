"""A replay makes no reference cycles, so ``Simulation.run`` turns the cyclic garbage collector
off while it lasts (its passes found nothing to free, and at a million contended jobs they
walked up to a million queued objects again and again). Given a contended replay of synthetic
Philly jobs on a squeezed cluster with Helios' VCs, under every policy we ship (and LAS with
checkpoints, so jobs are preempted and resumed), on both of ``drive``'s paths (counted, and
with an observer): expect the collector, asked once the run is over while the simulation and
its policy are still alive, to find nothing the run left unreachable; and expect the run to
leave the collector as it found it."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from sim_helpers import PHILLY

from labhive.scheduler.core.config import ClusterConfig
from labhive.scheduler.policies import get_policy
from labhive.scheduler.sim.engine import Simulation
from labhive.scheduler.sim.machines import load_sim_cluster
from labhive.scheduler.sim.runner import parse_policy
from labhive.scheduler.sim.traces import TraceJob, load_trace
from labhive.scheduler.sim.workload import iter_sim_jobs

Contended = tuple[ClusterConfig, list[TraceJob]]
TRACE = PHILLY / "synthetic" / "synthetic_cluster_job_log.json.gz"
JOBS = 800
#: (policy, checkpoint): every shipped policy, LAS also with checkpoints (preemptions).
RUNS = [
    ("fifo", None),
    ("sjf", None),
    ("drf", None),
    ("drf:backfill=true", None),
    ("capacity", None),
    ("las", None),
    ("las", 60.0),
    ("las:promote_knob=0,quantum=0", 60.0),
    ("hived", None),
]


@pytest.fixture(scope="module")
def contended() -> Iterator[Contended]:
    if not TRACE.is_file():
        pytest.skip(f"the synthetic Philly trace is missing: {TRACE}")
    config, _ = load_sim_cluster(
        PHILLY / "cluster_machine_list", PHILLY / "philly_vc_nodes_helios.csv", 40
    )
    yield config, load_trace(TRACE, limit=JOBS).jobs


def simulation(
    contended: Contended,
    policy: str,
    checkpoint: float | None = None,
    observe: Callable[[Simulation, str], None] | None = None,
) -> Simulation:
    """The replay ``run_policy`` would make, kept at hand (``run_policy`` drops it)."""
    config, trace = contended
    name, options = parse_policy(policy)
    jobs = iter_sim_jobs(trace, config, Counter())
    scheduler = get_policy(name, config, **options)
    total = config.total_gpus()
    return Simulation(scheduler, jobs, total_gpus=total, checkpoint=checkpoint, observe=observe)


@pytest.mark.parametrize("observed", [False, True], ids=["counted", "observed"])
@pytest.mark.parametrize(("policy", "checkpoint"), RUNS)
def test_a_replay_leaves_no_cyclic_garbage(
    contended: Contended, policy: str, checkpoint: float | None, observed: bool
) -> None:
    seen: list[bool] = []

    def observe(sim: Simulation, label: str) -> None:
        seen.append(gc.isenabled())

    sim = simulation(
        contended, policy, checkpoint=checkpoint, observe=observe if observed else None
    )
    gc.collect()
    gc.disable()  # (no collection of ours between the run's end and the count below)
    try:
        result = sim.run()
        left = gc.collect()  # the run's garbage in cycles; ``sim`` still holds the policy
    finally:
        gc.enable()
    assert left == 0, f"{policy}: the run left {left} objects in reference cycles"
    assert result.events > JOBS  # (it did replay: arrivals and ends)
    assert not any(seen)  # the collector was off while the run lasted


def test_a_run_leaves_the_collector_as_it_found_it(contended: Contended) -> None:
    assert gc.isenabled()
    simulation(contended, "fifo").run()
    assert gc.isenabled()
    gc.disable()
    try:
        simulation(contended, "fifo").run()
        assert not gc.isenabled()
    finally:
        gc.enable()
