"""A job while a queue policy (FIFO, SJF, DRF, LAS, Capacity ...) holds it: its spec, its gang
and the counters the policies rank it by."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Final

from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.policies.node_pool import Gang


class _NotWaiting:
    """``QueuedJob.group`` of a job that waits in no line (its one instance, ``NOT_WAITING``):
    a line's key is any hashable, ``None`` (the one line of FIFO) included, so a sentinel of
    its own."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_WAITING"


NOT_WAITING: Hashable = _NotWaiting()


@dataclass(slots=True, eq=False)
class QueuedJob:
    """A job while a queue policy holds it.

    Only what a policy reads: each field is a store in ``__init__`` a job. (The submission
    time and the time it last joined a line were kept too, written once or twice a job and
    never read: the driver and ``SimJob`` keep a job's times.)"""

    job_id: str
    spec: JobSpec
    seq: int
    gang: Gang
    running: bool = False
    opportunistic: bool = False  # started on borrowed capacity (Capacity's elastic share)
    started: float = 0.0  # start of the current run
    attained: float = 0.0  # GPU-seconds received in earlier runs (LAS)
    level: int = 0  # LAS queue index
    token: int = 0  # bumped on every state change, so stale heap entries can be told apart
    #: The line it waits in (``group_key`` when it joined, set by ``_enqueue``): a new job is
    #: tried there at once, and the question was asked twice a job. ``NOT_WAITING`` while it
    #: does not wait (new, running, stopped, gone: ``_dequeue`` sets it), so this field is the
    #: job's waiting state: no dict of the waiting jobs is kept (issue 34).
    group: Hashable = NOT_WAITING
    # Copied from the spec and gang once by the one maker (``QueuedPolicy._new_job``: the
    # spec's ``vc``, the gang's ``gpus``, the spec's ``user`` or ""), neither ever replaced: a
    # pass reads them for every head it weighs, and as properties they were 4% of a contended
    # Capacity run. Given, not set by ``__post_init__``: its call was a sixth of making a job.
    vc: str = field(kw_only=True)
    gpus: int = field(kw_only=True)
    user: str = field(kw_only=True)

    @property
    def cpu(self) -> float:
        return self.gang.cpu

    @property
    def memory_mb(self) -> float:
        return self.gang.memory_mb


#: A waiting line's heap entry: (``order_key``, ``seq``, ``token`` when it joined, the job).
#: Ordered by its first three alone: ``seq`` is the job's own and its ``token`` is bumped at
#: every join, so two entries never tie there and the job (not orderable) is never compared.
#: (Of any length to mypy, so that mypyc keeps each entry one Python tuple: a fixed-length
#: tuple type is unboxed there, and boxed anew wherever it is stored or passed, which broke
#: the identity tests on entries, ``line[0] is entry``: issue 34, DRF deciding otherwise.)
Entry = tuple[Any, ...]


#: ``None`` as a blocked head (``QueuedPass._blocked``) typed as the attribute: a pass that
#: resets it to this reads it again after calls that set it, and mypy, given ``None``, takes it
#: as None until the function's end (mypyc then refuses the head read there).
UNBLOCKED: Final[QueuedJob | None] = None
