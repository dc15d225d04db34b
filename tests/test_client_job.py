"""Given a job as the REST API sends it (or as a newer service might), expect the client's typed
job: states as JobState, tasks typed, times in epoch seconds, unknown keys ignored."""

from __future__ import annotations

import labhive.client as lh
from labhive.client import JobInfo, JobState

SENT = {
    "id": 12,
    "name": "train",
    "user": "ann",
    "vc": "vc1",
    "priority": 10,
    "state": "RUNNING",
    "attempt": 2,
    "retries": 1,
    "retries_used": 1,
    "task_count": 2,
    "gpus": 2,
    "opportunistic": False,
    "cancel_requested": False,
    "reason": "started",
    "why": "worker-0@n0:[0]",
    "queue_position": None,
    "submitted_at": 100.0,
    "started_at": "1970-01-01T00:02:00Z",
    "tasks": [
        {"role": "worker", "index": 0, "node": "n0", "gpus": [0], "state": "RUNNING",
         "attempt": 2, "limits": {"memory": "4G"}},
        {"role": "worker", "index": 1, "node": "n1", "gpus": [3], "state": "ENDED",
         "exit_code": 0, "attempt": 2},
    ],
    "spec": {"name": "train"},
    "a_field_from_a_newer_service": [1, 2],
}  # fmt: skip


def test_a_running_job_reads_typed() -> None:
    job = JobInfo.from_json(SENT)
    assert job.state is JobState.RUNNING and job.running and not job.waiting and not job.done
    assert (job.id, job.name, job.vc, job.attempt, job.retries_used) == (12, "train", "vc1", 2, 1)
    assert (job.submitted_at, job.started_at, job.finished_at) == (100.0, 120.0, None)
    assert [(t.node, t.gpus, t.exit_code) for t in job.tasks] == [
        ("n0", (0,), None),
        ("n1", (3,), 0),
    ]


def test_a_state_or_keys_this_client_does_not_know_do_not_break_it() -> None:
    job = JobInfo.from_json({"id": 3, "state": "ARCHIVED", "colour": "blue"})
    assert job.state == "ARCHIVED" and not isinstance(job.state, JobState) and not job.done
    assert (job.name, job.reason, job.tasks) == ("3", "", ())


def test_ended_states_are_the_shared_terminal_ones() -> None:
    for state in ("SUCCEEDED", "FAILED", "STOPPED"):
        assert JobInfo.from_json({"id": 1, "state": state}).done
    assert {JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED, JobState.REJECTED} == lh.TERMINAL
