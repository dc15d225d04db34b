"""The simulator's ``apply`` finds a decision's record through its job (``job.record``, one
look-up a decision) where the replayer looks it up in ``records``. Given random workloads, with
scripted resubmissions of jobs that ended (same id, a new record) and cancellations, under a
policy that decides once an instant (FIFO, DRF: ``handle_batch``) and one that decides as each
event comes, inside the job's admission (HiveD), expect every job's figures and the summary of
the replayer's own ``apply`` (``records.get``, then ``apply_one``), to the bit."""

from __future__ import annotations

import functools
import random

import pytest
from sim_helpers import cluster, job

from labhive.scheduler.drivers.replay import VirtualTimeDriver
from labhive.scheduler.policies import get_policy
from labhive.scheduler.sim.engine import SimJob, Simulation
from labhive.scheduler.sim.metrics import summarize

# White-box throughout: a subclass of the compiled ``Simulation`` (the replayer's apply).
pytestmark = pytest.mark.sources


class ReplayerApply(Simulation):
    """The reference: the replayer's ``apply``, a ``records`` look-up per decision."""

    apply = VirtualTimeDriver.apply


def workload(rng: random.Random) -> list[SimJob]:
    jobs, now = [], 0.0
    for n in range(rng.randint(10, 40)):
        if rng.random() < 0.6:
            now += rng.choice([0.0, 1.0, rng.uniform(0.0, 30.0)])
        j = job(f"j{n}", now, rng.choice([1, 1, 2, 4, 8]), rng.choice([0.0, 5.0, 40.0]))
        if rng.random() < 0.15:
            j.status = "Failed"
        jobs.append(j)
    return jobs


def resubmit(sim: Simulation, again: SimJob, duration: float) -> str | None:
    """The job once more, under the same id, if it is done by then (a policy refuses a job
    submitted twice while it lives)."""
    record = sim.records.get(again.job_id)
    if record is None or not record.done:
        return None
    sim.submit(again.job_id, again.spec, duration)
    return f"{again.job_id} submitted again"


def cancel(sim: Simulation, job: SimJob) -> str:
    sim.cancel(job.job_id)
    return f"{job.job_id} cancelled"


def run(kind: type[Simulation], policy: str, seed: int) -> tuple[object, ...]:
    rng = random.Random(seed)
    config = cluster([8, 8])
    jobs = workload(rng)
    sim = kind(get_policy(policy, config), jobs, total_gpus=config.total_gpus())
    for _ in range(rng.randint(1, 6)):  # scripted resubmissions and cancellations
        again = rng.choice(jobs)
        at = again.submit + rng.uniform(0.0, 120.0)
        if rng.random() < 0.7:
            sim.at(at, functools.partial(resubmit, sim, again, rng.choice([3.0, 20.0])))
        else:
            sim.at(at, functools.partial(cancel, sim, again))
    result = sim.run()
    return [repr(j) for j in result.jobs], repr(summarize(result)), sim.decisions


@pytest.mark.parametrize("policy", ["fifo", "drf", "hived"])
def test_a_decision_changes_the_record_the_replayer_would(policy: str) -> None:
    for seed in range(40):
        assert run(Simulation, policy, seed) == run(ReplayerApply, policy, seed), seed
