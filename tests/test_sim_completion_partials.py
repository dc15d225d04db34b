"""A run's timed end is a ``partial`` of ``Simulation._complete`` numbered by a C counter
(``VirtualTimeDriver._order``), where it was a closure numbered by ``_counter += 1``. Given random
workloads on small clusters (runs of equal length ending in one instant, whose ends run in the
order they were timed; runs of no length; wake-ups timed through ``at``; preemptions that leave
stale ends behind under LAS; HiveD deciding per event), expect every job's figures, the summary,
the events, the wake-ups and the decisions to the bit of the closures'."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sim_helpers import cluster
from test_properties import PROPERTY_SETTINGS
from test_sim_wakeups import workload

from labhive.scheduler.drivers.lifecycle import JobRecord
from labhive.scheduler.drivers.replay import ACTION, COMPLETION
from labhive.scheduler.policies import get_policy
from labhive.scheduler.sim.engine import _INF, SimJob, Simulation
from labhive.scheduler.sim.metrics import summarize
from labhive.scheduler.sim.runner import parse_policy

# White-box throughout: a subclass of the compiled ``Simulation`` (ends timed by closures).
pytestmark = pytest.mark.sources


class TimedByClosures(Simulation):
    """The reference: every timed action numbered by ``_counter``, a run's end a closure."""

    _counter = 0

    def at(self, time: float, action: Callable[[], str | None], kind: int = ACTION) -> None:
        self._counter += 1
        heapq.heappush(self._heap, (time, kind, self._counter, action))

    def _time_end(self, record: JobRecord, job: SimJob) -> None:
        job.timed_at = self.now
        if job.remaining == _INF:
            return
        generation = record.generation
        limit = record.spec.time_limit
        run_for = job.remaining if limit is None else min(job.remaining, limit)
        cut = run_for < job.remaining

        def complete() -> str | None:
            return self._complete(record, generation, job, cut)

        self.at(self.now + run_for, complete, COMPLETION)


def run(kind: type[Simulation], policy: str, seed: int) -> tuple[object, ...]:
    rng = random.Random(seed)
    vcs = ["a", "b"][: rng.randint(1, 2)]
    config = cluster([8] * rng.randint(1, 3), {vc: 1 for vc in vcs})
    name, options = parse_policy(policy)
    sim = kind(get_policy(name, config, **options), workload(rng, vcs), total_gpus=64)
    result = sim.run()
    figures = [repr(j) for j in result.jobs], repr(summarize(result))
    return figures, result.events, result.wakeups, sim.decisions


@PROPERTY_SETTINGS
@given(
    policy=st.sampled_from(["fifo", "sjf", "drf", "las", "las:quantum=60", "capacity", "hived"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_ends_timed_as_partials_run_as_the_closures(policy: str, seed: int) -> None:
    assert run(Simulation, policy, seed) == run(TimedByClosures, policy, seed)
