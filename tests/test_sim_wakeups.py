"""The simulator plans a policy's wake-up once a decision, where it was once per event of the
decision. Given random workloads under LAS (whose demotions and promotions are wake-ups) and
DRF, bursts of arrivals and ends in one instant, several VCs, expect every job's figures, the
summary, the events counted and the wake-ups fed to the bit of the per-event planning."""

from __future__ import annotations

import random

import pytest
from sim_helpers import cluster, job

from labhive.scheduler.policies import get_policy
from labhive.scheduler.sim.engine import SimJob, Simulation
from labhive.scheduler.sim.metrics import summarize
from labhive.scheduler.sim.runner import parse_policy

# White-box throughout: a subclass of the compiled ``Simulation`` (a wakeup planned per event).
pytestmark = pytest.mark.sources


class PlannedPerEvent(Simulation):
    """The reference: ``_count_decided`` planning the wake-up once per event, as it did."""

    def _count_decided(self, labels: list[str]) -> None:
        if self._entered:
            self._count_entered()
        self.events += len(labels)
        wake = self.scheduler.next_wakeup() if labels else None
        if wake is not None:
            for _ in labels:
                self._plan_wakeup(wake)


def workload(rng: random.Random, vcs: list[str]) -> list[SimJob]:
    jobs, now = [], 0.0
    for n in range(rng.randint(20, 60)):
        if rng.random() < 0.5:  # else: in the same instant as the last one
            now += rng.choice([0.0, 1.0, rng.uniform(0.0, 400.0)])
        gpus = rng.choice([1, 1, 2, 4, 8])
        duration = rng.choice([0.0, 30.0, rng.uniform(1.0, 3000.0)])
        jobs.append(job(f"j{n}", now, gpus, duration, vc=rng.choice(vcs)))
    return jobs


def run(kind: type[Simulation], policy: str, seed: int) -> tuple[object, int, int, int]:
    rng = random.Random(seed)
    vcs = ["a", "b"][: rng.randint(1, 2)]
    config = cluster([8] * rng.randint(1, 3), {vc: 1 for vc in vcs})
    name, options = parse_policy(policy)
    scheduler = get_policy(name, config, **options)
    sim = kind(scheduler, workload(rng, vcs), total_gpus=config.total_gpus())
    result = sim.run()
    figures = [repr(j) for j in result.jobs], repr(summarize(result))
    return figures, result.events, result.wakeups, sim.decisions


@pytest.mark.parametrize("policy", ["las", "las:quantum=60", "drf"])
def test_one_wakeup_planned_a_decision_gives_the_per_event_run(policy: str) -> None:
    woken = 0
    for seed in range(40):
        once, per_event = run(Simulation, policy, seed), run(PlannedPerEvent, policy, seed)
        assert once == per_event, (policy, seed)
        woken += once[2]
    if policy.startswith("las"):
        assert woken > 0  # the runs did wake the policy up
