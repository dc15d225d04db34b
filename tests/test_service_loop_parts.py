"""Given the loop's parts on their own (its backoff, its actuator, its reservations), expect a
capped exponential wait logged once per streak, actions in order per job and side by side
across jobs, and starts held back exactly while their GPUs drain."""

from __future__ import annotations

import logging
import threading

import pytest
from waiting import wait_until

from labhive.scheduler.core.model import Start, TaskPlacement
from labhive.scheduler.service.backoff import LoopHealth
from labhive.scheduler.service.runtime.actuation import Actuator
from labhive.scheduler.service.runtime.runs import Drain, Reservations, Running, Settle


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_backoff_doubles_to_its_cap_logs_once_per_streak_and_resets(caplog) -> None:
    clock = FakeClock()
    health = LoopHealth(clock=clock)
    log = logging.getLogger("test.backoff")
    caplog.set_level(logging.WARNING, logger="test.backoff")
    delays = []
    for _ in range(8):
        health.failed(ConnectionError("down"), log, "pass")
        delays.append(health.delay())
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    assert [r.levelname for r in caplog.records] == ["ERROR"]  # the first failure only
    assert health.error == "ConnectionError" and health.failing
    clock.t += 25
    assert health.age() == 25
    health.passed(log)
    assert (health.failures, health.delay(), health.age(), health.error) == (0, 0.0, 0, None)
    assert "works again after 8 failed tries" in caplog.records[-1].getMessage()


def test_actions_run_in_order_per_job_and_side_by_side_across_jobs() -> None:
    actuator = Actuator(workers=4)
    release = threading.Event()
    done: list[str] = []

    def launch_once_released() -> None:
        release.wait(10)
        done.append("1:launch")

    actuator.submit(1, launch_once_released)
    actuator.submit(1, lambda: done.append("1:stop"))  # waits for job 1's launch
    actuator.submit(2, lambda: done.append("2:launch"))  # does not
    wait_until(lambda: "2:launch" in done, "job 2's action")
    assert done == ["2:launch"]
    release.set()
    assert actuator.wait_idle(10)
    assert done == ["2:launch", "1:launch", "1:stop"]
    actuator.close()
    with pytest.raises(RuntimeError):
        actuator.submit(3, lambda: None)


def _start(job: int, node: str, *gpus: int) -> Start[int]:
    return Start(job, (TaskPlacement("main", 0, node, gpus, ()),))


def test_a_start_onto_draining_gpus_is_held_until_the_drain_ends() -> None:
    r = Reservations()
    held = {("n0", 0), ("n0", 1)}
    victim = Running(attempt=1, gpus=held)
    r.draining[1] = Drain(
        1, victim, frozenset(held), Settle(1, "WAITING", "preempted"), None, token=1
    )
    onto, beside, victim_again = _start(2, "n0", 1), _start(3, "n1", 0), _start(1, "n1", 1)
    assert r.blocks(onto) and not r.blocks(beside) and r.blocks(victim_again)
    assert (r.blockers(onto), r.blockers(beside)) == ([1], [])
    r.hold(onto)
    r.hold(victim_again)
    assert r.release() == [] and r.held == [onto, victim_again]
    del r.draining[1]
    assert r.release() == [onto, victim_again] and r.held == []
    r.hold(_start(4, "n0", 0))
    r.drop(4)  # preempted or cancelled before it started
    assert r.held == []
