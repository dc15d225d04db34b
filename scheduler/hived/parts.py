"""What one of HiveD's parts asks of another it does not import: typed promises instead of the
``raise NotImplementedError`` stubs the mixins once shared.

``core.HivedScheduler`` holds its parts (``queue``, ``turns``, ``sizing``, ``attempt``,
``failures``, ``preemption``, ``health``, ``adoption``, ``shares``);
a part's module imports ``base`` for the scheduler's state, so ``base`` cannot import the parts
back (an import circle, which ``tests/test_import_circles.py`` refuses). It declares them by
these protocols, and each part keeps its promise structurally (mypy checks the assignment in
``core``).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

from labhive.scheduler.core.config import ClusterConfig
from labhive.scheduler.core.jobs import RoleSpec
from labhive.scheduler.core.model import Decision
from labhive.scheduler.hived.cells import CellTree
from labhive.scheduler.hived.fairshare import Account
from labhive.scheduler.hived.job import Job
from labhive.scheduler.hived.placement import Placer
from labhive.scheduler.hived.plan import Plan
from labhive.scheduler.hived.queue import JobClass, VCQueue
from labhive.scheduler.hived.share_book import ShareBook
from labhive.scheduler.hived.vc import VCs


class Placing(Protocol):
    """``attempt.Attempt`` as the queue, GPU shares, preemption and failure records see it."""

    #: The search over the current config's cells (lazy preemption undoes its bindings).
    placer: Placer

    def load(self, tree: CellTree, vcs: VCs) -> None:
        """Search the cells of a (new) config (``base._load``)."""
        ...

    def place(
        self,
        job: Job,
        out: list[Decision],
        since: tuple[int, bool] | None = None,
        cls: JobClass | None = None,
    ) -> None:
        """Place what of the job fits now, unit by unit, each plan carried out (``out``)."""
        ...

    def find(
        self,
        job: Job,
        unit: list[tuple[RoleSpec, int]],
        since: tuple[int, bool] | None = None,
        cls: JobClass | None = None,
    ) -> Plan | None:
        """Search cells for one unit of the job; change nothing but the plan's bindings."""
        ...


class Committing(Protocol):
    """``preempt.Preemption`` as GPU shares see it."""

    def commit(self, job: Job, plan: Plan, out: list[Decision]) -> bool:
        """Carry ``plan`` out: preempt or downgrade its victims, start ``job``; False when lazy
        preemption's second search found no room after all."""
        ...


class Queueing(Protocol):
    """``queueing.ClassQueue`` as the other parts, GPU shares and the views see it."""

    #: Per VC, its waiting jobs in queue order.
    queues: dict[str, VCQueue]
    #: Classes worth a look at the next pass.
    ready: set[JobClass]
    #: Every class made since the last config, by key.
    classes: dict[Hashable, JobClass]
    #: The opportunistic classes.
    oppo_classes: dict[Hashable, JobClass]
    #: Per VC, its classes that have waiting jobs.
    vc_classes: dict[str, dict[Hashable, JobClass]]
    #: Waiting CPU-only jobs: (-priority, seq, job id).
    cpu_waiting: list[tuple[int, int, str]]

    def enqueue(self, job: Job) -> None:
        """Put a job (back) in its VC's queue at its original place, in its current class."""
        ...

    def dequeue(self, job: Job, keep_order: bool = False) -> None:
        """Take a job out of its class (and, unless ``keep_order``, of its VC's order)."""
        ...

    def reset(self) -> None:
        """Forget every waiting job and class (a new config)."""
        ...

    def load(self, config: ClusterConfig) -> None:
        """Read what a (new) config says that the pass asks on every job."""
        ...


class TurnTaking(Protocol):
    """``turns.Turns`` as the search, GPU shares and the why-texts see it."""

    #: Classes waiting for an account to fall under its VC's cap.
    capped: dict[Account, set[JobClass]]
    #: Whether the last attempt stopped at its user's cap.
    cap_hit: bool

    def load(self) -> None:
        """A (new) config: forget what was filed about the old classes."""
        ...

    def capped_unit(self, job: Job, unit: list[tuple[RoleSpec, int]]) -> bool:
        """Whether the unit would take the job's user past its VC's cap."""
        ...


class Sharing(Protocol):
    """``shares.Shares`` as the scheduler's bookkeeping, the class queue, adoption and
    preemption see it: its book (the front door, which made it, runs its pass)."""

    #: GPUs hosting shares and their sharers, and the waiting shares in queue order.
    book: ShareBook

    def anew(self) -> Sharing:
        """The part for a new config's cells: no GPU hosts shares, the waiting ones wait on."""
        ...
