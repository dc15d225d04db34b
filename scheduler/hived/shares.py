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

Waiting shares are kept out of HiveD's job classes (whose cheap bounds count free leaf cells,
and a share may fit where no cell is free) in their own list, tried after each pass in queue
order (priority, then submission); a share that fails blocks the shares of its VC and priority
at least as large for the rest of that pass. Whole-GPU jobs pay one attribute test per job and
one list test per event for all this.
"""

from __future__ import annotations

from labhive.scheduler.core.gpu_share import MILLI
from labhive.scheduler.core.model import Decision, Start
from labhive.scheduler.hived.base import HivedBase, task_placement
from labhive.scheduler.hived.job import Job


class Sharing(HivedBase):
    """The scheduling pass of waiting shares (``ShareBook`` keeps the rest)."""

    def _schedule_shares(self, out: list[Decision]) -> None:
        """Place waiting shares in queue order; a failed share blocks the shares of its VC and
        priority at least as large for the rest of this pass (they could not fit either)."""
        failed: dict[tuple[str | None, int], int] = {}  # (VC, priority) -> smallest that failed
        waiting = self._book.waiting
        for entry in list(waiting):
            job = self._jobs[entry[2]]
            key = (None if job.opportunistic else job.vc, job.prio)
            if job.share >= failed.get(key, MILLI + 1):
                continue
            if self._place_share(job, out):
                waiting.remove(entry)
            else:
                failed[key] = job.share

    def _place_share(self, job: Job, out: list[Decision]) -> bool:
        """Join a GPU that hosts shares of the job's VC and priority, else take a GPU as a
        one-GPU task would (the job's own search, preemption included) and host it there."""
        vc = None if job.opportunistic else job.vc
        book = self._book
        host = book.find(vc, job.prio, job.share)
        role, index = job.tasks[0]
        if host is not None:
            placement = task_placement(role.name, index, [host.leaf])
            job.placed[(role.name, index)] = (placement, [host.leaf])
            book.join(host, job.job_id, job.share)
            out.append(Start(job.job_id, (placement,), job.opportunistic))
            return True
        plan = self._find(job, job.tasks)
        if plan is None or not self._commit(job, plan, out):
            return False
        leaf = job.placed[(role.name, index)][1][0]
        book.open(leaf, vc, job.prio, job.job_id, job.share)
        return True
