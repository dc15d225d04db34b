"""The service's JSON, read once into small frozen records the renderers and widgets share.

This is the only module that knows the REST field names; a renamed field is fixed here and
every view (text, HTML, widget) follows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from labhive.scheduler.client import why_without_position

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
#: The id shown for another user's job, whose id the service does not reveal.
OTHERS = "-"


def timestamp(value: Any) -> float | None:
    """Seconds since the epoch from a number or an ISO-8601 string (naive means UTC)."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return float(value)
    text = str(value).replace("Z", "+00:00")
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


@dataclass(frozen=True, slots=True)
class TaskFacts:
    role: str
    index: int
    node: str | None
    gpus: tuple[int, ...]
    state: str | None = None
    exit_code: int | None = None

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> TaskFacts:
        return cls(
            role=str(data.get("role", "")),
            index=int(data.get("index", 0)),
            node=data.get("node"),
            gpus=tuple(int(g) for g in data.get("gpus") or ()),
            state=data.get("state"),
            exit_code=data.get("exit_code"),
        )


@dataclass(frozen=True, slots=True)
class JobFacts:
    id: str
    name: str
    state: str
    vc: str | None = None
    priority: Any = None
    user: str | None = None
    position: int | None = None
    queue_length: int | None = None
    why: str | None = None  # the scheduler's explanation while waiting
    reason: str | None = None  # the last transition's short cause ("preempted", "exit 1")
    tasks: tuple[TaskFacts, ...] = ()
    gpus: int | None = None
    submitted: float | None = None
    started: float | None = None
    finished: float | None = None
    attempt: int | None = None
    command: str | None = None
    eta: tuple[float, float, float] | None = None  # a waiting job's estimated start, p10, p90

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> JobFacts:
        return cls(
            id=str(data["id"]),
            name=str(data.get("name") or data["id"]),
            state=str(data.get("state", "UNKNOWN")),
            vc=data.get("vc"),
            priority=data.get("priority"),
            user=data.get("user"),
            position=data.get("queue_position"),
            queue_length=data.get("queue_length"),
            # the displays show the position themselves; the why-text's own copy would repeat
            why=(why_without_position(data["why"]) or None)
            if data.get("why") and data.get("queue_position")
            else data.get("why"),
            reason=data.get("reason") or None,
            tasks=tuple(TaskFacts.from_api(t) for t in data.get("tasks") or ()),
            gpus=data.get("gpus"),
            submitted=timestamp(data.get("submitted_at")),
            started=timestamp(data.get("started_at")),
            finished=timestamp(data.get("finished_at")),
            attempt=data.get("attempt"),
            command=data.get("command"),
            eta=estimate(data),
        )

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def elapsed(self, now: float) -> float | None:
        """Run time once started (up to the end), else time spent waiting since submission."""
        start = self.started if self.started is not None else self.submitted
        if start is None:
            return None
        end = self.finished if self.finished is not None else now
        return max(0.0, end - start)


@dataclass(frozen=True, slots=True)
class VCFacts:
    name: str
    guaranteed_gpus: int
    used_gpus: int
    opportunistic_gpus: int
    waiting: int


@dataclass(frozen=True, slots=True)
class QueueFacts:
    """Per VC: its quota and use, and the waiting jobs in queue order (others' as allowed)."""

    vcs: tuple[VCFacts, ...]
    waiting: tuple[JobFacts, ...]

    @classmethod
    def from_api(cls, doc: Mapping[str, Any]) -> QueueFacts:
        """From ``GET /queue``: ``{"vcs": {name: VC}, "waiting": [entry, ...], ...}``."""
        return cls(
            vcs=vc_facts(doc.get("vcs") or {}),
            waiting=tuple(map(queue_entry, doc.get("waiting") or ())),
        )


def vc_facts(vcs: Mapping[str, Mapping[str, Any]]) -> tuple[VCFacts, ...]:
    return tuple(
        VCFacts(
            name=str(name),
            guaranteed_gpus=int(v.get("guaranteed_gpus", 0)),
            used_gpus=int(v.get("used_gpus", 0)),
            opportunistic_gpus=int(v.get("opportunistic_gpus", 0)),
            waiting=int(v.get("waiting", 0)),
        )
        for name, v in vcs.items()
    )


def queue_entry(entry: Mapping[str, Any]) -> JobFacts:
    """A queue entry; another user's job carries only its position, VC and size."""
    mine = entry.get("id") is not None
    return JobFacts(
        id=str(entry["id"]) if mine else OTHERS,
        name=str(entry.get("name") or entry.get("id")) if mine else "another user's job",
        state=str(entry.get("state", "WAITING")),
        vc=entry.get("vc"),
        priority=entry.get("priority"),
        user=entry.get("user"),
        position=entry.get("position"),
        why=entry.get("why"),
        gpus=entry.get("gpus"),
        eta=estimate(entry),
    )


def estimate(data: Mapping[str, Any]) -> tuple[float, float, float] | None:
    """The service's ETA fields (``eta``, ``eta_low``, ``eta_high``); None when it has none."""
    if data.get("eta") is None:
        return None
    eta = float(data["eta"])
    return eta, float(data.get("eta_low") or eta), float(data.get("eta_high") or eta)


@dataclass(frozen=True, slots=True)
class NodeFacts:
    name: str
    sku: str | None
    gpus: tuple[int, ...]
    used: Mapping[int, str]  # GPU index -> job id
    healthy: bool = True
    reason: str = ""  # why it is down ("taken down by admin: ...", a GPU health fault)


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    nodes: tuple[NodeFacts, ...]
    vcs: tuple[VCFacts, ...]
    virtual: bool
    job_vcs: Mapping[str, str]  # job id -> VC, to colour a GPU by the VC of its job

    @classmethod
    def from_api(cls, data: Mapping[str, Any], jobs: Sequence[JobFacts] = ()) -> ClusterFacts:
        nodes = tuple(
            NodeFacts(
                name=str(n["name"]),
                sku=n.get("sku"),
                gpus=tuple(int(g) for g in n.get("gpus") or ()),
                used={int(k): str(v) for k, v in (n.get("used") or {}).items()},
                healthy=bool(n.get("healthy", True)),
                reason=str(n.get("reason") or ""),
            )
            for n in data.get("nodes") or ()
        )
        return cls(
            nodes=nodes,
            vcs=vc_facts(data.get("vcs") or {}),
            virtual=bool(data.get("virtual", False)),
            job_vcs={j.id: j.vc for j in jobs if j.vc},
        )
