"""The heads of a queue policy's waiting lines, kept ranked between passes, by kind of head.

Why: DRF keeps a line per user (with backfill, per user and GPU count), and a scheduling pass
used to rank every line's head afresh, so on a long contended queue each pass cost the number
of waiting lines, not the starts it made. Here each head stays filed under its kind in a heap
ordered as the pass orders heads (``group_priority``, then submission order); only lines whose
head or priority changed since (``touch``) are re-filed, at the start of the next pass.

By kind because whether a head may start in a pass depends, apart from its rank, only on its
kind: its gang shape (too many GPUs for those free, or placement found no room) and, with
backfill, its declared time limit (may it jump the blocked head?). So a pass asks ``best`` for
the first head among kinds that may still start, and skips the others' heaps whole. The kinds
themselves are ranked by their first heads (``_tops``), and a kind too big for the GPUs still
free, one no node has room for (``NodePool.may_fit``), or of a shape found no room, is set
aside until the pass ends (starts only take
resources): a call costs the kinds ranked before its answer that may not start, each met once
per pass (with backfill, those that may not jump the blocked head, once per call), plus a log
of the kinds and of the heads per start.
(With backfill a head ranked before the blocked one may jump it whatever its kind; one whose
user's share rose in the pass may fail then, and is passed over alone.)

A kind that no node has room for by free GPU counts (``NodePool.may_fit``) is parked instead,
not only for the pass but until a release leaves some node with enough free GPUs that it might
fit (``unpark`` with ``NodePool.peak``; ``wake_level``): on a contended cluster a finish frees
a GPU or two on one node, and each pass asked again about every wide gang it had refused.
With backfill, a pass looks for the first head of the parked kinds too (until a head blocks,
each head is tried whatever its kind): their firsts are ranked in a heap of their own
(``first_parked``), not walked kind by kind at every try.

A pass tries heads in rank order and never returns to one it passed: ``best`` takes the entry
the pass tried last and sets aside whatever ranks before it until the pass ends (``restore``).

Stale entries (a line re-filed, emptied or gone) are told apart by a version per line, unique
across lines, and dropped when they reach a heap's top, or all at once when they outnumber the
live ones (so a long replay does not keep them). Each filed line's live entry is kept itself
(``filed``), so an entry is live where it *is* its line's: one dict a line, where a version per
line and a key per line were two, and one store a filing, where they were two (issue 34).

Keys that rose, re-filed when met (``lazy``, ``rekey``). A line whose rank may have *risen*
(DRF: its user started a job, so its share grew) need not be re-filed at once: its entry ranks
it too early, never too late, so it is met at its kind's top no later than its true rank, and
is re-filed then with its current key (``rekey``) before anything reads that key. Why: with
backfill DRF keeps a line per user and GPU count, and re-filing every line of a user at each
start and stop grew with the backlog (issue 34: 8 re-files per job at 200k contended jobs,
a quarter of the run). A line whose rank fell below the key it is filed at (``filed``) must
still be re-filed before the next pass (``touch``): an entry ranked too late would be met
too late.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from typing import Any

Shape = tuple[tuple[int, float, int, int], ...]
Kind = tuple[Shape, float | None]  # (gang shape, time limit or None)
#: (group priority, head's seq, version, line). Of any length to mypy, so that mypyc keeps
#: each entry one Python tuple: a fixed-length tuple type is unboxed there and boxed anew
#: wherever it is stored or passed, and an entry is live where it *is* its line's (``filed``).
Entry = tuple[Any, ...]

#: ``MayStart``'s verdicts on a kind's first head: it may start; it may not now (ask again at
#: the next call); neither it nor any head of the kind may start again in this pass; and
#: ``PARK + level``: not in this pass nor after it, until ``unpark`` is given a level at least
#: that (the caller's measure of what was freed since: ``NodePool.peak``).
START, LATER, NOT_THIS_PASS, PARK = 0, 1, 2, 3
#: Passes between two checks for stale entries to drop (``restore``): so many passes' pushes
#: at most are kept beyond the bound of twice the live ones.
TIDY_EVERY = 16
#: May a head of this kind, GPU count and group priority start now? Other than ``START`` must
#: mean that every head of the kind ranked at or after that priority would fail if tried now;
#: ``NOT_THIS_PASS``, that they would fail whenever tried until the pass ends (``restore``).
MayStart = Callable[[Kind, int, Any], int]


class HeadIndex:
    """Each line's head filed under its kind; each kind's first head ranked in ``_tops``; lines
    to re-file; the stale entries' count.

    ``_tops`` holds (a kind's first entry, the kind), pushed whenever an entry becomes a kind's
    first: ``best`` meets the kinds in rank order and stops at the first whose head may start,
    so a call costs the kinds ranked before the answer that may not start now, not all kinds
    (``best`` visiting every kind's heap was a fifth of a contended DRF run: issue 34). An
    entry there whose kind's first is another by now is stale, dropped when met (or all at
    once when they outnumber the kinds)."""

    def __init__(self) -> None:
        self._heaps: dict[Kind, tuple[int, list[Entry]]] = {}  # kind -> (its GPUs, heap)
        self._tops: list[tuple[Entry, Kind]] = []
        self._off: set[Kind] = set()  # kinds that may not start again in this pass
        self._parked: dict[Kind, int] = {}  # kinds that may not start until freed: level
        # the parked kinds' firsts, ranked as ``_tops`` ranks all kinds' (``first_parked``),
        # kept only once asked for (backfill's passes ask; DRF's alone never do)
        self._parked_tops: list[tuple[Entry, Kind]] = []
        self._ranking_parked = False
        self._low = 1 << 30  # the lowest level parked
        self._next = 0
        self._entries = 0  # entries in the heaps, live or stale
        self._aside: list[tuple[Kind, int, Entry]] = []  # passed over in this pass
        self._tidy_in = TIDY_EVERY  # passes until stale entries are counted (``restore``)
        self.dirty: set[Hashable] = set()
        # ``touch(line)``: the line's head or its priority may have changed: re-file it before
        # the next pass. Bound to ``dirty``'s own ``add`` (never replaced), so a join or leave
        # that touches a line runs no Python frame (one was 9 bytecodes per job of a
        # contended DRF run, 18 with backfill: issue 34).
        #
        # A job that joins or leaves a line touches it only where it heads the line (its entry
        # is the line heap's first): else the head, and its key, stay as filed. Why: on a
        # contended queue most jobs join a user's line behind its head, and each touch re-filed
        # the same head (issue 34: a third of a DRF pass's filings). Exact because a line whose
        # heap's first entry is stale is touched already: an entry goes stale when its job
        # leaves, which touches the line if it was first then, and one that was not first
        # becomes first only once the entries before it are dropped, which leaving first did.
        self.touch: Callable[[Hashable], None] = self.dirty.add
        # lines whose filed key may be below their key now, and the key now of such a line
        # (given the line and its entry): re-filed when met at their kind's top (see above)
        self.lazy: set[Hashable] = set()
        self.rekey: Callable[[Hashable, Entry], Any] | None = None
        # each filed line's live entry (its key first): an entry is live where it is this one
        self.filed: dict[Hashable, Entry] = {}

    def file(self, group: Hashable, kind: Kind | None, gpus: int, key: Any, seq: int) -> None:
        """(Re-)file the line's head (``kind`` None: the line is empty), ranked by ``key``."""
        self.dirty.discard(group)
        if self.lazy:
            self.lazy.discard(group)
        if kind is None:
            self.filed.pop(group, None)
            return
        version = self._next = self._next + 1
        # (one tuple, filed and pushed: ``is`` tells it live. Not a chained assignment: mypyc
        # boxes a fixed-length tuple anew for each target)
        entry: Entry = (key, seq, version, group)
        self.filed[group] = entry
        self._push(kind, gpus, entry)

    def _push(self, kind: Kind, gpus: int, entry: Entry) -> None:
        slot = self._heaps.get(kind)
        if slot is None:
            slot = self._heaps[kind] = (gpus, [])
        heap = slot[1]
        heapq.heappush(heap, entry)
        self._entries += 1
        if heap[0] is entry:  # the kind's new first
            heapq.heappush(self._tops, (entry, kind))
            if self._ranking_parked and kind in self._parked:
                heapq.heappush(self._parked_tops, (entry, kind))

    def best(self, may_start: MayStart, after: Entry | None = None) -> Entry | None:
        """The first-ranked live entry after ``after`` among kinds whose heads ``may_start``
        (its entry stays: a start re-files the line, a failure is ``after`` next time)."""
        tops = self._tops
        if not tops:
            return None  # (with backfill, most calls once a head blocks: all kinds set aside)
        # (only ``tops`` and ``heaps`` kept in locals: the rest is read about once a call, and
        # each local costs more to set than it saves; with backfill a call meets one kind or
        # none, and the setting was a third of its cost: issue 34)
        heaps = self._heaps
        later: list[tuple[Entry, Kind]] = []  # kinds that may not start now, asked next time
        found: Entry | None = None
        while tops:
            first, kind = tops[0]
            gpus, heap = heaps[kind]  # (a kind ranked has a heap: ``_compact`` ranks afresh)
            if not heap or heap[0] is not first or kind in self._off or kind in self._parked:
                heapq.heappop(tops)  # stale: the kind's first changed, or it is off
                continue
            if self.filed.get(first[3]) is not first:
                heapq.heappop(heap)  # stale
                self._entries -= 1
                self._next_first(kind, heap)
                continue
            if self.lazy and first[3] in self.lazy and self._rekeyed(heap, first):
                heapq.heapreplace(tops, (heap[0], kind))  # ranked later now: look again
                continue
            verdict = may_start(kind, gpus, first[0])
            if verdict == START:  # (the answer, mostly: asked first)
                if after is None or first > after:
                    found = first
                    break
                self._aside.append((kind, gpus, heapq.heappop(heap)))  # passed over
                self._entries -= 1
                self._next_first(kind, heap)
            elif verdict == NOT_THIS_PASS:
                heapq.heappop(tops)
                self._off.add(kind)
            elif verdict >= PARK:
                heapq.heappop(tops)
                parked = self._parked
                level = parked[kind] = verdict - PARK
                if level < self._low:
                    self._low = level
                if self._ranking_parked:
                    heapq.heappush(self._parked_tops, (first, kind))
                    if len(self._parked_tops) > 2 * len(parked) + 64:
                        self._rank_parked()  # its stale entries gone, as ``file`` does ``_tops``'
            else:
                later.append(heapq.heappop(tops))
        if later:
            for item in later:
                heapq.heappush(tops, item)
        return found

    def _rekeyed(self, heap: list[Entry], first: Entry) -> bool:
        """``first``, a ``lazy`` line's entry atop its kind's heap, re-filed with its key now
        (a new version); False where its key is unchanged (it stays, no longer lazy)."""
        group = first[3]
        self.lazy.discard(group)
        assert self.rekey is not None, "lazy lines need a rekey"
        key = self.rekey(group, first)
        if key == first[0]:
            return False
        self._next += 1
        entry: Entry = (key, first[1], self._next, group)  # (one tuple, as in ``file``)
        self.filed[group] = entry
        heapq.heapreplace(heap, entry)
        return True

    def _next_first(self, kind: Kind, heap: list[Entry]) -> None:
        """``_tops[0]`` was the kind's first, just popped off its heap: rank its next."""
        if heap:
            heapq.heapreplace(self._tops, (heap[0], kind))
        else:
            heapq.heappop(self._tops)

    def restore(self) -> None:
        """The pass is over: file again the live entries it passed over, rank again the kinds
        it set aside (most passes of DRF without backfill set none aside: tested first)."""
        if self._aside:
            filed = self.filed
            for kind, gpus, entry in self._aside:
                if filed.get(entry[3]) is entry:
                    self._push(kind, gpus, entry)
            self._aside.clear()
        if self._off:
            heaps, tops = self._heaps, self._tops
            for kind in self._off:
                slot = heaps.get(kind)
                if slot is not None and slot[1]:
                    heapq.heappush(tops, (slot[1][0], kind))
            self._off.clear()
        # the stale entries dropped all at once when they outnumber the live ones: checked
        # once in ``TIDY_EVERY`` passes, not at every ``file`` nor every pass (answers do not
        # depend on the heaps' layout: each entry's version makes it unique)
        self._tidy_in -= 1
        if not self._tidy_in:
            self._tidy_in = TIDY_EVERY
            if self._entries > 2 * len(self.filed) + 64:
                self._compact()
            elif len(self._tops) > 2 * len(self._heaps) + 64:
                self._rank_kinds()

    def unpark(self, level: int) -> None:
        """Rank again each parked kind whose level is at most ``level`` (called before a
        pass; nothing to do, at the cost of one comparison, while ``level`` is below all)."""
        if level < self._low:
            return
        heaps, tops, low = self._heaps, self._tops, 1 << 30
        for kind, parked_at in list(self._parked.items()):
            if parked_at > level:
                low = min(low, parked_at)
                continue
            del self._parked[kind]
            slot = heaps.get(kind)
            if slot is not None and slot[1]:
                heapq.heappush(tops, (slot[1][0], kind))
        self._low = low

    def asleep(self) -> int | None:
        """Called where a pass's last ``best`` found nothing, before ``restore``: the least
        level a release must reach (``unpark``) before ``best`` could find a head, where every
        kind holding a live head is parked (None where a kind was set aside for this pass
        only, or lines wait to be re-filed: a later pass may find a head without a release)."""
        if self._off or self._aside or self.dirty or self.lazy:
            return None
        return self._low

    def asleep_past(self) -> int | None:
        """``asleep`` where lazy lines may wait (with backfill): called where a pass blocked
        its first parked head (``first_parked``) and ``best`` found no head in any kind not
        parked, before ``restore``. A lazy line is filed no later than its rank and after
        that head (the least of the parked kinds' firsts): re-filed when met, it only moves
        later, so it cannot come before the head. None where a kind was set aside for this
        pass only or lines wait to be re-filed (a later pass may rank another head first)."""
        if self._off or self._aside or self.dirty:
            return None
        return self._low

    def parked(self) -> bool:
        return bool(self._parked)

    def first_parked(self) -> Entry | None:
        """The first-ranked live entry of the parked kinds (with backfill a pass tries its
        first head whatever its kind, to find the blocked one: a parked kind's, if first).

        From ``_parked_tops``, a heap of the parked kinds' firsts pushed when a kind is parked
        or gets a new first while parked: O(log k) a call, where walking every parked kind
        was, with backfill, the largest single cost of a contended DRF run's tries (issue 34:
        225 bytecodes per job). An entry there is stale, and dropped when met, once its kind
        is no longer parked or has another first; a stale first of a parked kind's own heap is
        dropped then too, and the kind's next first ranked."""
        if not self._ranking_parked:
            self._ranking_parked = True
            self._rank_parked()
        tops, parked, heaps, filed = self._parked_tops, self._parked, self._heaps, self.filed
        while tops:
            first, kind = tops[0]
            slot = heaps.get(kind)
            if kind not in parked or slot is None or not slot[1] or slot[1][0] is not first:
                heapq.heappop(tops)  # stale: unparked, or the kind's first changed
                continue
            heap = slot[1]
            if filed.get(first[3]) is first:
                if self.lazy and first[3] in self.lazy and self._rekeyed(heap, first):
                    heapq.heapreplace(tops, (heap[0], kind))  # ranked later now: look again
                    continue
                return first
            heapq.heappop(heap)  # a stale first of the kind's own heap
            self._entries -= 1
            if heap:
                heapq.heapreplace(tops, (heap[0], kind))
            else:
                heapq.heappop(tops)
        return None

    def _compact(self) -> None:
        filed = self.filed
        for kind, (gpus, heap) in list(self._heaps.items()):
            live = [e for e in heap if filed.get(e[3]) is e]
            if live:
                heapq.heapify(live)
                self._heaps[kind] = (gpus, live)
            else:
                del self._heaps[kind]
        self._entries = sum(len(heap) for _, heap in self._heaps.values())
        self._rank_kinds()

    def _rank_kinds(self) -> None:
        """``_tops`` afresh: each kind's first, once (the stale entries gone); the same for
        ``_parked_tops``."""
        self._tops = [(heap[0], kind) for kind, (_, heap) in self._heaps.items() if heap]
        heapq.heapify(self._tops)
        if self._ranking_parked:
            self._rank_parked()

    def _rank_parked(self) -> None:
        heaps = self._heaps
        self._parked_tops = [
            (heaps[kind][1][0], kind) for kind in self._parked if kind in heaps and heaps[kind][1]
        ]
        heapq.heapify(self._parked_tops)
