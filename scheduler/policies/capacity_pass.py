"""Capacity's full scheduling pass, made incremental: the VCs' heads kept ranked between
passes, and the heads that can no longer start dropped in one sweep once the pass may search
no more. A mixin of ``capacity.CapacityPolicy``, over ``QueuedPass``'s state.

Why (issue 34): on the contended cluster a Capacity pass follows nearly every finish, and it
ranked every VC's head afresh (its share of its quota, ``group_priority``), then popped each
and asked whether it could start: about 7.5 heads a pass, 2.8 tried, one started. Nearly
every failed try was a VC's 64-GPU head beyond its quota (borrowed) that no 8 nodes had room
for, whose "preemption search" had no victims to look at (a borrowed job preempts nothing)
and still built a release probe; the other heads were skipped one by one as hopeless. Now:

1. ``_kept_heads``: each VC's head and its rank are kept between passes; only the VCs whose
   line a job joined or left, or whose GPUs in use changed (a start or stop: the share), are
   ranked again (``_touched``; ``capacity.py`` marks the starts and stops).
2. Once the pass's searches are spent and its blocked head found, the heads left needing
   more GPUs than are free, or of a GPU count placement refuses by free counts
   (``_refused``), are dropped together (``_thinned``, as a pass with backfill does): until
   the pass ends free GPUs only fall and nothing is released, so each would be skipped as
   hopeless when reached.
3. A borrowed head's search is not made on paper (``_fails_on_paper``): ``victims`` gives it
   none, so the search frees nothing and leaves the pool as it was; only the search it
   spends is counted, as before.

Exact: decisions are those of ``QueuedPass``'s pass, which ranks every head afresh at each
pass and skips none but one by one (``tests/test_capacity_pass.py`` holds the two to the same
decisions on random workloads). Without backfill only (a line per VC); with backfill, and in
passes over some lines only (submissions), the pass is ``QueuedPass``'s.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from labhive.scheduler.policies.queued_job import QueuedJob
from labhive.scheduler.policies.queued_pass import QueuedPass

if TYPE_CHECKING:
    from labhive.scheduler.core.model import Decision

Heads = list[tuple[Any, int, Hashable]]


class CapacityPass(QueuedPass):
    """``_schedule``'s full pass for Capacity without backfill (see the module's docstring)."""

    # each kept line's head, beside its rank in ``_line_heads`` (``QueuedPolicy``'s)
    _kept_jobs: dict[Hashable, QueuedJob]

    def _schedule(
        self,
        out: list[Decision],
        only: QueuedJob | None = None,
        groups: set[Hashable] | None = None,
    ) -> None:
        if only is not None or groups is not None or self._line_heads is None:
            super()._schedule(out, only, groups)
            return
        self._searches = self.SEARCHES_PER_PASS
        self._no_room.clear()  # shapes that did not fit; valid while nothing is freed
        self._refusals_at = -1  # nodes may have failed or come back since the last pass
        self._blocked = None  # a full pass finds the blocked head afresh
        heads = self._kept_heads()
        while heads and (self._searches > 0 or self._blocked is None):
            self._next_head(heads, out)
        if heads:
            heads = self._thinned(heads)
        while heads:
            self._next_head(heads, out)

    def _next_head(self, heads: Heads, out: list[Decision]) -> None:
        """Pop the first head and try it, unless ``_hopeless``; if it starts, its line's next
        head is ranked in (by its VC's new share), as ``QueuedPass._schedule`` does. A head
        that may only borrow and whose GPU count placement refuses is settled by counts
        (``_borrower_refused``)."""
        _, _, group = heapq.heappop(heads)
        head = self._kept_jobs[group] if group not in self._touched else self._head(group)
        if head is None:
            return
        allowed, opp = self.admit(head)
        if not allowed:
            return  # (borrowing off: ``_try`` refuses it at once, changing nothing)
        if opp and self._refused(head.gang):
            self._borrower_refused(head)
            return
        if self._hopeless(head) or not self._try(head, out):
            return  # this line is blocked for the rest of the pass
        nxt = self._head(group)  # (the line is in ``_touched`` now: the start left it)
        if nxt is not None:
            heapq.heappush(heads, (self.group_priority(nxt), nxt.seq, group))

    def _borrower_refused(self, head: QueuedJob) -> None:
        """What ``_hopeless`` and ``_try`` make of a head that may only borrow and of a GPU
        count placement refuses by free counts (``_refused``), without asking placement or
        building a search: skipped as hopeless once the blocked head is found, unless a
        search may run for it; tried otherwise, when it fails, spending a search if the free
        GPUs reach its count (``_preempt_for``: it has no victims), and blocks the pass if
        nothing does yet. Why: on the contended cluster nearly every pass tried two VCs'
        64-GPU heads so, each asking placement and building a release probe (issue 34)."""
        free, gpus = self.pool.free_gpus, head.gpus
        blocked = self._blocked
        found = blocked is not None and blocked.job_id in self._waiting
        searching = self._searches > 0
        if found and not (searching and free + self.victim_gpus(head, False) >= gpus):
            return  # hopeless: it needs more than are free, or is refused, and no search
        if searching and free >= gpus:
            self._searches -= 1  # a search with nothing to release (``_fails_on_paper``)
        if not found:
            self._blocked = head

    def _kept_heads(self) -> Heads:
        """Every line's ranked head, as ``QueuedPass._ranked`` finds them, from those kept
        since the last full pass: only the lines in ``_touched`` are looked at again. Exact:
        a VC's rank (``group_priority``) reads only its head and its GPUs in use, and a change
        of either marks its line (``_enqueue``, ``_dequeue``, ``on_started``, ``on_stopped``;
        a new cluster config marks every line)."""
        kept, jobs = self._line_heads, self._kept_jobs
        assert kept is not None
        for group in self._touched:
            head = self._head(group)
            if head is None:
                kept.pop(group, None)
                jobs.pop(group, None)
            else:
                kept[group] = (self.group_priority(head), head.seq, group)
                jobs[group] = head
        self._touched.clear()
        heads = list(kept.values())
        heapq.heapify(heads)
        return heads

    def _thinned(self, heads: Heads) -> Heads:
        """The heads left once the pass's searches are spent and its blocked head found,
        without those ``_hopeless`` would skip whenever reached: needing more GPUs than are
        free, or of a GPU count placement refuses by free counts (``_refused``, asked once
        per count here), or of a shape found no room this pass. Until the pass ends free GPUs
        only fall and nothing is released (no search runs), so they stay hopeless."""
        if self._line_heads is None:
            return super()._thinned(heads)
        pool, no_room, touched, jobs = self.pool, self._no_room, self._touched, self._kept_jobs
        # (``held`` first forgets what a release since, a search's this pass too, may undo;
        # the counts it holds are refused, others are asked)
        parked, free = self._sizes.held(pool), pool.free_gpus
        fits: dict[int, bool] = {}  # GPU count -> not hopeless by its count
        kept = []
        for entry in heads:
            group = entry[2]
            head = jobs[group] if group not in touched else self._head(group)
            if head is None:
                continue
            gpus = head.gpus
            may = fits.get(gpus)
            if may is None:
                may = fits[gpus] = (
                    gpus <= free and gpus not in parked and not self._refused(head.gang)
                )
            if may and head.gang.shape not in no_room:
                kept.append(entry)
        heapq.heapify(kept)
        return kept

    def _fails_on_paper(self, job: QueuedJob, opp: bool) -> bool:
        """A borrowed job's search fails with nothing released (``victims`` gives none): no
        probe, and nothing to undo."""
        if opp and self._line_heads is not None:
            return True
        return super()._fails_on_paper(job, opp)
