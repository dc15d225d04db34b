"""A queue policy's scheduling pass: each group's head tried in ``group_priority`` order, a
blocked group passed over for the rest of the pass (head-of-line blocking per line), backfill
past a blocked head within its shadow, per-VC quotas, the ranked heads of ``HeadIndex`` between
passes, and preemption for a head that does not fit. A mixin of ``queued.QueuedPolicy``, which
holds the state and the hooks (``order_key``, ``admit``, ``victims`` ...) this reads.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable
from heapq import heappop, heappush
from typing import Any, ClassVar

from mypy_extensions import mypyc_attr

from labhive.scheduler.core.model import Decision, Preempt, TaskPlacement
from labhive.scheduler.policies.backfill import may_jump_by, shadow
from labhive.scheduler.policies.head_index import (
    LATER,
    NOT_THIS_PASS,
    PARK,
    START,
    HeadIndex,
    Kind,
    MayStart,
)
from labhive.scheduler.policies.node_pool import Gang, NodePool
from labhive.scheduler.policies.preempt_probe import ReleaseProbe, undo_order
from labhive.scheduler.policies.queued_job import NOT_WAITING, UNBLOCKED, Entry, QueuedJob
from labhive.scheduler.policies.queued_views import QueuedViews
from labhive.scheduler.policies.size_refusals import SizeRefusals


# open to subclasses written in Python, as QueuedPolicy is (docs/policies.md)
@mypyc_attr(allow_interpreted_subclasses=True)
class QueuedPass(QueuedViews):
    """``_schedule`` and what it calls, over ``QueuedPolicy``'s state."""

    # the state of ``QueuedPolicy`` the pass reads and changes (and ``QueuedViews``' too)
    # (class constants: ``ClassVar``, as compiled classes read them on the class too)
    preemptive: ClassVar[bool]
    #: Skip a pass while no job waits (a test sets it False to run every pass).
    SKIP_IDLE_PASSES: ClassVar[bool] = True
    #: Skip a pass while every line's head finds no room (``_settle``; a test sets it False).
    SKIP_SETTLED_PASSES: ClassVar[bool] = True
    SEARCHES_PER_PASS: int  # (an instance's: tests set it on one)
    backfill: bool
    per_vc: bool
    _groups: dict[Hashable, list[Entry]]
    _now: float
    _searches: int
    _no_room: set[Hashable]
    _refusals: dict[int, bool]
    _refusals_at: int
    _sizes: SizeRefusals
    _keyed: bool
    _line_heads: dict[Hashable, tuple[Any, int, Hashable]] | None
    _touched: set[Hashable]
    # with backfill: kept lines by GPU count, and this pass's heap of kept heads (``_thinned``)
    _kept_sizes: dict[int, int] | None = None
    _kept_list: list[tuple[Any, int, Hashable]] | None = None
    #: the kept lines' heads (``_kept_heads``), kept up within a pass as its lines change:
    #: a pass's loop takes a line's head from here, without ``_head``
    _kept_jobs_of: dict[Hashable, QueuedJob] | None = None
    _blocked: QueuedJob | None
    _runs: int
    _limited: int
    _shadow: tuple[tuple[int, int, int], tuple[float, int] | None] | None
    _index: HeadIndex | None
    _ask_fit: bool
    #: What a submission's try resets first: ``_begin_pass``, or for a policy that does not
    #: preempt ``_no_room.clear`` alone (bound by ``QueuedPolicy``)
    _begin_try: Callable[[], None]
    _may_settle: bool
    _settled: tuple[NodePool, int] | None
    #: ``admit`` is the one ``QueuedPolicy`` declares (every job may start, none as
    #: opportunistic): ``_try`` takes that answer without the call (``__init_subclass__``)
    _admits_all: ClassVar[bool] = False  # (a class's: set per class, read on the class)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Per policy class: is ``admit`` declared by one class alone, the first to declare
        it (``QueuedPolicy``)? Why: ``_try`` asked it of every head it tried, and only
        Capacity's (and tests') admit other than every job (issue 34: about five tries per
        contended LAS arrival)."""
        super().__init_subclass__(**kwargs)
        cls._admits_all = sum("admit" in vars(c) for c in cls.__mro__ if c is not QueuedViews) == 1

    def _schedule(
        self,
        out: list[Decision],
        only: QueuedJob | None = None,
        groups: set[Hashable] | None = None,
    ) -> None:
        """Start what can start. With ``only`` (a new submission), try just that job; with
        ``groups``, only those lines (the others are as blocked as before)."""
        if not self._groups and self.SKIP_IDLE_PASSES:
            # No line, so nothing waits, nor may start (nor be preempted for): the pass after
            # most finishes of an uncontended run (a job started at its submission took its
            # line's entry with it). What a pass resets, the next one resets; what it would
            # take in (``HeadIndex``'s dirty lines and ``NodePool.peak``, ``_touched``) keeps
            # until then, the same as if taken in now. Lines of stale entries alone (a waiting
            # job cancelled) get a pass that finds no head, starts nothing and drops them: as
            # when the pass was skipped while no job waited (``test_queued_waiting_state``),
            # without a count of the waiting kept a join and a leave.
            return
        if only is not None:
            # Does it head the line it just joined? Where its entry is first, yes (it is
            # live: its token was just set); where a live entry is first, no; else ``_head``
            # drops the stale entries first. Why: asked at every submission, the answer was
            # nearly always on the first entry (a call a job, issue 34).
            group = only.group
            line = self._groups[group]
            first = line[0]
            if first[3] is only or (first[3].token != first[2] and self._head(group) is only):
                # (a pass that tries nothing need not reset: every pass that tries does)
                self._begin_try()
                if self._try(only, out) and line and line[0][3] is only:
                    # its entry, stale now, dropped here, where it is known to be first
                    # (else the next submission's test above would call ``_head`` for it)
                    heappop(line)
                    if not line:
                        del self._groups[group]
            return
        settled = self._settled
        if settled is not None:
            if settled[0] is self.pool and self.pool.peak < settled[1]:
                return  # every line's head still finds no room by free counts (``_settle``)
            self._settled = None
        self._begin_pass()
        if groups is None:
            self._blocked = UNBLOCKED  # a full pass finds the blocked head afresh
        free = self.pool.free_gpus
        if not self.preemptive and free == 0:
            if self._may_settle:
                self._settle()
            return  # nothing can start until something ends
        if groups is None and self._index is not None:
            self._indexed_pass(self._index, out)
            return
        if groups is None and self._line_heads is not None:
            heads = self._kept_heads()
            # each line's head as kept (a start keeps its line's next below, a preemption its
            # victims' lines': ``_preempt_for``), not fetched again. Why: a contended LAS pass
            # fetched each head it tried, that ``_kept_heads`` had just fetched (issue 34: 2.5
            # of its 7.7 ``_head`` calls per arrival)
            jobs = self._kept_jobs_of
            assert jobs is not None  # (made by ``_kept_heads``)
            fetch: Callable[[Hashable], QueuedJob | None] = jobs.__getitem__
        else:
            heads = self._ranked(list(self._groups) if groups is None else groups, free)
            jobs, fetch = None, self._head
        thin = self.preemptive and self.backfill and groups is None
        while heads:
            if not self.preemptive and self.pool.free_gpus == 0:
                break  # nothing can start until something ends
            if thin and self._searches <= 0 and self._blocked is not None:
                heads = self._thinned(heads)
                thin = False
                if not heads:
                    return
            _, _, group = heappop(heads)
            head = fetch(group)
            if (
                head is None
                or (self._blocked is not None and self._hopeless(head))  # (no, before one)
                or not self._try(head, out)
            ):
                continue  # this group is blocked for the rest of the pass
            nxt = self._head(group)
            if nxt is not None:
                if jobs is not None:
                    jobs[group] = nxt
                heappush(heads, (self.group_priority(nxt), nxt.seq, group))
        if self._may_settle:  # (asked here: a call a pass for the policies that may not)
            self._settle()

    def _settle(self) -> None:
        """After a pass of a policy that may keep it (``_may_settle``, asked by the caller): where
        every line's head now finds no room by free GPU counts alone (``NodePool.may_fit`` says no),
        keep that, with the least ``wake_level`` of their sizes, as ``_settled``. Until a head
        changes (``_enqueue``, ``_dequeue`` forget it) or a release or a node coming up leaves a
        node with that many free (``NodePool.peak``), a pass starts nothing: placement refuses each
        head (``may_fit``'s no is ``place``'s), only takes could have happened besides (which keep
        the no), and a policy that neither preempts nor backfills nor keeps DRF's index has nothing
        else a pass could change that a later decision reads (its blocked head, refused shapes and
        searches are set afresh by the next pass that tries). Why: on a contended cluster FIFO's
        head waits for a node with room, and each finish that frees too little ran a pass that tried
        it and refused it again (issue 34: about 0.55 failed tries per job, FIFO contended costing
        5,331 bytecodes per start against 2,877)."""
        pool = self.pool
        wake = 1 << 30
        for group in list(self._groups):
            head = self._head(group)
            if head is None:
                continue
            if pool.may_fit(head.gpus):
                return  # refused by more than counts (or not tried): a pass must ask again
            level = pool.wake_level(head.gpus)
            if level < wake:
                wake = level
        self._settled = (pool, wake)
        pool.peak = 0  # (only this policy reads it: ``_may_settle``) releases raise it again

    def _begin_pass(self) -> None:
        """What every pass starts from: its searches, and no refusal remembered."""
        self._searches = self.SEARCHES_PER_PASS
        self._no_room.clear()  # shapes that did not fit; valid while nothing is freed
        self._refusals_at = -1  # nodes may have failed or come back since the last pass

    def _ranked(self, groups: Iterable[Hashable], free: int) -> list[tuple[Any, int, Hashable]]:
        """The heads of ``groups`` a pass may try, as a heap of (priority, seq, line)."""
        heads: list[tuple[Any, int, Hashable]] = []
        lines = self._groups
        keyed = self._keyed
        for group in groups:
            # the common case inline (a pass visits every line): a line's first entry is live
            line = lines.get(group)
            head = line[0][3] if line else None
            if head is None or line is None or head.token != line[0][2]:
                head = self._head(group)  # drops stale entries
            # with backfill a head too big for the free GPUs is tried too: it is the blocked
            # head whose start later jobs must not delay (EASY), whatever the order of events
            if head is not None and (self.preemptive or self.backfill or head.gang.gpus <= free):
                if keyed:  # (the line's first entry holds the head's ``order_key``)
                    heads.append((line[0][0], head.seq, group))  # type: ignore[index]
                else:
                    heads.append((self.group_priority(head), head.seq, group))
        heapq.heapify(heads)
        return heads

    def _kept_heads(self) -> list[tuple[Any, int, Hashable]]:
        """``_ranked`` of every line, from the entries kept since the last full pass: only the
        lines a job joined or left since (``_touched``) are looked at again. Exact where a
        head's rank is its line's first entry (``_keyed``: static while it waits) and every
        head is ranked whatever its size (a preemptive policy). Why: a contended LAS pass
        follows nearly every finish and fetched every line's head anew, though one finish
        changes one or two lines (issue 34). With backfill, the kept lines are counted by GPU
        count too (``_kept_sizes``, for ``_thinned``), and the heap returned is remembered as
        this pass's (``_kept_list``)."""
        kept, lines = self._line_heads, self._groups
        assert kept is not None
        jobs = self._kept_jobs_of
        if jobs is None:
            jobs = self._kept_jobs_of = {}
        sizes = self._kept_sizes
        if sizes is None or not self.backfill:
            sizes = None
            for group in self._touched:
                head = self._head(group)
                if head is None:
                    kept.pop(group, None)
                    jobs.pop(group, None)
                else:
                    kept[group] = (lines[group][0][0], head.seq, group)
                    jobs[group] = head
        else:
            for group in self._touched:
                head = self._head(group)
                if head is None:
                    jobs.pop(group, None)
                    if kept.pop(group, None) is not None:
                        gpus = group[-1]  # type: ignore[index]
                        if sizes[gpus] == 1:
                            del sizes[gpus]
                        else:
                            sizes[gpus] -= 1
                else:
                    if group not in kept:
                        gpus = group[-1]  # type: ignore[index]
                        sizes[gpus] = sizes.get(gpus, 0) + 1
                    kept[group] = (lines[group][0][0], head.seq, group)
                    jobs[group] = head
        self._touched.clear()
        heads = list(kept.values())
        heapq.heapify(heads)
        if self.backfill:
            if sizes is None:  # (the first pass: counted once, then kept up as lines change)
                sizes = self._kept_sizes = {}
                for group in kept:
                    gpus = group[-1]  # type: ignore[index]
                    sizes[gpus] = sizes.get(gpus, 0) + 1
            self._kept_list = heads
        return heads

    def _thinned(self, heads: list[tuple[Any, int, Hashable]]) -> list[tuple[Any, int, Hashable]]:
        """A preemptive full pass's heads left to try once its searches are spent and its
        blocked head found, without the lines ``_hopeless`` would skip whenever reached: those
        needing more GPUs than are free or a GPU count ``_refused`` keeps refused (with
        backfill a line is of one GPU count, its key's last part). Until the pass ends free
        GPUs only fall and nothing is released (no search runs), so they stay hopeless. Why:
        on a contended cluster most lines' heads are wide gangs placement refuses, and a pass
        fetched and weighed each of them after every finish (issue 34).

        Where ``heads`` is this pass's heap of kept heads (``_kept_list``), the GPU counts
        are first weighed by kept line (``_kept_sizes``): every line in the heap was kept at
        the pass's start (a start pushes back only its own line), so where no kept count may
        start, none in the heap may, and it is not scanned; nor is a count held only by the
        blocked head's line (tried and failed, so popped for good). Why: a contended LAS pass kept
        none of its ~10 heads 9 times in 10 (each weighed: issue 34)."""
        pool = self.pool
        # (``held`` first forgets what a release since, a search's this pass too, may undo)
        parked, free = self._sizes.held(pool), pool.free_gpus
        sizes, blocked = self._kept_sizes, self._blocked
        if heads is self._kept_list and sizes is not None and blocked is not None:
            # (the blocked head's line left the heap when it failed: where it is the only kept
            # line of its GPU count, that count is in the heap no more)
            gone = blocked.gpus if sizes.get(blocked.gpus) == 1 else -1
            for g in sizes.keys() - parked.keys():
                if g <= free and g != gone:
                    break  # a kept line of a count that may start: scan the heap
            else:
                return []
        kept = [e for e in heads if (g := e[2][-1]) <= free and g not in parked]  # type: ignore[index]
        heapq.heapify(kept)
        return kept

    def _hopeless(self, head: QueuedJob) -> bool:
        """Would ``_try`` fail, changing nothing? Yes for a head that placement would refuse
        (it needs more GPUs than are free, or, for a preemptive policy, ``surely_refused``
        says so) once the pass may search no more or the victims hold too few (so no
        preemption), with the blocked head already found (so not this one). Why: on a
        contended cluster a preemptive policy's pass tried every line's head, each weighing
        backfill and quotas first (issue 34); most of those that fit by GPU count were
        refused by placement after the pass's searches were spent (167,443 of 213,415 failed
        LAS tries over the first 20,000 contended jobs)."""
        gpus, free = head.gpus, self.pool.free_gpus
        if gpus <= free and not self.preemptive:
            return False
        blocked = self._blocked
        if blocked is None or blocked.group is NOT_WAITING:
            return False
        if self.preemptive and self._searches > 0 and free + self.victim_gpus(head, False) >= gpus:
            return False  # a search may run for it
        if gpus > free:
            return True
        # (the shapes refused this pass stay refused: a pass only takes, and a search that
        # frees clears them)
        return head.gang.shape in self._no_room or self._refused(head.gang)

    def _refused(self, gang: Gang) -> bool:
        """``surely_refused``, kept by GPU count for the pass while no job starts or stops:
        only those change the pool's free GPUs per node within a pass (a failed search
        claims back what it released). Why: the bound for wide gangs (``_most_free``) was
        asked for every wide head of every pass, 11% of a contended LAS run (issue 34).
        A refusal is kept across passes too, until a release could make room
        (``SizeRefusals``: it answers as ``surely_refused`` would)."""
        gpus = gang.gpus
        if self._refusals_at != self._runs:
            self._refusals.clear()
            self._refusals_at = self._runs
        known = self._refusals.get(gpus)
        if known is None:
            known = self._refusals[gpus] = self._sizes.refused(self.pool, gpus)
        return known

    def _indexed_pass(self, index: HeadIndex, out: list[Decision]) -> None:
        """The full pass above, with heads ranked by ``index``: the same heads tried in the
        same order, but for those ``_may_start`` shows would fail, skipped by kind. As above,
        a head is tried once: the next is the first ranked after it (a line that starts a job
        is re-filed by its new share, after; its user's other lines keep their rank)."""
        for group in list(index.dirty):
            self._file_head(index, group)
        pool = self.pool
        index.unpark(pool.peak)  # the kinds a release since the last pass may have made room for
        pool.peak = 0
        if not self.backfill:
            self._plain_indexed_pass(index, out)
            return
        self._backfill_indexed_pass(index, out)
        index.restore()

    def _backfill_indexed_pass(self, index: HeadIndex, out: list[Decision]) -> None:
        """``_indexed_pass`` with backfill. Until a head blocks, each head in rank order is
        tried whatever its kind, so the blocked head may be a parked kind's: the first parked
        head after the last tried, where it ranks before ``best``'s answer (not only at the
        pass's first try: a head that starts leaves none blocked).

        Where ``best`` finds nothing and that head is a parked kind's, the pass is asleep
        (``_block_asleep``): it blocks and nothing after it may start."""
        tried = None
        while self.pool.free_gpus > 0:
            entry = index.best(self._may_start(), tried)
            asleep = False
            if self._blocked is None and index.parked():
                first = index.first_parked()
                if (
                    first is not None
                    and (tried is None or first > tried)
                    and (entry is None or first < entry)
                ):
                    asleep, entry = entry is None, first
            if entry is None:
                break
            group = entry[3]
            head = self._head(group)
            if head is None:
                self._file_head(index, group)
                continue
            tried = entry
            if asleep and self.SKIP_SETTLED_PASSES:
                self._block_asleep(head, out)
                return
            if self._try(head, out):
                self._file_head(index, group)  # its next head, ranked by its new share

    def _block_asleep(self, head: QueuedJob, out: list[Decision]) -> None:
        """``_try`` of the first parked head where ``best`` found no head in any kind not
        parked, and what the rest of the pass would do: nothing. Placement refuses it by free
        counts (its kind is parked: ``may_fit`` says no until a release reaches the kind's
        wake level, and ``unpark`` has just been given every release since), so ``_try``
        would block it (no head has yet, nor may it jump one: ``_may_jump``) without asking
        ``may_fit``; then ``best`` finds nothing again (a failed try files nothing and frees
        nothing) and the parked heads are not looked at once a head blocks. Why: most passes
        of a contended DRF run with backfill follow a finish that freed too little for any
        waiting kind (4,143 of 5,357 over the first 14,000 jobs), and each asked ``may_fit``
        for that head, built the pass's ``_may_start`` against it and asked ``best`` again."""
        allowed, opp = self.admit(head)
        if allowed:  # (else ``_try`` refuses it, blocking nothing: so here)
            self._start_or_search(head, None, opp, out)

    def _plain_indexed_pass(self, index: HeadIndex, out: list[Decision]) -> None:
        """``_indexed_pass`` without backfill: its ``_may_start`` reads nothing a start changes
        (its set of shapes found no room is the pass's own, filled in place), so it is made
        once a pass, not at every try; and a head ``best`` found may start has passed
        ``may_fit`` against the pool as ``_try`` finds it, so ``_try`` does not ask again.
        Why: both were paid at every start of a contended DRF run (issue 34)."""
        may_start, pool, tried = self._may_start(), self.pool, None
        while pool.free_gpus > 0:
            entry = index.best(may_start, tried)
            if entry is None:
                break
            group = entry[3]
            head = self._head(group)
            if head is None:
                self._file_head(index, group)
                continue
            tried = entry
            if self._try(head, out, fits=True):
                self._file_head(index, group)  # its next head, ranked by its new share
        if pool.free_gpus > 0 and self.SKIP_SETTLED_PASSES:
            # ``best`` found nothing: where that is because every kind holding a head is
            # parked, no pass finds anything until a release reaches the least level parked
            # (``HeadIndex.asleep``), or a head changes (``_enqueue``, ``_dequeue`` forget it);
            # kept as ``_settled``, as ``_settle`` keeps FIFO's. A stop's lower share re-ranks
            # its user's line (``dirty``) without changing its kind, parked: filed at the next
            # pass made. Why: most passes of a contended DRF run, after a finish that freed too
            # little for any waiting kind, met only parked kinds (issue 34).
            wake = index.asleep()
            if wake is not None:
                self._settled = (pool, wake)
        index.restore()

    def _may_start(self) -> MayStart:
        """Which of the index's heads ``_try`` could start now, by kind and rank: not those
        needing more GPUs than are free or than any node (or, wider than a node, the nodes
        it may take) has free (``may_fit``: placement's first tests, without trying), or of a
        shape found no room this pass (starts only take resources: not again this pass),
        nor, past the blocked head, those ranked after it whose GPU count and limit may not
        jump it (their priority only rises in a pass).
        With backfill and no blocked head yet the first head is tried whatever its size, to
        block or start (one verdict for all, made once: ``_any_may_start``)."""
        blocked = self._blocked
        if self.backfill and blocked is None:
            return _any_may_start
        free, no_room, now = self.pool.free_gpus, self._no_room, self._now
        pool = self.pool
        fits = pool.may_fit
        if not self.backfill:
            # no room by free counts: parked until a release could make room (a pass need not
            # ask again about each kind it refused at the last)
            def may_start_now(kind: Kind, gpus: int, key: Any) -> int:
                if kind[0] in no_room:
                    return NOT_THIS_PASS
                return START if fits(gpus) else PARK + pool.wake_level(gpus)

            return may_start_now
        assert blocked is not None  # (with backfill: above)
        bar, need = self.group_priority(blocked), blocked.gpus
        reserved = self._reserved(blocked)

        def may_start(kind: Kind, gpus: int, key: Any) -> int:
            shape, limit = kind
            if gpus > free or shape in no_room:
                return NOT_THIS_PASS
            if not fits(gpus):  # parked, as above (tries before a head blocks see parked kinds)
                return PARK + pool.wake_level(gpus)
            if key < bar or may_jump_by(now, gpus, limit, need, reserved):
                return START
            return LATER

        return may_start

    def _file_head(self, index: HeadIndex, group: Hashable) -> None:
        head = self._head(group)
        if head is None:
            index.file(group, None, 0, None, 0)
        else:
            limit = head.spec.time_limit if self.backfill else None
            key = self.group_priority(head)
            index.file(group, (head.gang.shape, limit), head.gang.gpus, key, head.seq)

    def _try(self, job: QueuedJob, out: list[Decision], fits: bool = False) -> bool:
        """Start ``job`` if it may start now (``fits``: the caller saw ``may_fit`` pass for it
        on the pool as it is, so it is not asked again)."""
        if self._admits_all:
            opp = False
        else:
            allowed, opp = self.admit(job)
            if not allowed:
                return False
        if self.per_vc and not self._room_in_vc(job):
            return False
        if self.backfill and self._limited and not self._may_jump(job):
            return False  # (no running job declared a limit: any job may jump, ``_may_jump``)
        if self.per_vc and self._over_quota(job):
            return self._start_or_search(job, None, opp, out)  # (its VC must give back first)
        shape = job.gang.shape
        # (``may_fit``: placement's own first tests, without its search: before a preemption
        # search, most tries on a contended cluster failed there; ``_ask_fit`` says where)
        if shape not in self._no_room and (
            fits or not self._ask_fit or self.pool.may_fit(job.gpus)
        ):
            # (not ``_refused`` first: a preemptive policy asks ``may_fit`` here, and
            # ``_refused`` is its no, kept; where it would say no, placement refuses too,
            # changing nothing. A contended LAS pass asked both for each head it tried.)
            tasks = self.pool.place(job.job_id, job.gang)
            if tasks is not None:  # (``_start_or_search``'s start, without its call)
                out.append(self._start(job, tasks, opp))
                return True
            self._no_room.add(shape)  # the same gang will not fit either this pass
        return self._start_or_search(job, None, opp, out)

    def _start_or_search(
        self,
        job: QueuedJob,
        tasks: tuple[TaskPlacement, ...] | None,
        opp: bool,
        out: list[Decision],
    ) -> bool:
        """Start the job on ``tasks``; without them (placement refused it), on what a
        preemption search frees, or else make it the pass's blocked head if none is yet."""
        if tasks is None:
            tasks = self._preempt_for(job, opp, out)
            if tasks is None:
                if self._blocked is None or self._blocked.group is NOT_WAITING:
                    self._blocked = job
                return False
        out.append(self._start(job, tasks, opp))
        return True

    def _may_jump(self, job: QueuedJob) -> bool:
        """EASY backfill (``backfill.py``): past the blocked head only if the job's limit ends
        before the head could start, or it fits beside the head then."""
        head = self._blocked
        if head is None or head is job or not self._limited or head.group is NOT_WAITING:
            return True  # (no running job declared a limit: nothing is reserved, ``_reserved``)
        if self.group_priority(job) < self.group_priority(head):
            return True  # ahead of the head in the policy's order: not a jump
        reserved = self._reserved(head)
        return may_jump_by(self._now, job.gpus, job.spec.time_limit, head.gpus, reserved)

    def _reserved(self, head: QueuedJob) -> tuple[float, int] | None:
        """The blocked head's ``shadow``, kept while the running jobs and free GPUs stay (a
        pass of DRF with backfill asks it for every user's line: each walk of the running jobs
        cost as much as the rest of the pass); None without a walk while no running job
        declared a limit (as ``shadow`` would find)."""
        if not self._limited:
            return None
        key = (head.gpus, self.pool.free_gpus, self._runs)
        if self._shadow is None or self._shadow[0] != key:
            placed = (self._jobs[i] for i in self.pool._jobs if i in self._jobs)  # running ones
            running = [
                (j.gpus, j.started + j.spec.time_limit if j.spec.time_limit else None)
                for j in placed
            ]
            self._shadow = (key, shadow(head.gpus, self.pool.free_gpus, running))
        return self._shadow[1]

    def _over_quota(self, job: QueuedJob) -> int:
        """Per-VC mode: GPUs the VC must give back before the job may start (else 0)."""
        if not self.per_vc:
            return 0
        return max(0, self.vc_used.get(job.vc, 0) + job.gpus - self.vc_gpus.get(job.vc, 0))

    def _room_in_vc(self, job: QueuedJob) -> bool:
        """Per-VC mode: within quota now, or (preemptive policies) once the VC's own victims
        are gone (``victims`` yields only the VC's jobs then)."""
        if self.within_quota(job):
            return True
        if not self.preemptive:
            return False
        held = sum(v.gpus for v in self.victims(job, False))
        return self.vc_used.get(job.vc, 0) - held + job.gpus <= self.vc_gpus.get(job.vc, 0)

    def _preempt_for(
        self, job: QueuedJob, opp: bool, out: list[Decision]
    ) -> tuple[TaskPlacement, ...] | None:
        """Free GPUs by preempting ``victims`` in their order until the job fits; else undo
        (a search that ``_fails_on_paper`` shows would fail is not made).

        Bounded: nothing is tried unless the victims hold enough GPUs by count, and the search
        stops once the released GPUs exceed the need by a node's worth twice over (the rest
        are spread too thin to help a consolidated gang)."""
        if not self.preemptive or self.pool.free_gpus + self.victim_gpus(job, opp) < job.gpus:
            return None
        if self._searches <= 0:
            return None  # this pass has searched enough; the next event tries again
        self._searches -= 1
        if self._fails_on_paper(job, opp):
            return None
        released: list[tuple[QueuedJob, tuple[TaskPlacement, ...]]] = []
        freed = self.pool.free_gpus
        limit = job.gpus + 2 * self.pool.max_node_gpus
        tasks = None
        over = self._over_quota(job)  # per-VC mode: the VC's own jobs must give these back
        vc_freed = 0
        for victim in self.victims(job, opp):
            released.append((victim, self.pool.placement(victim.job_id)))
            self.pool.release(victim.job_id)
            freed += victim.gpus
            vc_freed += victim.gpus if victim.vc == job.vc else 0
            if freed >= job.gpus and vc_freed >= over:
                tasks = self.pool.place(job.job_id, job.gang)
                if tasks is not None or freed >= limit:
                    break
        if tasks is None:
            for victim, held in released:
                self.pool.claim(victim.job_id, held, victim.gang)
            return None
        self._no_room.clear()  # the cluster changed
        spare = vc_freed - over
        for victim, held in released:
            own = victim.vc == job.vc and over > 0
            if (not own or victim.gpus <= spare) and self.pool.claim(
                victim.job_id, held, victim.gang
            ):
                spare -= victim.gpus if own else 0
                continue  # its GPUs were not needed after all: it keeps running
            self._stop(victim, release=False)  # its GPUs went to ``job``
            self._enqueue(victim)
            jobs = self._kept_jobs_of
            if jobs is not None:  # its line's head now, for the pass's loop (it may head it)
                head = self._head(victim.group)
                if head is not None:  # (it is: the victim just joined it)
                    jobs[victim.group] = head
            out.append(Preempt(victim.job_id, by=job.job_id, reason=self.preempt_reason(victim)))
        return tasks

    def _fails_on_paper(self, job: QueuedJob, opp: bool) -> bool:
        """Would ``_preempt_for``'s search fail? Walks the victims as it does, counting what
        each would free (``ReleaseProbe``) instead of releasing it; True only where every
        placement the search asks for would be refused, and then the pool is left as the
        search's release and undo would leave it (``undo_order``). Why: nearly every search
        on a contended cluster fails, and its releases and claims back were most of a
        contended LAS run (issue 34)."""
        probe = ReleaseProbe(self.pool, job.gang)
        released: list[str] = []
        freed = self.pool.free_gpus
        limit = job.gpus + 2 * self.pool.max_node_gpus
        over = self._over_quota(job)
        vc_freed = 0
        for victim in self.victims(job, opp):
            released.append(victim.job_id)
            probe.release(victim.job_id)
            freed += victim.gpus
            vc_freed += victim.gpus if victim.vc == job.vc else 0
            if freed >= job.gpus and vc_freed >= over:
                if probe.may_fit():
                    return False  # the search may succeed: make it
                if freed >= limit:
                    break
        undo_order(self.pool, released)
        return True


def _any_may_start(kind: Kind, gpus: int, key: Any) -> int:
    """``_may_start`` with backfill before a head blocks: every head, whatever its kind."""
    return START
