"""The gang sizes placement refuses by free GPU counts, kept across passes until a release
could make room for them.

Why: a preemptive queue policy's pass (Capacity, LAS) asks, for each line's head that fits
by GPU count once no preemption search may run for it, whether placement would refuse it
(``QueuedPass._refused``, ``NodePool.may_fit``'s tests). The answers were kept for one pass
only, and on a contended cluster each finish runs a pass over every VC's head: Capacity asked
about 5 sizes afresh per pass, the wide ones walking the free-count buckets (issue 34: a
tenth of a contended Capacity run's bytecodes, at every finish).

A refusal by free counts stays true while the pool only takes GPUs (jobs start, nodes go
down) and until a release or a node coming up leaves some node with at least
``NodePool.wake_level(gpus)`` free, which ``NodePool.peak`` records: the rule DRF's parked
kinds follow (``head_index.py``). A yes is not kept here (any start may take its room: the
pass keeps those while no job starts or stops). Exact: ``refused`` answers as
``not pool.may_fit(gpus)`` would now (``tests/test_size_refusals.py``).

Only for a policy that is the sole reader of its pool's ``peak`` (each call sets it to 0):
preemptive queue policies, which keep no ``HeadIndex``.
"""

from __future__ import annotations

from labhive.scheduler.policies.node_pool import NodePool

NEVER = 1 << 30


class SizeRefusals:
    """Sizes refused, each with the ``peak`` that may make room for it; the pool they hold for."""

    def __init__(self) -> None:
        self._pool: NodePool | None = None
        self._refused: dict[int, int] = {}  # GPUs -> wake level
        self._low = NEVER  # the lowest wake level held

    def refused(self, pool: NodePool, gpus: int) -> bool:
        """Would placement refuse every gang of ``gpus`` GPUs now, by free counts alone?"""
        if pool is self._pool and pool.peak < self._low:
            # (``held``'s answer without its call: no release since reached a kept level)
            pool.peak = 0
            held = self._refused
        else:
            held = self.held(pool)
        if gpus in held:
            return True
        if self._ask(pool, gpus):
            return False
        level = self._refused[gpus] = pool.wake_level(gpus)
        if level < self._low:
            self._low = level
        return True

    def held(self, pool: NodePool) -> dict[int, int]:
        """The sizes refused now, each with its wake level (read only), once the refusals a
        release since the last look may have ended are forgotten. A pass whose searches are
        spent skips the lines of these sizes without fetching their heads
        (``QueuedPass._thinned``)."""
        if pool is not self._pool:  # a reconfigured cluster: a new pool, nothing known
            self._pool, self._low = pool, NEVER
            self._refused.clear()
        if pool.peak >= self._low:
            self._wake(pool.peak)
        pool.peak = 0  # releases from now on raise it again
        return self._refused

    def _ask(self, pool: NodePool, gpus: int) -> bool:
        """The pool's own answer (the question tests count)."""
        return pool.may_fit(gpus)

    def _wake(self, peak: int) -> None:
        """Forget the refusals a node left with ``peak`` free GPUs may undo."""
        refused = self._refused
        for gpus, level in list(refused.items()):
            if level <= peak:
                del refused[gpus]
        self._low = min(refused.values(), default=NEVER)
