"""How an attempt of a job ends, the one set of rules the simulator, scenario replay and the
service all apply (they differ only in where the result is kept: a record, or SQL rows).

OpenPAI's completion policy decides the outcome from the tasks' exit codes (``minFailed``,
``minSucceeded`` per role); the job's retry budget (``jobRetryCount``) decides where a failed
attempt goes; and the reason texts are written here once, so a replayed job and a live one say
the same thing: "succeeded", "retrying (retry 1 of 2)", "failed (no retries left)", "lost".
A preempted or lost attempt goes back to WAITING without spending a retry (DESIGN.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from labhive.scheduler.core.jobs import RoleSpec
from labhive.scheduler.core.states import JobState

#: Read once a job (``requeued``), as a module constant: an Enum class's attribute costs ten
#: times a global.
_WAITING = JobState.WAITING

Outcome = Literal["succeeded", "failed", "lost"]


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """Where an ended attempt takes the job, and the words for it.

    ``reason`` is the short event reason (what the service's events and metrics count);
    ``note`` says how the retry budget stands ("retry 1 of 2", "no retries left"), if at all."""

    state: JobState
    spend_retry: bool
    reason: str
    note: str = ""
    #: The reason in one line, for drivers that keep a single reason per job; and whether
    #: the job waits again. Worked out once here, not per ended attempt: a simulated job
    #: reads both as it ends (two property calls, about 15 bytecodes a job).
    text: str = field(init=False, repr=False, compare=False)
    requeued: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        text = f"{self.reason} ({self.note})" if self.note else self.reason
        object.__setattr__(self, "text", text)  # (frozen: set once, as ``__init__`` does)
        object.__setattr__(self, "requeued", self.state == _WAITING)


#: The event reason of a failed attempt that is retried (the metrics count it).
RETRYING = "retrying"
SUCCEEDED = AttemptEnd(JobState.SUCCEEDED, False, "succeeded")
#: A failed attempt of a job without retries (a failed trace job ends so: one per job, built once).
FAILED = AttemptEnd(JobState.FAILED, False, "failed")
LOST = AttemptEnd(JobState.WAITING, False, "lost")


def retries_left(retries: int, retries_used: int) -> int:
    return max(0, retries - retries_used)


def after_failure(retries: int, retries_used: int) -> AttemptEnd:
    """A failed attempt: back to WAITING spending a retry while any are left, else FAILED."""
    if retries_left(retries, retries_used) > 0:
        note = f"retry {retries_used + 1} of {retries}"
        return AttemptEnd(JobState.WAITING, True, RETRYING, note)
    if not retries:
        return FAILED
    return AttemptEnd(JobState.FAILED, False, "failed", "no retries left")


def attempt_end(outcome: Outcome, retries: int, retries_used: int) -> AttemptEnd:
    """The end of an attempt whose outcome is decided."""
    if outcome == "succeeded":
        return SUCCEEDED
    if outcome == "lost":
        return LOST
    return after_failure(retries, retries_used)


def attempt_outcome(
    roles: Sequence[RoleSpec], codes: Mapping[tuple[str, int], int | None], lost: bool = False
) -> Outcome | None:
    """OpenPAI's completion policy over the exit codes seen so far (None: not decided yet).

    A role fails when ``min_failed`` of its tasks failed (default 1) and succeeds when
    ``min_succeeded`` of them succeeded (default all); the job fails as soon as one role fails
    and succeeds once every role has succeeded. A task that vanished through no fault of its own
    (``lost``) makes the attempt lost: it is requeued without spending a retry."""
    if lost:
        return "lost"
    done = True
    for role in roles:
        mine = [c for (name, _), c in codes.items() if name == role.name]
        failed = sum(1 for c in mine if c != 0)
        succeeded = len(mine) - failed
        min_failed = role.min_failed if role.min_failed and role.min_failed > 0 else 1
        min_succeeded = role.min_succeeded
        if not min_succeeded or min_succeeded < 0:
            min_succeeded = role.instances
        if failed >= min_failed:
            return "failed"
        if succeeded < min_succeeded:
            done = False
    if done:
        return "succeeded"
    total = sum(r.instances for r in roles)
    return "failed" if len(codes) >= total else None
