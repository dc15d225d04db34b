"""Given an attempt's task exit codes and a job's retry budget, expect OpenPAI's outcome, the
state the job goes to and the same words whichever driver (simulator, replay, service) asks."""

from __future__ import annotations

import json

from labhive.scheduler.core.jobs import RoleSpec
from labhive.scheduler.core.states import ACTIVE, STORED, TERMINAL, JobState
from labhive.scheduler.drivers import attempts


def test_completion_policy_follows_openpai() -> None:
    worker = RoleSpec("worker", instances=3)
    ps = RoleSpec("ps", instances=1)
    assert attempts.attempt_outcome([worker], {("worker", 0): 0}) is None
    assert attempts.attempt_outcome([worker], {("worker", 0): 1}) == "failed"
    assert attempts.attempt_outcome([worker], {("worker", i): 0 for i in range(3)}) == "succeeded"
    assert attempts.attempt_outcome([worker, ps], {("worker", i): 0 for i in range(3)}) is None
    assert attempts.attempt_outcome([worker], {("worker", 0): None}, lost=True) == "lost"
    lenient = RoleSpec("worker", instances=3, min_failed=2, min_succeeded=1)
    assert attempts.attempt_outcome([lenient], {("worker", 0): 1}) is None
    assert attempts.attempt_outcome([lenient], {("worker", 0): 1, ("worker", 1): 0}) == "succeeded"
    one_bad = {("worker", 0): 1, ("worker", 1): 0, ("worker", 2): 0}
    two_of_three = RoleSpec("worker", instances=3, min_failed=2, min_succeeded=2)
    assert attempts.attempt_outcome([two_of_three], one_bad) == "succeeded"
    # every task ended and neither threshold was met: the attempt failed
    all_of_them = RoleSpec("worker", instances=3, min_failed=2)
    assert attempts.attempt_outcome([all_of_them], one_bad) == "failed"


def test_failures_spend_retries_until_none_are_left() -> None:
    ends = [attempts.after_failure(2, used) for used in range(3)]
    assert [(e.state, e.spend_retry, e.text) for e in ends] == [
        (JobState.WAITING, True, "retrying (retry 1 of 2)"),
        (JobState.WAITING, True, "retrying (retry 2 of 2)"),
        (JobState.FAILED, False, "failed (no retries left)"),
    ]
    assert attempts.after_failure(0, 0).text == "failed"  # no budget: nothing to say about it
    assert attempts.retries_left(2, 5) == 0


def test_success_and_loss_spend_nothing() -> None:
    ok = attempts.attempt_end("succeeded", 3, 1)
    lost = attempts.attempt_end("lost", 0, 0)
    assert (ok.state, ok.spend_retry, ok.text, ok.requeued) == (
        JobState.SUCCEEDED, False, "succeeded", False,
    )  # fmt: skip
    assert (lost.state, lost.spend_retry, lost.text, lost.requeued) == (
        JobState.WAITING, False, "lost", True,
    )  # fmt: skip


def test_states_are_the_strings_stored_and_sent() -> None:
    assert JobState.WAITING == "WAITING" and f"{JobState.FAILED}" == "FAILED"
    assert json.dumps({"state": JobState.RUNNING}) == '{"state": "RUNNING"}'
    assert JobState("STOPPED") is JobState.STOPPED
    assert [str(s) for s in STORED] == ["WAITING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED"]
    assert set(JobState) == TERMINAL | ACTIVE and not TERMINAL & ACTIVE
