"""The job lifecycle's rules: the legal moves between states (``store/transitions.py`` writes
them).

WAITING -> RUNNING -> SUCCEEDED | FAILED | STOPPED. A failed attempt with retries left goes back
to WAITING with attempt + 1; a preempted or lost attempt goes back to WAITING without spending a
retry. Every change writes an event row (time, reason, the scheduler's why) in the same
transaction as the change itself, and a transition only applies when the job is still in the
state the caller saw (a conditional UPDATE), so two writers can never both move one job.

The states are ``states.JobState`` and where an ended attempt goes (OpenPAI's completion
policy, retries, reason texts) is decided by ``attempts``, the rules the simulator and scenario
replay apply too; this module only writes what they decide.

The writes that apply these moves (conditional UPDATEs with their event rows) are
``store/transitions.py``'s; they take an open write connection, and callers group them into
one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.core.states import ACTIVE as ACTIVE
from labhive.scheduler.core.states import STORED, JobState
from labhive.scheduler.core.states import TERMINAL as TERMINAL

# The short names this module's callers use; the states themselves are JobState's.
WAITING, RUNNING = JobState.WAITING, JobState.RUNNING
SUCCEEDED, FAILED, STOPPED = JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED
STATES = STORED

#: state -> the states it may move to. RUNNING -> RUNNING records more tasks of an incremental
#: job or a downgrade to opportunistic; WAITING -> FAILED is a job the cluster lost the means to
#: run (say, a reconfiguration removed its VC).
TRANSITIONS: dict[str | None, frozenset[JobState]] = {
    None: frozenset({WAITING}),
    WAITING: frozenset({RUNNING, STOPPED, FAILED}),
    RUNNING: frozenset({RUNNING, WAITING, SUCCEEDED, FAILED, STOPPED}),
    SUCCEEDED: frozenset(),
    FAILED: frozenset(),
    STOPPED: frozenset(),
}


class IllegalTransition(UserError):
    """The job is not in a state that allows this (e.g. cancelling a finished job)."""


class StaleState(RuntimeError):
    """Another writer moved the job first; the caller's view is out of date."""


def check_transition(current: str | None, target: str) -> None:
    if target not in TRANSITIONS.get(current, frozenset()):
        raise IllegalTransition(f"a {current or 'new'} job cannot become {target}")


@dataclass(frozen=True, slots=True)
class NewJob:
    name: str
    user: str
    vc: str
    priority: int
    retries: int
    task_count: int
    gpus: int
    spec: dict[str, Any]
    owner_id: int | None = None  # the submitter's account (service/accounts.py)


def new_job_view(job: NewJob, job_id: int, t: float) -> dict[str, Any]:
    """A just-stored job as the API shows it (no store round trip on the submit path)."""
    return {**job_values(job, t), "id": job_id, "queue_position": None, "queue_length": None,
            "tasks": [], "spec": None}  # fmt: skip


def job_values(job: NewJob, t: float) -> dict[str, Any]:
    return {
        "name": job.name,
        "user": job.user,
        "owner_id": job.owner_id,
        "vc": job.vc,
        "priority": job.priority,
        "state": WAITING,
        "attempt": 1,
        "retries": job.retries,
        "retries_used": 0,
        "task_count": job.task_count,
        "gpus": job.gpus,
        "opportunistic": False,
        "cancel_requested": False,
        "spec": job.spec,
        "reason": "submitted",
        "why": None,
        "exit_code": None,
        "submitted_at": t,
        "started_at": None,
        "finished_at": None,
        "updated_at": t,
    }
