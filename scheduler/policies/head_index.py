"""The heads of a queue policy's waiting lines, kept ranked between passes, by kind of head.

Why: DRF keeps a line per user (with backfill, per user and GPU count), and a scheduling pass
used to rank every line's head afresh, so on a long contended queue each pass cost the number
of waiting lines, not the starts it made. Here each head stays filed under its kind in a heap
ordered as the pass orders heads (``group_priority``, then submission order); only lines whose
head or priority changed since (``touch``) are re-filed, at the start of the next pass.

By kind because whether a head may start in a pass depends, apart from its rank, only on its
kind: its gang shape (too many GPUs for those free, or placement found no room) and, with
backfill, its declared time limit (may it jump the blocked head?). So a pass asks ``best`` for
the first head among kinds that may still start, and skips the others' heaps whole: it costs
the kinds (a few dozen job sizes, times the distinct time limits with backfill) per head it
tries, each a start or a kind that fails from then on, plus a log of the heads per start.
(With backfill a head ranked before the blocked one may jump it whatever its kind; one whose
user's share rose in the pass may fail then, and is passed over alone.)

A pass tries heads in rank order and never returns to one it passed: ``best`` takes the entry
the pass tried last and sets aside whatever ranks before it until the pass ends (``restore``).

Stale entries (a line re-filed, emptied or gone) are told apart by a version per line, unique
across lines, and dropped when they reach a heap's top, or all at once when they outnumber the
live ones (so a long replay does not keep them).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from typing import Any

Shape = tuple[tuple[int, float, int, int], ...]
Kind = tuple[Shape, float | None]  # (gang shape, time limit or None)
Entry = tuple[Any, int, int, Hashable]  # (group priority, head's seq, version, line)
#: May a head of this kind, GPU count and group priority start now? False must mean that
#: every head of the kind ranked at or after that priority would fail if tried now.
MayStart = Callable[[Kind, int, Any], bool]


class HeadIndex:
    """Each line's head filed under its kind; lines to re-file; the stale entries' count."""

    def __init__(self) -> None:
        self._heaps: dict[Kind, tuple[int, list[Entry]]] = {}  # kind -> (its GPUs, heap)
        self._version: dict[Hashable, int] = {}  # the live entry's version per filed line
        self._next = 0
        self._entries = 0  # entries in the heaps, live or stale
        self._aside: list[tuple[Kind, int, Entry]] = []  # passed over in this pass
        self.dirty: set[Hashable] = set()

    def touch(self, group: Hashable) -> None:
        """The line's head or its priority may have changed: re-file it before the next pass."""
        self.dirty.add(group)

    def file(self, group: Hashable, kind: Kind | None, gpus: int, key: Any, seq: int) -> None:
        """(Re-)file the line's head (``kind`` None: the line is empty), ranked by ``key``."""
        self.dirty.discard(group)
        if kind is None:
            self._version.pop(group, None)
            return
        self._next += 1
        self._version[group] = self._next
        slot = self._heaps.get(kind)
        if slot is None:
            slot = self._heaps[kind] = (gpus, [])
        heapq.heappush(slot[1], (key, seq, self._next, group))
        self._entries += 1
        if self._entries > 2 * len(self._version) + 64:
            self._compact()

    def best(self, may_start: MayStart, after: Entry | None = None) -> Entry | None:
        """The first-ranked live entry after ``after`` among kinds whose heads ``may_start``
        (its entry stays: a start re-files the line, a failure is ``after`` next time)."""
        top: Entry | None = None
        version = self._version
        for kind, (gpus, heap) in self._heaps.items():
            while heap:
                first = heap[0]
                if version.get(first[3]) != first[2]:
                    heapq.heappop(heap)  # stale
                    self._entries -= 1
                elif not may_start(kind, gpus, first[0]):
                    break  # neither it nor any head ranked after it
                elif after is not None and first <= after:
                    self._aside.append((kind, gpus, heapq.heappop(heap)))  # passed over
                    self._entries -= 1
                else:
                    if top is None or first < top:
                        top = first
                    break
        return top

    def restore(self) -> None:
        """The pass is over: file again the live entries it passed over."""
        version = self._version
        for kind, gpus, entry in self._aside:
            if version.get(entry[3]) == entry[2]:
                heapq.heappush(self._heaps.setdefault(kind, (gpus, []))[1], entry)
                self._entries += 1
        self._aside.clear()

    def _compact(self) -> None:
        version = self._version
        for kind, (gpus, heap) in list(self._heaps.items()):
            live = [e for e in heap if version.get(e[3]) == e[2]]
            if live:
                heapq.heapify(live)
                self._heaps[kind] = (gpus, live)
            else:
                del self._heaps[kind]
        self._entries = sum(len(heap) for _, heap in self._heaps.values())
