"""Which GPUs host shares, of whom, and which shares wait (``shares`` explains the model).

Pure bookkeeping over the scheduler's cells: it reads a leaf's health and order and, when the
sharer a leaf is recorded under leaves, records the leaf under another sharer (``keeps_gpu``);
the cell tree's and VCs' counters are never touched here (a hosting GPU counts as one used leaf
from its first share to its last).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from labhive.scheduler.core.gpu_share import MILLI
from labhive.scheduler.hived.cells import Cell


@dataclass(slots=True, eq=False)
class Host:
    """A GPU holding shares: its leaf cell, the VC (None: opportunistic shares of any VC) and
    priority of every sharer, and who holds how much of it (thousandths)."""

    leaf: Cell
    vc: str | None
    prio: int
    members: dict[str, int] = field(default_factory=dict)
    used: int = 0

    @property
    def room(self) -> int:
        return MILLI - self.used


class ShareMismatch(ValueError):
    """A share restored onto a GPU whose sharers it cannot join (another VC or priority, or
    too little room left)."""


@dataclass(frozen=True, slots=True)
class ShareHold:
    """A waiting whole-GPU job's hold on shares of its VC and priority: those queued after
    ``after`` (a seq; -inf: all, the job's priority is higher) join none of the ``drained``
    GPUs and open none. ``holder``: the first such job, for the why-text."""

    after: float
    drained: frozenset[Cell]
    holder: str


class ShareBook:
    """Hosts by leaf and by job, and the waiting shares in queue order.

    One book per config's cells (``shares.Shares.anew``): a new config's running shares are
    restored onto its new cells (``adopt``), while the shares that wait go on waiting in the
    order they had, handed to the new book as ``waiting``."""

    def __init__(self, waiting: list[tuple[int, int, str]] | None = None) -> None:
        #: GPU (its leaf cell) -> the shares it hosts.
        self.hosts: dict[Cell, Host] = {}
        #: Job id -> the GPU hosting its share, while it runs.
        self.of_job: dict[str, Host] = {}
        #: (-priority, seq, job id): waiting shares in queue order (kept across a new config).
        self.waiting: list[tuple[int, int, str]] = [] if waiting is None else waiting

    # ---- waiting ------------------------------------------------------------------------------

    def wait(self, priority: int, seq: int, job_id: str) -> None:
        entry = (-priority, seq, job_id)
        at = bisect.bisect_left(self.waiting, entry)
        if at == len(self.waiting) or self.waiting[at] != entry:
            self.waiting.insert(at, entry)

    def unwait(self, priority: int, seq: int, job_id: str) -> None:
        entry = (-priority, seq, job_id)
        at = bisect.bisect_left(self.waiting, entry)
        if at < len(self.waiting) and self.waiting[at] == entry:
            del self.waiting[at]

    def position(self, job_id: str) -> int | None:
        """1-based place among the waiting shares."""
        for i, entry in enumerate(self.waiting):
            if entry[2] == job_id:
                return i + 1
        return None

    # ---- hosting ------------------------------------------------------------------------------

    def find(
        self, vc: str | None, prio: int, milli: int, drained: frozenset[Cell] = frozenset()
    ) -> Host | None:
        """The healthy host of this VC and priority with the least room that still fits
        ``milli`` (best fit: keeps other GPUs whole for whole-GPU jobs); ties by cell order.
        GPUs in ``drained`` take no new share (held for a waiting whole-GPU job)."""
        best: Host | None = None
        for host in self.hosts.values():
            if host.vc != vc or host.prio != prio or host.room < milli or host.leaf.bad:
                continue
            if host.leaf in drained:
                continue
            if best is None or (host.room, host.leaf.order) < (best.room, best.leaf.order):
                best = host
        return best

    def open(self, leaf: Cell, vc: str | None, prio: int, job_id: str, milli: int) -> Host:
        host = self.hosts[leaf] = Host(leaf, vc, prio)
        self.join(host, job_id, milli)
        return host

    def join(self, host: Host, job_id: str, milli: int) -> None:
        if milli > host.room:  # the invariant everything here keeps
            raise ShareMismatch(f"GPU {host.leaf.leaf_id} has {host.room}/1000 left, not {milli}")
        host.members[job_id] = milli
        host.used += milli
        self.of_job[job_id] = host

    def join_exactly(self, leaf: Cell, vc: str | None, prio: int, job_id: str, milli: int) -> bool:
        """A restored share onto ``leaf``: joins its host (True) if there is one; False when
        the GPU hosts nothing yet (the caller places the share as a task, then ``open``)."""
        host = self.hosts.get(leaf)
        if host is None:
            return False
        if host.vc != vc or host.prio != prio or host.room < milli:
            raise ShareMismatch(
                f"GPU {leaf.leaf_id} is shared by jobs {', '.join(host.members)} "
                f"({host.used}/1000 used, VC {host.vc or 'any (opportunistic)'}, priority "
                f"{host.prio}); a share of {milli}/1000 at priority {prio} cannot join them"
            )
        self.join(host, job_id, milli)
        return True

    def keeps_gpu(self, job_id: str) -> bool:
        """The job's share ends: whether other sharers keep its GPU (the leaf stays used,
        recorded under one of them); False when it was the last (the caller frees the leaf as
        for any job) or held no share."""
        host = self.of_job.pop(job_id, None)
        if host is None:
            return False
        host.used -= host.members.pop(job_id)
        if not host.members:
            del self.hosts[host.leaf]
            return False
        if host.leaf.job == job_id:
            host.leaf.job = next(iter(host.members))
        return True

    def sharers(self, taken: set[int]) -> list[str]:
        """Every sharer of the leaves whose ids are in ``taken`` (a plan's GPUs)."""
        out: list[str] = []
        for leaf, host in self.hosts.items():
            if id(leaf) in taken:
                out.extend(host.members)
        return out

    def shares_on(self, leaf: Cell) -> dict[str, int]:
        """Who holds how much of this GPU (empty when it hosts no shares)."""
        host = self.hosts.get(leaf)
        return {} if host is None else dict(host.members)
