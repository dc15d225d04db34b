"""``VirtualTimeDriver.drive`` asks the heap for its first action's time once an instant: at
the end of each round (is another action due at this instant?), and keeps the answer as the
next instant's first action time, where it asked again at the top of the loop. Nothing runs
between the two questions, so the answer is the same. Given random workloads on small
clusters (bursts of arrivals and ends in one instant, runs of no length, which end in the
instant they start, so a decision times an action for the instant itself; several VCs, LAS's
wake-ups, which a decision times for a later instant; HiveD deciding per event), expect every
job's figures, the summary, the events counted, the wake-ups and the decisions to the bit of
the loop that asks the heap every time (``test_sim_instant_rounds``' reference)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_properties import PROPERTY_SETTINGS
from test_sim_instant_rounds import AsksEveryTime, run

from labhive.scheduler.drivers.replay import VirtualTimeDriver
from labhive.scheduler.sim.engine import Simulation


@pytest.mark.sources
@PROPERTY_SETTINGS
@given(
    policy=st.sampled_from(["fifo", "sjf", "drf", "las", "las:quantum=60", "capacity", "hived"]),
    seed=st.integers(0, 2**32 - 1),
    watched=st.booleans(),
)
def test_the_heads_time_carried_to_the_next_instant_runs_as_asking_every_time(
    policy: str, seed: int, watched: bool
) -> None:
    assert run(Simulation, policy, seed, watched) == run(AsksEveryTime, policy, seed, watched)


def test_an_action_timed_by_an_action_for_an_earlier_time_than_the_kept_head_runs_first() -> None:
    """Given actions at 5 and 9, the one at 5 timing another at 7: expect 5, 7, 9 (the kept
    head, 9 before the first round's end, is asked again once the round has run)."""

    class Policy:
        def handle(self, event: object) -> list[object]:
            return []

    driver = VirtualTimeDriver(Policy())  # type: ignore[arg-type]
    ran: list[float] = []

    def at(time: float, then: float | None = None) -> None:
        def action() -> str:
            ran.append(driver.now)
            if then is not None:
                at(then)
            return f"at {time}"

        driver.at(time, action)

    at(5.0, then=7.0)
    at(9.0)
    instants: list[float] = []
    driver.drive(lambda label: None, instant=instants.append)
    assert ran == [5.0, 7.0, 9.0]
    assert instants == [5.0, 7.0, 9.0]


class _Quiet:
    """A policy that decides nothing (the driver's own loop is what is under test)."""

    def handle(self, event: object) -> list[object]:
        return []


def _drive(times: list[float], tell: bool) -> tuple[list[str], float]:
    """Actions at ``times`` (each timing one more a second later, once), driven with an
    ``instant`` that does nothing, or with none told; what was seen, and the end time."""
    driver = VirtualTimeDriver(_Quiet())  # type: ignore[arg-type]
    seen: list[str] = []

    def action(n: int, again: bool) -> Callable[[], str]:
        def run() -> str:
            if again:
                driver.at(driver.now + 1.0, action(n, False))
            return f"{n} at {driver.now}"

        return run

    for n, time in enumerate(times):
        driver.at(time, action(n, True))
    driver.drive(seen.append, instant=(lambda time: None) if tell else None)
    return seen, driver.now


@PROPERTY_SETTINGS
@given(times=st.lists(st.sampled_from([0.0, 1.0, 2.0, 2.5, 7.0]), max_size=12))
def test_a_driver_told_no_instant_runs_as_one_told_an_instant_that_does_nothing(
    times: list[float],
) -> None:
    """Given actions at a few times, some at one time, each timing another a second later,
    expect ``drive`` without an ``instant`` (``_no_instant`` in its place, not a test of None
    an instant) to see the same labels in the same order, and to end at the same time."""
    assert _drive(times, tell=False) == _drive(times, tell=True)
