"""What the renderers and widgets show, in small frozen records they share.

A job comes typed from the client (``JobInfo``: the client is the one place that reads the
job's REST fields); the queue and cluster documents are read here, the only module of the
kernel extension that knows their field names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from labhive.scheduler.client import TERMINAL, JobInfo, JobState, TaskInfo, why_without_position
from labhive.scheduler.client.job_info import timestamp as timestamp
from labhive.scheduler.core.gpu_share import show_gpu_use

#: The id shown for another user's job, whose id the service does not reveal.
OTHERS = "-"


@dataclass(frozen=True, slots=True)
class TaskFacts:
    role: str
    index: int
    node: str | None
    gpus: tuple[int, ...]
    state: str | None = None
    exit_code: int | None = None

    @classmethod
    def from_task(cls, task: TaskInfo) -> TaskFacts:
        return cls(task.role, task.index, task.node, task.gpus, task.state, task.exit_code)


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
    gpus: int | float | None = None  # a GPU share's fraction (0.25)
    gpu_sharing: str | None = None  # for a GPU share: what enforces it (the banner says)
    submitted: float | None = None
    started: float | None = None
    finished: float | None = None
    attempt: int | None = None
    eta: tuple[float, float, float] | None = None  # a waiting job's estimated start, p10, p90
    waits_for: str | None = None  # no estimate: what its start waits for, in words
    stopping: tuple[str, float] | None = None  # a running job's pending stop: reason, deadline

    @classmethod
    def from_job(cls, job: JobInfo) -> JobFacts:
        return cls(
            id=str(job.id),
            name=job.name,
            state=job.state,
            vc=job.vc,
            priority=job.priority,
            user=job.user,
            position=job.queue_position,
            queue_length=job.queue_length,
            # the displays show the position themselves; the why-text's own copy would repeat
            why=(why_without_position(job.why) or None)
            if job.why and job.queue_position
            else job.why,
            reason=job.reason or None,
            tasks=tuple(TaskFacts.from_task(t) for t in job.tasks),
            gpus=job.gpus,
            submitted=job.submitted_at,
            started=job.started_at,
            finished=job.finished_at,
            attempt=job.attempt,
            stopping=(str(job.stopping.get("reason")), float(job.stopping["deadline"]))
            if job.stopping and job.state == "RUNNING"
            else None,
            eta=(job.eta, job.eta_low or job.eta, job.eta_high or job.eta)
            if job.eta is not None
            else None,
            waits_for=job.waits_for,
            gpu_sharing=job.gpu_sharing,
        )

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> JobFacts:
        """From a job's JSON as the service sends it."""
        return cls.from_job(JobInfo.from_json(data))

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
    used_gpus: int | float  # GPU shares count as their fractions (0.75)
    opportunistic_gpus: int | float
    waiting: int


@dataclass(frozen=True, slots=True)
class QueueFacts:
    """Per VC: its quota and use, and the waiting jobs in queue order (others' as allowed)."""

    vcs: tuple[VCFacts, ...]
    waiting: tuple[JobFacts, ...]
    #: VC -> your fair-share standing in words (empty when the cluster has no fair share).
    standing: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_api(cls, doc: Mapping[str, Any]) -> QueueFacts:
        """From ``GET /queue``: ``{"vcs": {name: VC}, "waiting": [entry, ...], "standing":
        {name: {"text": ...}}, ...}``."""
        return cls(
            vcs=vc_facts(doc.get("vcs") or {}),
            waiting=tuple(map(queue_entry, doc.get("waiting") or ())),
            standing={
                str(vc): str(s.get("text", "")) for vc, s in (doc.get("standing") or {}).items()
            },
        )

    def only(self, vc: str) -> QueueFacts:
        """The same, for one VC."""
        return QueueFacts(
            tuple(v for v in self.vcs if v.name == vc),
            tuple(j for j in self.waiting if j.vc == vc),
            {k: t for k, t in self.standing.items() if k == vc},
        )


def gpu_amount(value: Any) -> int | float:
    """GPUs as the service counts them: whole, or with shares' fractions (0.75); 1.0 reads 1."""
    number = float(value or 0)
    return int(number) if number.is_integer() else number


def vc_facts(vcs: Mapping[str, Mapping[str, Any]]) -> tuple[VCFacts, ...]:
    return tuple(
        VCFacts(
            name=str(name),
            guaranteed_gpus=int(v.get("guaranteed_gpus", 0)),
            used_gpus=gpu_amount(v.get("used_gpus", 0)),
            opportunistic_gpus=gpu_amount(v.get("opportunistic_gpus", 0)),
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
        state=str(entry.get("state", JobState.WAITING)),
        vc=entry.get("vc"),
        priority=entry.get("priority"),
        user=entry.get("user"),
        position=entry.get("position"),
        why=entry.get("why"),
        gpus=entry.get("gpus"),
        eta=estimate(entry),
        waits_for=entry.get("waits_for"),
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
    #: GPU index -> (job id, its share) per sharer, for GPUs that host GPU shares.
    shares: Mapping[int, tuple[tuple[str, float], ...]] = field(default_factory=dict)

    def share_line(self, gpu: int) -> str | None:
        """ "GPU 0: 0.75 used by 2 jobs", or None for a GPU without shares."""
        held = self.shares.get(gpu)
        return show_gpu_use(gpu, [s for _, s in held]) if held else None


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
                shares={
                    int(g): tuple((str(s["job"]), float(s["share"])) for s in held)
                    for g, held in (n.get("shares") or {}).items()
                },
            )
            for n in data.get("nodes") or ()
        )
        return cls(
            nodes=nodes,
            vcs=vc_facts(data.get("vcs") or {}),
            virtual=bool(data.get("virtual", False)),
            job_vcs={j.id: j.vc for j in jobs if j.vc},
        )
