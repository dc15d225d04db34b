"""Given the scheduler loop driven pass by pass (real store, HiveD policy, local processes),
expect the policy and the store to agree after every pass, even when a cancel races a
submission or a retry: no job the store ended keeps GPUs in the policy."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from loop_helpers import job_state as _state
from loop_helpers import loop_by_hand
from loop_helpers import submit_by_hand as _submit
from sqlalchemy import select
from waiting import wait_until

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.drivers.lifecycle import JobRecord, end_attempt
from labhive.scheduler.service.loop import SchedulerLoop
from labhive.scheduler.service.store import events, queries
from labhive.scheduler.service.store import transitions as tx


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[SchedulerLoop]:
    with loop_by_hand(tmp_path / "data") as loop:
        yield loop


def _used_gpus(loop: SchedulerLoop) -> int:
    return sum(len(n.used) for n in loop.cluster().nodes)


def test_a_cancel_in_the_same_pass_as_its_submission_wins(loop: SchedulerLoop) -> None:
    job_id = _submit(loop, {"name": "a", "vc": "vc1", "gpus": 1, "command": "sleep 30"})
    with loop.store.write() as conn:
        tx.request_cancel(conn, job_id)
    loop.cancel(job_id)
    loop.step()
    assert _state(loop, job_id) == "STOPPED"
    assert loop.view(job_id) is None and _used_gpus(loop) == 0


def test_a_failed_attempt_of_a_cancelled_job_does_not_leave_it_in_the_policy(
    loop: SchedulerLoop,
) -> None:
    """The cancel reached the store but not the loop (the service died in between); the task
    then fails with a retry left: the job ends STOPPED and the policy lets go of it."""
    job_id = _submit(
        loop, {"name": "f", "vc": "vc1", "gpus": 4, "retries": 1, "command": "sleep 0.3; exit 1"}
    )
    loop.step()
    assert _state(loop, job_id) == "RUNNING"
    with loop.store.write() as conn:
        tx.request_cancel(conn, job_id)  # ... and no loop.cancel()
    deadline = time.monotonic() + 20
    while _state(loop, job_id) == "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.1)
        loop.step()
    assert _state(loop, job_id) == "STOPPED"
    loop.step()
    assert loop.view(job_id) is None and _used_gpus(loop) == 0
    other = _submit(loop, {"name": "next", "vc": "vc1", "gpus": 4, "command": "true"})
    loop.step()
    assert _state(loop, other) == "RUNNING"  # vc1's GPUs are really free


def test_an_executor_that_fails_makes_the_loop_back_off_and_carry_on(loop: SchedulerLoop) -> None:
    """Its poll raises three times (a broken executor): each pass fails and is counted, none
    raises, and once the executor works again the policy, rebuilt from the store, starts
    what was submitted meanwhile."""
    real_poll, failures = loop.executor.poll, iter(range(3))

    def broken_poll():  # fails three times, then works
        if next(failures, None) is not None:
            raise OSError("executor unreachable")
        return real_poll()

    loop.executor.poll = broken_poll  # type: ignore[method-assign]
    job_id = _submit(loop, {"name": "a", "vc": "vc1", "gpus": 1, "command": "sleep 30"})
    assert [loop.try_pass() for _ in range(3)] == [False, False, False]
    assert (loop.health.failures, loop.health.error) == (3, "OSError")
    assert loop.health.delay() == 2.0
    assert _state(loop, job_id) == "WAITING"
    assert loop.try_pass() and loop.health.failures == 0
    assert _state(loop, job_id) == "RUNNING"


def test_a_job_cancelled_while_the_service_stops_ends_cancelled(loop: SchedulerLoop) -> None:
    """Its stop runs off the pass; stopping the service waits for it and records the cancel,
    instead of requeueing the job for the next start."""
    job_id = _submit(loop, {"name": "a", "vc": "vc1", "gpus": 1, "command": "sleep 30"})
    loop.step()
    wait_until(lambda: loop.step() is not None and loop.handles(job_id), "the launch")
    with loop.store.write() as conn:
        tx.request_cancel(conn, job_id)
    loop.cancel(job_id)
    loop.step()
    with loop.store.read() as conn:
        row = queries.job(conn, job_id)
    assert row is not None and row["reason"] == "stopping"
    loop.stop(stop_tasks=True)
    assert _state(loop, job_id) == "STOPPED"


def test_a_failing_job_says_what_the_replayed_one_says(loop: SchedulerLoop) -> None:
    """Both families take their retry rules and words from ``attempts``: the service's events
    and the replay's record read "retrying", "retry 1 of 1", "failed", "no retries left"."""
    job_id = _submit(loop, {"name": "f", "vc": "vc1", "gpus": 1, "retries": 1, "command": "exit 3"})

    def ended() -> bool:
        loop.step()
        return _state(loop, job_id) == "FAILED"

    wait_until(ended, timeout=30)
    with loop.store.read() as conn:
        rows = conn.execute(
            select(events.c.reason, events.c.why).where(events.c.job_id == job_id)
        ).all()
    reasons = [r.reason for r in rows]
    assert reasons == ["submitted", "started", "retrying", "started", "failed"]
    retry_why, failed_why = rows[2].why, rows[4].why
    assert retry_why == "attempt 1 failed (exit codes main-0: 3); retry 1 of 1"
    assert failed_why == "attempt 2 failed (exit codes main-0: 3); no retries left"
    with loop.store.read() as conn:
        row = queries.job(conn, job_id)
    assert row is not None and (row["attempt"], row["retries_used"]) == (2, 1)

    record = JobRecord("f", parse_job({"name": "f", "vc": "vc1", "gpus": 1, "retries": 1}), 0.0)
    end_attempt(record, ok=False, now=1.0)
    assert (record.state, record.reason) == ("WAITING", "retrying (retry 1 of 1)")
    end_attempt(record, ok=False, now=2.0)
    assert (record.state, record.reason) == ("FAILED", "failed (no retries left)")
    assert (record.attempt, record.retries_used) == (2, 1)
