"""An instant of ``VirtualTimeDriver.drive`` asks the heap whether an action is due once per
action and once per round, where it asked once more: before its first pop, again at the top of
a round (what the last round's end had just found) and after a round that pops nothing. Given
random workloads on small clusters (bursts of arrivals and ends in one instant, runs of no
length, which end in the instant they start, several VCs, LAS's wake-ups, HiveD deciding per
event), expect every job's figures, the summary, the events counted, the wake-ups and the
decisions to the bit of the loop that asks the heap every time."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sim_helpers import cluster
from test_properties import PROPERTY_SETTINGS
from test_sim_wakeups import workload

from labhive.scheduler.core.model import Event, handle_together
from labhive.scheduler.drivers.replay import _NEVER
from labhive.scheduler.policies import get_policy
from labhive.scheduler.sim.engine import Simulation
from labhive.scheduler.sim.metrics import summarize
from labhive.scheduler.sim.runner import parse_policy

# White-box throughout: a subclass of the compiled ``Simulation`` (asking the heap every time).
pytestmark = pytest.mark.sources


class AsksEveryTime(Simulation):
    """The reference: ``drive`` as it was, reading the heap's first time at every question."""

    def drive(  # type: ignore[override]
        self,
        seen: Callable[[str], None],
        arrivals: Iterator[Any] | None = None,
        arrive: Callable[[Any], str] | None = None,
        instant: Callable[[float], None] | None = None,
        decided: Callable[[list[str]], None] | None = None,
    ) -> None:
        heap, pop = self._heap, heapq.heappop
        batches, scheduler = self._batches, self.scheduler
        arrivals = arrivals if arrivals is not None else iter(())
        job = next(arrivals, None)
        submit = _NEVER if job is None else job.submit
        while heap or job is not None:
            time = heap[0][0] if heap and heap[0][0] <= submit else submit
            if instant is not None:
                instant(time)
            self.now = max(self.now, time)
            while True:
                batch: list[Event] | None = [] if batches else None
                self._batch = batch
                labels: list[str] = []
                while heap and heap[0][0] <= time:
                    label = pop(heap)[3]()
                    if label is not None:
                        labels.append(label) if batches else seen(label)
                while submit <= time:
                    assert arrive is not None
                    label = arrive(job)
                    labels.append(label) if batches else seen(label)
                    job = next(arrivals, None)
                    submit = _NEVER if job is None else job.submit
                self._batch = None
                if batch:
                    decisions = handle_together(scheduler, batch)
                    if decisions:
                        self.apply(decisions)
                if decided is not None:
                    decided(labels)
                else:
                    for label in labels:
                        seen(label)
                if not heap or heap[0][0] > time:
                    break


def run(kind: type[Simulation], policy: str, seed: int, watched: bool) -> tuple[object, ...]:
    """One random workload (``test_sim_wakeups``'s) under ``policy``; ``watched``: with an
    observer, so ``drive`` sees each label on its own (``_seen``) and ``_instant`` is called."""
    rng = random.Random(seed)
    vcs = ["a", "b"][: rng.randint(1, 2)]
    config = cluster([8] * rng.randint(1, 3), {vc: 1 for vc in vcs})
    name, options = parse_policy(policy)
    labels: list[str] = []
    sim = kind(
        get_policy(name, config, **options),
        workload(rng, vcs),
        total_gpus=config.total_gpus(),
        observe=(lambda _sim, label: labels.append(label)) if watched else None,
    )
    result = sim.run()
    figures = [repr(j) for j in result.jobs], repr(summarize(result))
    return figures, result.events, result.wakeups, sim.decisions, labels


@PROPERTY_SETTINGS
@given(
    policy=st.sampled_from(["fifo", "drf", "las", "las:quantum=60", "capacity", "hived"]),
    seed=st.integers(0, 2**32 - 1),
    watched=st.booleans(),
)
def test_an_instant_asking_the_heap_once_a_round_runs_as_asking_every_time(
    policy: str, seed: int, watched: bool
) -> None:
    assert run(Simulation, policy, seed, watched) == run(AsksEveryTime, policy, seed, watched)
