"""The heads of a queue policy's waiting lines, kept ranked between passes, by gang shape.

Why: DRF keeps a line per user, and a scheduling pass used to rank every line's head afresh,
so on a long contended queue each pass cost the number of waiting users, not the starts it
made. Here each head stays filed under its gang shape in a heap ordered as the pass orders
heads (``group_priority``, then submission order); only lines whose head or priority changed
since (``touch``) are re-filed, at the start of the next pass.

By shape because in a pass of a non-preemptive policy without backfill or per-VC quotas a head
fails only when its shape does not fit (too many GPUs for those free, or placement found no
room, ``_no_room``), and then every head of that shape fails for the rest of the pass (starts
only take resources). So a pass skips a dead shape's whole heap, and costs the shapes (a few
dozen job sizes) plus its starts, each a log of the heads.

Stale entries (a line re-filed, emptied or gone) are told apart by a version per line, unique
across lines, and dropped when they reach a heap's top, or all at once when they outnumber the
live ones (so a long replay does not keep them).
"""

from __future__ import annotations

import heapq
from collections.abc import Container, Hashable
from typing import Any

Shape = tuple[tuple[int, float, int, int], ...]
Entry = tuple[Any, int, int, Hashable]  # (group priority, head's seq, version, line)


class HeadIndex:
    """Each line's head filed under its shape; lines to re-file; the stale entries' count."""

    def __init__(self) -> None:
        self._heaps: dict[Shape, tuple[int, list[Entry]]] = {}  # shape -> (its GPUs, heap)
        self._version: dict[Hashable, int] = {}  # the live entry's version per filed line
        self._next = 0
        self._entries = 0
        self.dirty: set[Hashable] = set()

    def touch(self, group: Hashable) -> None:
        """The line's head or its priority may have changed: re-file it before the next pass."""
        self.dirty.add(group)

    def file(self, group: Hashable, shape: Shape | None, gpus: int, key: Any, seq: int) -> None:
        """(Re-)file the line's head (``shape`` None: the line is empty), ranked by ``key``."""
        self.dirty.discard(group)
        if shape is None:
            self._version.pop(group, None)
            return
        self._next += 1
        self._version[group] = self._next
        slot = self._heaps.get(shape)
        if slot is None:
            slot = self._heaps[shape] = (gpus, [])
        heapq.heappush(slot[1], (key, seq, self._next, group))
        self._entries += 1
        if self._entries > 2 * len(self._version) + 64:
            self._compact()

    def best(self, free: int, dead: Container[Shape]) -> Hashable | None:
        """The line whose head ranks first among shapes of at most ``free`` GPUs not in
        ``dead`` (its entry stays: a start re-files the line, a failure kills the shape)."""
        top: Entry | None = None
        version = self._version
        for shape, (gpus, heap) in self._heaps.items():
            if gpus > free or shape in dead:
                continue
            while heap and version.get(heap[0][3]) != heap[0][2]:
                heapq.heappop(heap)  # stale
                self._entries -= 1
            if heap and (top is None or heap[0] < top):
                top = heap[0]
        return None if top is None else top[3]

    def _compact(self) -> None:
        version = self._version
        for shape, (gpus, heap) in list(self._heaps.items()):
            live = [e for e in heap if version.get(e[3]) == e[2]]
            if live:
                heapq.heapify(live)
                self._heaps[shape] = (gpus, live)
            else:
                del self._heaps[shape]
        self._entries = sum(len(heap) for _, heap in self._heaps.values())
