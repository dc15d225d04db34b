"""A job while a queue policy (FIFO, SJF, DRF, LAS, Capacity ...) holds it: its spec, its gang
and the counters the policies rank it by."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.policies.node_pool import Gang


@dataclass(slots=True, eq=False)
class QueuedJob:
    """A job while a queue policy holds it."""

    job_id: str
    spec: JobSpec
    seq: int
    gang: Gang
    submitted: float
    running: bool = False
    opportunistic: bool = False  # started on borrowed capacity (Capacity's elastic share)
    started: float = 0.0  # start of the current run
    attained: float = 0.0  # GPU-seconds received in earlier runs (LAS)
    level: int = 0  # LAS queue index
    waiting_since: float = 0.0
    token: int = 0  # bumped on every state change, so stale heap entries can be told apart
    #: The line it joined last (``group_key`` then, set by ``_enqueue``): a new job is tried
    #: there at once, and the question was asked twice a job.
    group: Hashable = None
    # Copied from the spec and gang once (neither is ever replaced): a pass reads them for
    # every head it weighs, and as properties they were 4% of a contended Capacity run.
    vc: str = field(init=False)
    gpus: int = field(init=False)
    user: str = field(init=False)

    def __post_init__(self) -> None:
        self.vc = self.spec.vc
        self.gpus = self.gang.gpus
        self.user = self.spec.user or ""

    @property
    def cpu(self) -> float:
        return self.gang.cpu

    @property
    def memory_mb(self) -> float:
        return self.gang.memory_mb
