"""A job as the REST API describes it, typed: what the client hands to the kernel extension,
the hub spawner and anyone else, so none of them reads raw JSON keys.

Built from the service's JSON by ``JobInfo.from_json``, which keeps the fields it knows and
ignores the rest (a newer service may send more), and reads a state it does not know as the
plain string. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

from labhive.scheduler.core.states import TERMINAL, JobState


def timestamp(value: Any) -> float | None:
    """Seconds since the epoch from a number or an ISO-8601 string (naive means UTC)."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return float(value)
    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def job_state(value: Any) -> JobState | str:
    """The state as a ``JobState``; one this client does not know stays a string."""
    try:
        return JobState(value)
    except ValueError:
        return str(value)


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """One task of the job's current attempt, where it runs and how it ended."""

    role: str
    index: int
    node: str | None = None
    gpus: tuple[int, ...] = ()
    state: str | None = None  # RUNNING, then ENDED (a task's own states)
    exit_code: int | None = None
    attempt: int | None = None
    address: str | None = None  # where the task runs, as the hub's proxy reaches it

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> TaskInfo:
        return cls(
            role=str(doc.get("role", "")),
            index=int(doc.get("index", 0)),
            node=doc.get("node"),
            gpus=tuple(int(g) for g in doc.get("gpus") or ()),
            state=doc.get("state"),
            exit_code=doc.get("exit_code"),
            attempt=doc.get("attempt"),
            address=doc.get("address"),
        )


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A job as last fetched (``GET /jobs/ID``); the field names are the API's."""

    id: int | str
    name: str
    state: JobState | str
    vc: str | None = None
    user: str | None = None
    priority: int | str | None = None
    attempt: int | None = None
    retries: int | None = None
    retries_used: int | None = None
    task_count: int | None = None
    gpus: int | float | None = None  # a GPU share's fraction (0.25)
    #: For a GPU share: what enforces it ("not enforced: shares are time-sliced ...").
    gpu_sharing: str | None = None
    opportunistic: bool = False
    cancel_requested: bool = False
    reason: str = ""  # the last transition's short cause ("preempted", "retrying")
    why: str | None = None  # the scheduler's explanation (why it waits, what failed)
    queue_position: int | None = None
    queue_length: int | None = None
    eta: float | None = None
    eta_low: float | None = None
    eta_high: float | None = None
    waits_for: str | None = None  # no estimate: what it waits for ("a notebook server ...")
    exit_code: int | None = None
    submitted_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    tasks: tuple[TaskInfo, ...] = ()
    #: A pending stop, while running: {"reason", "deadline", "deadline_iso", "kind"}.
    stopping: Mapping[str, Any] | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> JobInfo:
        known = {k: v for k, v in doc.items() if k in _JOB_FIELDS}
        return cls(
            **{**known, **{k: timestamp(doc.get(k)) for k in _TIMES}},
            name=str(doc.get("name") or doc["id"]),
            state=job_state(doc.get("state", "UNKNOWN")),
            opportunistic=bool(doc.get("opportunistic")),
            cancel_requested=bool(doc.get("cancel_requested")),
            reason=str(doc.get("reason") or ""),
            tasks=tuple(TaskInfo.from_json(t) for t in doc.get("tasks") or ()),
        )

    @property
    def done(self) -> bool:
        """It ended for good (SUCCEEDED, FAILED, STOPPED): nothing more will change."""
        return self.state in TERMINAL

    @property
    def waiting(self) -> bool:
        return self.state == JobState.WAITING

    @property
    def running(self) -> bool:
        return self.state == JobState.RUNNING


#: Fields taken from the JSON as they come; the rest are converted in ``from_json``.
_TIMES = ("submitted_at", "started_at", "finished_at")
_CONVERTED = {"name", "state", "opportunistic", "cancel_requested", "reason", "tasks", *_TIMES}
_JOB_FIELDS = {f.name for f in fields(JobInfo)} - _CONVERTED
