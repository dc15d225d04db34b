"""The simulator's counted path (no observer) asks the policy for its next wake-up once a
decision, and calls ``_plan_wakeup`` only for a time earlier than the one planned (its own
first test, before the call: LAS mostly wants the wake-up it has planned already). Given
random workloads on small clusters (LAS's demotions and quanta, which plan wake-ups at most
decisions; FIFO and DRF, which plan none; runs of no length, several VCs), expect every job's
figures, the summary, the events counted, the wake-ups and the decisions to the bit of the
path that calls ``_plan_wakeup`` for every wake-up the policy wants."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from test_properties import PROPERTY_SETTINGS
from test_sim_instant_rounds import run

from labhive.scheduler.sim.engine import Simulation


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
