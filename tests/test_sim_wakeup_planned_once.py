"""The simulator's counted path (no observer) asks the policy for its next wake-up once a
decision, and calls ``_plan_wakeup`` only for a time earlier than the one planned (its own
first test, before the call: LAS mostly wants the wake-up it has planned already). Given
random workloads on small clusters (LAS's demotions and quanta, which plan wake-ups at most
decisions; FIFO and DRF, which plan none; runs of no length, several VCs), expect every job's
figures, the summary, the events counted, the wake-ups and the decisions to the bit of the
path that calls ``_plan_wakeup`` for every wake-up the policy wants."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_properties import PROPERTY_SETTINGS
from test_sim_instant_rounds import run

from labhive.scheduler.core.model import Tick
from labhive.scheduler.sim.engine import Simulation

# White-box throughout: subclasses of the compiled ``Simulation`` (planning every wakeup).
pytestmark = pytest.mark.sources


class PlansEveryWakeup(Simulation):
    """The reference: every wake-up the policy wants goes to ``_plan_wakeup``, which decides."""

    def _count_decided(self, labels: list[str]) -> None:
        if self._entered:
            self._count_entered()
        self.events += len(labels)
        wake = self.scheduler.next_wakeup() if labels else None
        if wake is not None:
            self._plan_wakeup(wake)


@PROPERTY_SETTINGS
@given(
    policy=st.sampled_from(["las", "las:quantum=60", "las:promote_knob=0,quantum=0", "fifo"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_wakeup_planned_already_is_not_planned_again_as_planning_every_one(
    policy: str, seed: int
) -> None:
    assert run(Simulation, policy, seed, False) == run(PlansEveryWakeup, policy, seed, False)


class TicksThroughAt(Simulation):
    """The reference for a tick's timing: ``_plan_wakeup`` as it was, through ``at``."""

    def _plan_wakeup(self, wake: float | None) -> None:
        if wake is None or (self._wake is not None and wake >= self._wake - 1e-9):
            return
        self._wake = when = max(wake, self.now)

        def tick() -> str | None:
            if self._wake != when:
                return None
            self._wake = None
            wanted = self.scheduler.next_wakeup()
            if wanted is None or wanted > self.now + 1e-9:
                self._plan_wakeup(wanted)
                return None
            self.wakeups += 1
            self.feed(Tick(self.now))
            return "tick"

        self.at(when, tick)


@PROPERTY_SETTINGS
@given(
    policy=st.sampled_from(["las", "las:quantum=60", "las:promote_knob=0,quantum=0"]),
    seed=st.integers(0, 2**32 - 1),
    watched=st.booleans(),
)
def test_a_tick_pushed_on_the_heap_itself_runs_as_one_timed_through_at(
    policy: str, seed: int, watched: bool
) -> None:
    """Given LAS's wake-ups (ticks at the instants of runs' ends, and between), expect the
    same figures, events, wake-ups and decisions as ticks timed by ``at`` (an action, after
    the completions of its instant)."""
    assert run(Simulation, policy, seed, watched) == run(TicksThroughAt, policy, seed, watched)
