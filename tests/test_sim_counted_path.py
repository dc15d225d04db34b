"""The simulator's counted path against its watched one. Where no one watches a run (no
observer, no progress bar: every batch run, ``bench_simulator.py``), an instant is only
``Timeline.advance``, the jobs that arrived and did not start are counted waiting at the end
of their decision, and a job that starts as it arrives leaves the instant's arrivals at once;
where someone watches, the arrivals are counted when time moves on (``Simulation._instant``).
Given random workloads (bursts of jobs in one second, runs of no length, gangs wider than a
node, failing jobs, several VCs) under FIFO, DRF and LAS, expect both to give the same
timeline, every job's figures and the same summary, to the bit."""

from __future__ import annotations

import random

import pytest
from sim_helpers import cluster, job

from labhive.scheduler.policies import get_policy
from labhive.scheduler.sim.engine import SimJob, Simulation
from labhive.scheduler.sim.metrics import summarize


def workload(rng: random.Random, vcs: list[str]) -> list[SimJob]:
    """About 40 jobs, many arriving in the same second, some of no length, some failing."""
    jobs, now = [], 0.0
    for n in range(rng.randint(20, 60)):
        if rng.random() < 0.6:  # else: in the same second as the last one
            now += rng.choice([0.0, 1.0, 3.0, rng.uniform(0.0, 50.0)])
        gpus = rng.choice([1, 1, 1, 2, 4, 8, 12, 16])
        duration = rng.choice([0.0, 5.0, rng.uniform(1.0, 200.0)])
        j = job(f"j{n}", now, gpus, duration, vc=rng.choice(vcs))
        if rng.random() < 0.15:
            j.status = "Failed"
        jobs.append(j)
    return jobs


def run(policy: str, seed: int, watched: bool) -> tuple[object, ...]:
    rng = random.Random(seed)
    vcs = ["a", "b", "c"][: rng.randint(1, 3)]
    config = cluster([8] * rng.randint(2, 4), {vc: 1 for vc in vcs})
    sim = Simulation(
        get_policy(policy, config),
        workload(rng, vcs),
        total_gpus=config.total_gpus(),
        observe=(lambda sim, label: None) if watched else None,
    )
    result = sim.run()
    tl = result.timeline
    vc_integrals = {
        name: (vc.served, vc.demand, vc.used, vc.waiting_gpus) for name, vc in tl.vcs.items()
    }
    return (
        [repr(j) for j in result.jobs],
        repr(summarize(result)),
        tl._steps.tolist(),
        (tl.busy_gpu_seconds, tl.frag_gpu_seconds, tl.frag_seconds, tl.used, tl.waiting),
        vc_integrals,
    )


@pytest.mark.parametrize("policy", ["fifo", "drf", "las"])
def test_the_counted_run_gives_the_watched_runs_figures(policy: str) -> None:
    for seed in range(30):
        counted, watched = run(policy, seed, False), run(policy, seed, True)
        assert counted == watched, (policy, seed)
