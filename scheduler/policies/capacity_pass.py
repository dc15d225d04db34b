"""Capacity's full scheduling pass, made incremental: the VCs' heads kept ranked between
passes with what they were found to be, a pass that could change nothing not made, and the
heads that can no longer start dropped in one sweep once the pass may search no more. A mixin
of ``capacity.CapacityPolicy``, over ``QueuedPass``'s state.

Why (issue 34): on the contended cluster a Capacity pass follows nearly every finish, and it
ranked every VC's head afresh (its share of its quota, ``group_priority``), then popped each
and asked whether it could start: about 7.5 heads a pass, 2.8 tried, one started in a pass
out of five. Nearly every failed try was a VC's 64-GPU head beyond its quota (borrowed) that
no 8 nodes had room for, whose "preemption search" had no victims to look at (a borrowed job
preempts nobody) and still built a release probe; the other heads were skipped one by one
as hopeless. Now:

1. ``_rank_touched``: each VC's head and its rank are kept between passes; only the lines a
   job joined or left since (``_touched``), or whose VC's GPUs in use changed (a start or
   stop: the share, ``_share_changed``), are looked at again, and a line whose head stayed
   (a job joined behind it) and whose share did not change is not ranked again.
2. A kept head is *inert* where no pass can start it or change anything by trying it: its VC
   may not run it (borrowing off), or it may only borrow and placement refuses its GPU count
   by free counts (``SizeRefusals``; a borrowed head has no victims, so its search frees
   nothing). Weighed when its line is ranked; it stays so while its line is untouched and
   the count stays refused. A pass where every head is inert would start nothing and leave
   the pool as it was: it is not made (``_dry_pass``'s first case).
3. Once the pass's searches are spent and its blocked head found, the heads left needing
   more GPUs than are free, or of a GPU count placement refuses by free counts, or of a
   shape found no room, are dropped together (``_thinned``, as a pass with backfill does):
   until the pass ends free GPUs only fall and nothing is released, so each would be skipped
   as hopeless when reached.
4. An inert borrowed head reached in a pass is settled by counts (``_borrower_refused``),
   and a borrowed head's search is not made on paper (``_fails_on_paper``): only the search
   it spends is counted, as before.
5. A *dry* pass is not made either (``_dry_pass``): the heads ranked before the first head
   that is not inert are borrowers of refused counts that spend the pass's searches and
   block it, and no GPU count of a kept head may start on what is free, so the thinning
   keeps none. On the contended cluster most passes after a finish were so (603 of 705 over
   jobs 12,000-14,000): the VCs' wide borrowers spent the searches and every guaranteed
   head's count was refused.
6. A submission that joined behind its line's head makes no pass (it is not tried), and if
   the line's kept head and share stand the line is not ranked again.

Exact: decisions are those of ``QueuedPass``'s pass, which ranks every head afresh at each
pass and skips none but one by one (``tests/test_capacity_pass.py`` holds the two to the same
decisions on random workloads). Without backfill only (a line per VC); with backfill, and in
passes over some lines only (submissions), the pass is ``QueuedPass``'s.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Hashable
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from mypy_extensions import mypyc_attr

from labhive.scheduler.policies.queued import QueuedPolicy
from labhive.scheduler.policies.queued_job import NOT_WAITING, UNBLOCKED, QueuedJob

if TYPE_CHECKING:
    from labhive.scheduler.core.model import Decision

Heads = list[tuple[Any, int, Hashable]]
NEVER = 1 << 30  # more GPUs than any count
_count_of = itemgetter(1)  # an entry of ``_inert_ranked``: its refused count


def _drop(counts: Counter[int], gpus: int) -> None:
    """One head fewer of ``gpus``; a count of none is deleted, not kept at 0: the pass walks
    the counts (``_thinned``, ``_dry_pass``), and a run leaves dozens of them at 0."""
    left = counts[gpus] - 1
    if left:
        counts[gpus] = left
    else:
        del counts[gpus]


# open to subclasses written in Python, as QueuedPolicy is (docs/policies.md)
@mypyc_attr(allow_interpreted_subclasses=True)
class CapacityPass(QueuedPolicy):
    """``_schedule``'s full pass for Capacity without backfill (see the module's docstring)."""

    _kept_jobs: dict[Hashable, QueuedJob]  # line -> its head (ranked in ``_line_heads``)
    #: GPU count -> the kept heads needing that many; the base's ``_kept_sizes`` is the same
    #: Counter (a name of its own: mypyc refuses a subclass narrowing the base's declared type)
    _kept_counts: Counter[int]
    _inert: dict[Hashable, int]  # line -> 0 (its VC may not run it) or its count, refused
    _inert_sizes: Counter[int]  # GPU count -> the inert heads refused for it
    #: line -> its kept head, while that head and its VC's GPUs in use stand as ranked (a
    #: start or stop pops it: ``_share_changed``); empty without kept lines
    _standing: dict[Hashable, QueuedJob]
    _parked: dict[int, int]  # ``SizeRefusals.held``'s map, taken at each pass's start
    _live: dict[Hashable, bool]  # the kept lines whose heads are not inert -> borrowed (``opp``)
    _inert_ranked: list[tuple[Any, int]]  # (rank, refused count) of the inert borrowers, sorted

    def _keep_lines(self) -> None:
        """Keep the lines' heads between passes (``__init__``, without backfill)."""
        self._line_heads = {}
        self._kept_jobs, self._kept_counts = {}, Counter()
        self._kept_sizes = self._kept_counts
        self._inert, self._inert_sizes = {}, Counter()
        self._live = {}
        self._inert_ranked = []

    def _share_changed(self, vc: Hashable) -> None:
        """The VC's GPUs in use changed: its head is ranked and weighed again."""
        if self._line_heads is not None:
            self._touched.add(vc)
            self._standing.pop(vc, None)

    def _schedule(
        self,
        out: list[Decision],
        only: QueuedJob | None = None,
        groups: set[Hashable] | None = None,
    ) -> None:
        if only is not None:  # a submission: ``QueuedPass``'s pass for it, with no reset
            group = only.group
            # Joined behind its line's kept head, which stands: no try, and ``_rank_touched``
            # would pass the line over. Told without fetching the line's head: the kept head
            # still waits and its VC's share has not changed since it was ranked. Exact: a
            # submission's ``seq`` is the highest yet (``order_key``), so it heads its line
            # only where none waits; and a job that could join ahead of the kept head is one
            # stopped and requeued, whose stop marks its VC's line (``_share_changed``), as a
            # start or a new cluster config does. Why: every submission fetched its line's
            # head (``_head``), though nearly all join behind one (issue 34).
            kept = self._standing.get(group)
            if kept is not None and kept.group is not NOT_WAITING:
                self._touched.discard(group)
            elif self._head(group) is only:
                self._begin_pass()
                self._try(only, out)
            return
        if groups is not None or self._line_heads is None:
            super()._schedule(out, only, groups)
            return
        # (``_begin_pass`` once the pass is made: a dry one reads only the searches it would
        # have, ``SEARCHES_PER_PASS``, and ranking may ask ``_refused``, whose refusals kept
        # for the last pass are forgotten here, as it would: nodes may have changed since)
        self._refusals_at = -1
        self._blocked = UNBLOCKED  # a full pass finds the blocked head afresh
        self._rank_touched()
        if self._dry_pass():
            return
        self._begin_pass()
        heads = list(self._line_heads.values())
        heapq.heapify(heads)
        self._kept_jobs_of = {}  # the heads of the lines this pass changes (``_next_head``)
        while heads and (self._searches > 0 or self._blocked is None):
            self._next_head(heads, out)
        if heads:
            heads = self._thinned(heads)
        while heads:
            self._next_head(heads, out)

    def _rank_touched(self) -> None:
        """Rank and weigh again the lines in ``_touched``, as ``QueuedPass._ranked`` would
        find them. Exact: a VC's rank (``group_priority``) and whether its head is inert read
        only its head, its GPUs in use and its quota, and a change of any marks its line
        (``_enqueue``, ``_dequeue``, ``_share_changed``; a new cluster config marks every
        line). The inert borrowers are kept sorted by rank too (``_inert_ranked``, for
        ``_dry_pass``)."""
        # (the maps each touched line reads; the counts and the sorted borrowers, changed at
        # a few of them, are read from ``self`` there: a pass ranks one or two lines)
        kept, jobs, inert = self._line_heads, self._kept_jobs, self._inert
        live, standing = self._live, self._standing
        assert kept is not None
        for group in self._touched:
            head, was = self._head(group), jobs.get(group)
            if head is was:  # (kept and counted as it is: only weighed again, if reshared)
                if group in standing:
                    continue  # a job joined behind the head: the same rank and the same answers
            else:
                if was is not None:
                    _drop(self._kept_counts, was.gpus)
                    del jobs[group]
                if head is not None:
                    jobs[group] = head
                    self._kept_counts[head.gpus] += 1
            if refused := inert.pop(group, 0):
                _drop(self._inert_sizes, refused)
                # (found by bisection, not ``list.remove``'s scan: a rank is held once, each
                # unique by its line; the scan compared its way along a site's many VCs)
                del self._inert_ranked[bisect_left(self._inert_ranked, (kept[group], refused))]
            if head is None:
                kept.pop(group, None)
                live.pop(group, None)
                standing.pop(group, None)
                continue
            standing[group] = head
            kept[group] = rank = (self.group_priority(head), head.seq, group)
            allowed, opp = self.admit(head)
            if not allowed:
                inert[group] = 0
                live.pop(group, None)
            elif opp and self._refused(head.gang):
                inert[group] = head.gpus
                self._inert_sizes[head.gpus] += 1
                insort(self._inert_ranked, (rank, head.gpus))
                live.pop(group, None)
            else:
                live[group] = opp
        self._touched.clear()

    def _dry_pass(self) -> bool:
        """Would the pass start nothing and search for nothing, its searches spent by heads
        settled by counts before any other head is reached, and none of the rest kept by the
        thinning? Then, as an inert pass, it is not made. Exact: the heads ranked before the
        first head not settled by counts are inert (its VC may not run it: passed over) or
        borrowers of a refused count (``_borrower_refused``: the first blocks the pass, and
        each spends a search where the free GPUs reach its count, in whatever order they
        come); once the searches are spent and the pass blocked, ``_thinned`` keeps no head
        where no GPU count of a kept head may start (no head was tried: no shape was found
        no room, no line touched). Why: on the contended cluster 603 of 705 passes over
        jobs 12,000-14,000 started nothing this way, each reaching three borrowers' heads
        and thinning the rest (issue 34).

        Weighed by whole collections, not line by line: the refused counts of the inert heads
        (``_inert_sizes``) all still held, the inert borrowers kept sorted by rank with their
        counts (``_inert_ranked``, kept up by ``_rank_touched`` as their lines change) cut at
        the first head not inert, and the counts of the kept heads neither refused nor more
        than are free found none before any is asked. Why: the walk over every inert line
        and every kept count cost about 170 bytecodes a pass (issue 34, seventeenth
        session).

        First, the pass where every kept head is inert still (no line's head live, each
        refused count held): no head starts or preempts, no search releases anything, and
        what the pass would find (its searches, its blocked head) the next finds afresh. It
        was a method of its own (``_inert_pass``), asked before this one at every pass, with
        the same map of refused counts (one call a pass, eighteenth session)."""
        # (``held`` first forgets what a release since may undo; the pass reads it after)
        parked = self._parked = self._sizes.held(self.pool)
        if not self._inert_sizes.keys() <= parked.keys():  # (no count of none is kept)
            return False  # (a count woken since: its head may be tried; made)
        kept, live = self._line_heads, self._live
        assert kept is not None
        if not live:
            return True  # (every kept head inert still: ``_live`` is the kept lines less those)
        # the inert borrowers ranked before the first head not inert (``_inert_ranked``: the
        # VCs that may not run their heads are passed over wherever they rank)
        ranked = self._inert_ranked
        before = bisect_left(ranked, (min(map(kept.__getitem__, live)),))
        if not before:
            return False  # (none blocks the pass)
        free = self.pool.free_gpus
        if sum(map(free.__ge__, map(_count_of, ranked[:before]))) < self.SEARCHES_PER_PASS:
            return False  # (the searches are not spent)
        if min(self._kept_counts.keys() - parked.keys(), default=NEVER) > free:
            return True  # (no count left to ask: each needs more than are free, or is refused)
        pool, sizes = self.pool, self._sizes
        for gpus in self._kept_counts:
            if gpus <= free and gpus not in parked and not sizes.refused(pool, gpus):
                return False  # (``_thinned``'s ``may``)
        return True

    def _held(self) -> dict[int, int]:
        """``SizeRefusals.held``, asked again only after a release this pass (``peak`` is
        not 0): until then it would forget nothing and give the same map, the one
        ``_dry_pass`` took at the pass's start (wake levels are at least 1). Why: a pass
        asked it for each inert head it reached and again to thin (issue 34)."""
        pool = self.pool
        return self._sizes.held(pool) if pool.peak else self._parked

    def _next_head(self, heads: Heads, out: list[Decision]) -> None:
        """Pop the first head and try it, unless ``_hopeless``; if it starts, its line's next
        head is ranked in (by its VC's new share), as ``QueuedPass._schedule`` does. A head
        that may only borrow and whose GPU count placement refuses is settled by counts
        (``_borrower_refused``), one its VC may not run is passed over (``_try`` would refuse
        it at once, changing nothing). A head whose line is untouched since the pass ranked
        it starts as ``admit`` said then (kept in ``_live``): it reads only the VC's GPUs in
        use, borrowed and quota, and a change of any marks the line (``_share_changed``).
        Why: a pass asked ``admit`` again of every head it reached (issue 34)."""
        _, _, group = heapq.heappop(heads)
        if group not in self._touched:  # weighed when ranked, its VC's use unchanged since
            head = self._kept_jobs[group]
            opp_kept = self._live.get(group)
            if opp_kept is not None:
                opp = opp_kept  # (``admit``'s answer then: it reads only the VC's use and quota)
            else:  # inert: still so but the count
                refused_gpus = self._inert[group]
                if not refused_gpus:
                    return
                pool = self.pool  # (``_held``, inline: asked of each inert head reached)
                if refused_gpus in (self._sizes.held(pool) if pool.peak else self._parked):
                    self._borrower_refused(head)
                    return
                opp = True  # (a borrower, its count woken since)
        else:
            # a line this pass changed: its head as the change left it (a start below, or a
            # victim's return, ``_preempt_for``), not fetched again
            fetched = self._kept_jobs_of.get(group)  # type: ignore[union-attr]
            if fetched is None:
                fetched = self._head(group)
                if fetched is None:
                    return
            head = fetched
            allowed, opp = self.admit(head)
            if not allowed:
                return
        if opp and self._refused(head.gang):
            self._borrower_refused(head)
        elif self._tried(head, opp, out):
            nxt = self._head(group)  # (the line is in ``_touched`` now: the start left it)
            if nxt is not None:
                self._kept_jobs_of[group] = nxt  # type: ignore[index]
                heapq.heappush(heads, (self.group_priority(nxt), nxt.seq, group))

    def _tried(self, head: QueuedJob, opp: bool, out: list[Decision]) -> bool:
        """``_try`` with how the head would start already known (``admit``: ``opp``; a
        borrowed head reaching here is of a GPU count placement does not refuse:
        ``_next_head``), placement asked unless the head's shape found no room this pass.
        Neither ``_hopeless`` nor ``_refused`` is asked first: where they would skip the
        head, trying it changes nothing either. Placement refuses a count ``_refused``
        refuses (``may_fit``'s no is ``place``'s), adding only the head's shape to those found
        no room, which no later decision of the pass reads apart (until it ends a refused
        count stays refused but after a search that frees, which forgets both, and every
        reader of the shapes, ``_tried`` and ``_thinned``, skips a refused count's heads as
        well); and where no search may run for it (``_hopeless``'s test) ``_preempt_for``
        returns at its first tests and the blocked head, found, stays. Why: nearly every
        head a pass tries starts, and each was weighed as hopeless and asked ``_refused``
        first (issue 34)."""
        shape = head.gang.shape
        tasks = None
        if shape not in self._no_room:
            tasks = self.pool.place(head.job_id, head.gang)
            if tasks is None:
                self._no_room.add(shape)  # the same gang will not fit either this pass
        return self._start_or_search(head, tasks, opp, out)

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
        found = blocked is not None and blocked.group is not NOT_WAITING
        searching = self._searches > 0
        if found and not (searching and free + self.victim_gpus(head, False) >= gpus):
            return  # hopeless: it needs more than are free, or is refused, and no search
        if searching and free >= gpus:
            self._searches -= 1  # a search with nothing to release (``_fails_on_paper``)
        if not found:
            self._blocked = head

    def _thinned(self, heads: Heads) -> Heads:
        """The heads left once the pass's searches are spent and its blocked head found,
        without those ``_hopeless`` would skip whenever reached: needing more GPUs than are
        free, or of a GPU count placement refuses by free counts, or of a shape found no room
        this pass. Until the pass ends free GPUs only fall and nothing is released (no search
        runs), so they stay hopeless. Weighed by GPU count first, over the counts of the kept
        heads (``_kept_sizes``): on the contended cluster no count may start at most passes,
        and then no head is looked at."""
        if self._line_heads is None:
            return super()._thinned(heads)
        pool, sizes, touched = self.pool, self._kept_counts, self._touched
        # (``held`` first forgets what a release since, a search's this pass too, may undo;
        # the counts it holds are refused, others are asked)
        parked, free = self._held(), pool.free_gpus
        may = {
            gpus
            for gpus, lines in sizes.items()
            if lines and gpus <= free and gpus not in parked and not self._sizes.refused(pool, gpus)
        }
        if not may and not touched:
            return []  # (a line a job joined or left this pass may have a head of another count)
        jobs, no_room = self._kept_jobs, self._no_room
        kept = []
        for entry in heads:
            group = entry[2]
            if group in touched:
                kept.append(entry)  # weighed when reached (``_hopeless``)
            elif (head := jobs[group]).gpus in may and head.gang.shape not in no_room:
                kept.append(entry)
        heapq.heapify(kept)
        return kept

    def _fails_on_paper(self, job: QueuedJob, opp: bool) -> bool:
        """A borrowed job's search fails with nothing released (``victims`` gives none): no
        probe, and nothing to undo."""
        if opp and self._line_heads is not None:
            return True
        return super()._fails_on_paper(job, opp)
