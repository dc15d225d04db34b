"""GPU shares in HiveD: tasks that take a half, a quarter or an eighth of one GPU.

How a share fits HiveD's cells, without changing them: the first share placed on a GPU takes
that GPU's leaf cell exactly as a one-GPU task does (the same search: a guaranteed share inside
its VC's own cells, binding one if need be, preempting strictly lower priorities; an
opportunistic share on any idle GPU). The GPU then *hosts* shares (``share_book.Host``): later
shares of the same VC and priority (or, opportunistic, of any VC) join it while its shares sum
to at most one GPU (``sum(milli) <= 1000``), with no change to the cells or the VC's counters.
When a sharer leaves, the others keep the GPU (the leaf's recorded job passes to one of them);
the last one frees the leaf as any job does. So:

- a VC's guarantee holds: its shares only take its own cells, and a VC of 4 GPUs holds 16
  quarters or 32 eighths;
- a whole-GPU job never lands on a GPU with shares (the leaf is used), and preempting the leaf
  preempts every sharer on it (``ShareBook.sharers``), all of one priority, so "strictly lower
  priority only" holds for each of them;
- a node's failure stops every sharer on it (``health`` lists them as it lists CPU-only jobs).

A waiting whole-GPU job holds the shares queued after it (``Shares.hold``): they join none of
the hosting GPUs it needs (the least used first) and open no GPU, so a stream of shares cannot
keep a GPU shared for ever while it waits; shares queued before it go as before.

Waiting shares are kept out of HiveD's job classes (whose cheap bounds count free leaf cells,
and a share may fit where no cell is free) in their own list, tried after each pass in queue
order (priority, then submission); a share that fails blocks the shares of its VC and priority
at least as large for the rest of that pass. Whole-GPU jobs pay one attribute test per job and
one list test per event for all this.

``Shares`` is a part ``core.HivedScheduler`` holds (``self.shares``), as HiveD's Go code keeps
each sub-algorithm an object with its own state: its state is the book (``share_book.ShareBook``),
made anew with the part for each config's cells (``Shares.anew``, from ``base._load``). The class
queue files waiting shares in the book, the bookkeeping asks it whether a GPU's other sharers keep
it, adoption restores running shares into it and preemption reads its sharers, all through
``parts.Sharing``; the views read the book and the hold through ``state.SharedGpus``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from labhive.scheduler.core.gpu_share import MILLI
from labhive.scheduler.core.model import Decision, Start
from labhive.scheduler.hived.base import HivedBase, task_placement
from labhive.scheduler.hived.cells import Cell
from labhive.scheduler.hived.job import Job
from labhive.scheduler.hived.queue import JobClass
from labhive.scheduler.hived.share_book import ShareBook, ShareHold


class Shares:
    """The pass of waiting shares, and the book of who shares which GPU (``ShareBook``)."""

    def __init__(self, sched: HivedBase, waiting: list[tuple[int, int, str]] | None = None) -> None:
        #: The scheduler whose jobs, cells, class queue, search and preemption the pass uses.
        self._sched = sched
        #: GPUs hosting shares and their sharers (this config's cells), and the waiting shares
        #: in queue order (``waiting``: those of the config before, which wait on).
        self.book = ShareBook(waiting)

    def anew(self) -> Shares:
        """The part for a new config's cells (``base._load``): no GPU hosts shares yet (the
        running ones are restored onto the new cells: ``adopt``), the waiting ones wait on."""
        return Shares(self._sched, self.book.waiting)

    def schedule(self, out: list[Decision]) -> None:
        """Place waiting shares in queue order; a failed share blocks the shares of its VC and
        priority at least as large for the rest of this pass (they could not fit either).
        Shares of a VC and priority that a waiting whole-GPU job holds (``hold``) join only
        the GPUs it does not drain, and open none."""
        jobs = self._sched._jobs
        failed: dict[tuple[str | None, int], int] = {}  # (VC, priority) -> smallest that failed
        holds: dict[tuple[str | None, int], ShareHold | None] = {}
        waiting = self.book.waiting
        for entry in list(waiting):
            job = jobs[entry[2]]
            key = (None if job.opportunistic else job.vc, job.prio)
            if job.share >= failed.get(key, MILLI + 1):
                continue
            if key not in holds:
                holds[key] = self.hold(*key)
            hold = holds[key]
            held = hold.drained if hold is not None and job.seq > hold.after else None
            if self._place(job, out, held):
                waiting.remove(entry)
            else:
                failed[key] = job.share

    def hold(self, vc: str | None, prio: int) -> ShareHold | None:
        """Whether a waiting whole-GPU job holds the shares of ``vc`` (None: opportunistic)
        and ``prio``, and how (``ShareHold``); None when no such job waits.

        The reservation that keeps a stream of shares from holding a GPU for ever against a
        whole-GPU job (as fair share's ``reserveAfter`` keeps a stream of small jobs from a
        gang): while a whole-GPU job of the VC at this priority or higher waits after a pass
        (the pass tried it first: it did not fit), the shares queued after it join none of
        the hosting GPUs it could get once their shares end (as many as it needs, the least
        used first: they empty first) and take no free GPU either; the drained GPU's last
        share ending frees it to the next pass, which tries whole-GPU jobs before shares.
        Shares queued before it go as before. Jobs that can never run as the cells are (a
        node down), or whose users are all at their running cap, hold nothing."""
        queue = self._sched.queue
        if vc is None:
            classes: Iterable[JobClass] = queue.oppo_classes.values()
        else:
            classes = queue.vc_classes.get(vc, {}).values()
        holding = [
            c
            for c in classes
            if c.entries and c.priority >= prio and c.never is None and not self._all_capped(c)
        ]
        if not holding:
            return None
        first = min(holding, key=lambda c: (-c.priority, c.entries[0][0]))
        after = -math.inf if first.priority > prio else first.entries[0][0]
        need = max(c.need for c in holding)
        hosts = [h for h in self.book.hosts.values() if h.vc == vc and h.prio == prio]
        hosts.sort(key=lambda h: (h.used, h.leaf.order))
        return ShareHold(after, frozenset(h.leaf for h in hosts[:need]), first.entries[0][1])

    def _all_capped(self, cls: JobClass) -> bool:
        """Whether every user with jobs in the class is at their VC's running cap (``turns``):
        its jobs wait for their own users' GPUs to end, not for the shares' GPU, and hold no
        share (a GPU drained for them would idle)."""
        s = self._sched
        ledger, users = s._ledger, cls.users
        if ledger is None or not ledger.caps or not users:
            return False
        turns = s.turns
        for line in users.values():
            job = s._jobs[line[0][1]]
            hit = turns.capped_unit(job, job.waiting_tasks)
            turns.cap_hit = False  # a question, not an attempt: nothing is filed as capped
            if not hit:
                return False
        return True

    def _place(self, job: Job, out: list[Decision], held: frozenset[Cell] | None = None) -> bool:
        """Join a GPU that hosts shares of the job's VC and priority, else take a GPU as a
        one-GPU task would (the job's own search, preemption included) and host it there;
        with ``held`` (``hold``), join only a GPU outside it and take none."""
        vc = None if job.opportunistic else job.vc
        book = self.book
        host = book.find(vc, job.prio, job.share, held or frozenset())
        role, index = job.tasks[0]
        if host is not None:
            placement = task_placement(role.name, index, [host.leaf])
            job.placed[(role.name, index)] = (placement, [host.leaf])
            book.join(host, job.job_id, job.share)
            out.append(Start(job.job_id, (placement,), job.opportunistic))
            return True
        if held is not None:
            return False
        s = self._sched
        plan = s.attempt.find(job, job.tasks)
        if plan is None or not s.preemption.commit(job, plan, out):
            return False
        leaf = job.placed[(role.name, index)][1][0]
        book.open(leaf, vc, job.prio, job.job_id, job.share)
        return True
