"""Waiting jobs: per-VC order for positions, and classes of identical jobs for scheduling.

Scanning 10,000 waiting jobs after every event is what makes a naive scheduler slow. Jobs that
ask for the same thing at the same priority in the same VC succeed or fail together, so they
share a ``JobClass`` (FIFO by submit order); when a class's head cannot be placed the whole
class is blocked until the capacity it depends on grows (its VC's ``epoch``, or the cluster's
for opportunistic jobs). A pass then touches only the classes that might now fit.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from labhive.scheduler.hived.shortfall import Failed, Failure


@dataclass(frozen=True, slots=True)
class FailedAt:
    """When a class last failed: the core's tick and its VC's epochs then, so that the next
    attempt can tell what changed since (only freed GPUs, or free physical cells too)."""

    tick: int
    epoch: int
    pool_epoch: int


@dataclass(frozen=True, slots=True)
class JobSize:
    """How important and how large a waiting job is, for pruning: within one group, a job at
    most as important and at least as large as one that just failed fails too."""

    priority: int
    gpu: int  # per task
    cpu: float  # per task
    memory_mb: int  # per task
    tasks: int  # still waiting

    def dominated_by(self, failed: JobSize) -> bool:
        return (
            self.priority <= failed.priority
            and self.gpu >= failed.gpu
            and self.cpu >= failed.cpu
            and self.memory_mb >= failed.memory_mb
            and self.tasks >= failed.tasks
        )


@dataclass(frozen=True, slots=True)
class Signature:
    """What a failed attempt of a class says about others: jobs of the same ``group`` (VC,
    SKU, gang, pinned cell) that it dominates fail too; ``group`` None says nothing (jobs of
    several roles)."""

    group: Hashable | None
    size: JobSize


@dataclass(slots=True, eq=False)
class JobClass:
    key: Hashable
    vc: str
    priority: int
    entries: list[tuple[int, str]] = field(default_factory=list)  # (seq, job id), sorted
    #: When the scheduler tells users apart (``turns``): the same entries per account (VC,
    #: user), each sorted; the class's head is then the head of its best-ranked account's.
    #: One class for all users, not one per user: jobs of one shape fit or fail together
    #: whoever submitted them, so a pass blocks and tries a shape once, as without users.
    users: dict[tuple[str, str], list[tuple[int, str]]] | None = None
    #: Whose accounts ``users`` holds: its VC's (``vc``), or None for opportunistic jobs of
    #: all VCs (``queueing._class_key``).
    scope: str | None = ""
    changes: int = 0  # adds and removes so far: a head found since then still holds
    #: The head ``turns.Turns.fair_head`` found last (rank key, seq, job id) and the account it
    #: is of: it holds until a job that may go before it is filed (an account new to the
    #: class, or a job ahead of its account's first), it leaves (``add``, ``remove``), or
    #: that account's key moves (keys only grow; ``turns.Turns.refile`` forgets every head when
    #: one goes down). None: to be found again.
    head: tuple[float, int, str] | None = None
    head_owner: tuple[str, str] = ("", "")
    blocked_at: Hashable = None  # the capacity stamp it last failed at
    need: int = 0  # the fewest GPUs its head job can start with
    task_need: int = 0  # ... of which its largest task needs on one node
    failed_at: FailedAt | None = None
    vc_ref: Any = None  # the core's VC object, saving a lookup on the hot path
    slots: dict[Any, int] | None = None  # a failed gang's task slots per node (core)
    slots_tick: int | None = None
    stamp: Hashable = None  # its VC's capacity stamp, cached for one VC version
    stamp_version: int = -1
    signature: Signature | None = None  # what its failure says about other classes (core)
    failed: Failed | None = None  # why its last search failed (``failures``)
    judged: bool = False  # whether ``never`` holds the quota's verdict (``failures``)
    never: Failure | None = None  # it: no VC, no cells, or never as its cells are

    def add(self, seq: int, job_id: str, account: tuple[str, str] | None = None) -> bool:
        """File a job (also under its ``account`` when the class keeps ``users``); whether
        that account is new to the class."""
        bisect.insort(self.entries, (seq, job_id))
        users = self.users
        if users is not None and account is not None:
            self.changes += 1
            line = users.get(account)
            if line is None:
                users[account] = [(seq, job_id)]
                self.head = None
                return True
            if seq < line[0][0]:  # (a later one of a user's jobs cannot pass the head)
                self.head = None
            bisect.insort(line, (seq, job_id))
        return False

    def remove(self, seq: int, job_id: str, account: tuple[str, str] | None = None) -> bool:
        """Take a job out; whether its account has no other job in the class."""
        _drop(self.entries, (seq, job_id))
        users = self.users
        if users is not None and account is not None:
            self.changes += 1
            head = self.head
            if head is not None and head[2] == job_id:
                self.head = None
            line = users.get(account)
            if line is not None:
                _drop(line, (seq, job_id))
                if not line:
                    del users[account]
                    return True
        return False


def _drop(entries: list[tuple[int, str]], entry: tuple[int, str]) -> None:
    i = bisect.bisect_left(entries, entry)
    if i < len(entries) and entries[i] == entry:
        del entries[i]


@dataclass(slots=True)
class VCQueue:
    """One VC's waiting jobs in queue order: higher priority first, then submit order."""

    order: list[tuple[int, int, str]] = field(default_factory=list)  # (-priority, seq, id)

    def add(self, priority: int, seq: int, job_id: str) -> None:
        bisect.insort(self.order, (-priority, seq, job_id))

    def remove(self, priority: int, seq: int, job_id: str) -> None:
        entry = (-priority, seq, job_id)
        i = bisect.bisect_left(self.order, entry)
        if i < len(self.order) and self.order[i] == entry:
            del self.order[i]

    def position(self, priority: int, seq: int, job_id: str) -> int:
        return bisect.bisect_left(self.order, (-priority, seq, job_id)) + 1
