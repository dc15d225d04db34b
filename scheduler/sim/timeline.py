"""What the cluster looked like over virtual time, kept as running integrals.

The driver reports each change (GPUs taken or given back, a job starting or stopping to
wait, a preemption) and each advance of the clock; the timeline integrates GPU use, idle GPUs
while a waiting job would fit by count (fragmentation), and per VC the GPU time served versus
asked for (for the fairness index). Each VC's integral advances only when that VC changes,
so a change costs O(1) however many VCs there are. The step series (one point per instant at
which time moved) feeds the utilization and queue-length figures.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np


class _VC:
    """One VC's GPUs in use and GPUs asked for by its waiting jobs, and its steps: after each
    change, (when, GPUs in use, GPUs waiting) from then on, in ``steps`` (one series, three
    numbers a step, the first at the VC's first use). Its integrals are summed from the steps
    when read (``served``, ``demand``: at the end, by the metrics)."""

    __slots__ = ("steps", "used", "waiting_gpus")

    def __init__(self, now: float) -> None:
        self.used = 0
        self.waiting_gpus = 0
        self.steps = array("d", (now, 0.0, 0.0))

    @property
    def last(self) -> float:
        """When its last step began: its integrals are summed to then."""
        return self.steps[-3]

    @property
    def served(self) -> float:
        """GPU-seconds run."""
        steps, lengths = self._rows()
        return _running_sum(steps[:-1, 1] * lengths)

    @property
    def demand(self) -> float:
        """GPU-seconds run or waited for."""
        steps, lengths = self._rows()
        return _running_sum((steps[:-1, 1] + steps[:-1, 2]) * lengths)

    def _rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The steps as rows (a view, released on return) and each but the last one's length."""
        steps = np.frombuffer(self.steps, dtype=np.float64).reshape(-1, 3)
        return steps, np.diff(steps[:, 0])

    def advance(self, now: float) -> None:
        """A step from ``now`` as things are (its integrals summed to ``now``)."""
        self.steps.extend((now, self.used, self.waiting_gpus))


class _VCs(dict[str, _VC]):
    """The timeline's VCs by name; a VC not seen before is made when first read, its integrals
    starting at the timeline's now: ``run`` and ``wait`` read ``vcs[name]`` without a ``get``
    and a test for None (twice or more a job: a million jobs' starts, ends and waits)."""

    __slots__ = ("_timeline",)

    def __init__(self, timeline: Timeline) -> None:
        super().__init__()
        self._timeline = timeline

    def __missing__(self, name: str) -> _VC:
        vc = self[name] = _VC(self._timeline.now)
        return vc


class Timeline:
    def __init__(self, total_gpus: int) -> None:
        self.total_gpus = total_gpus
        self.start: float | None = None
        self.now = 0.0
        self.used = 0
        self.waiting = 0
        self.preemptions = 0
        self._wait_sizes: dict[int, int] = {}
        self.vcs: dict[str, _VC] = _VCs(self)
        # The step series, one (time, GPUs used, jobs waiting) a step, interleaved in one
        # array: one ``extend`` an instant, not three appends (``t``, ``used_series``,
        # ``waiting_series`` read them apart; counts are exact as floats below 2**53).
        self._steps = array("d")
        # The steps in which jobs waited and GPUs were idle, but too few for any waiting job
        # (not fragmented), each by the series' length once it was added (``advance``).
        self._roomless = array("q")

    def advance(self, t: float) -> None:
        """Time moves from ``now`` to ``t`` with the current state."""
        if self.start is None:
            self.start = self.now = t
            return
        dt = t - self.now
        if dt <= 0:
            return
        # (No integral is added to here: ``busy_gpu_seconds`` and the fragmentation's sum them
        # from the steps.)
        self._steps.extend((self.now, self.used, self.waiting))
        if self.waiting:  # (no idle GPUs to count while none waits)
            idle = self.total_gpus - self.used
            if idle > 0 and min(self._wait_sizes) > idle:  # (in a deep queue, seldom)
                self._roomless.append(len(self._steps))
        self.now = t

    # ---- changes: each adds a step to its VC's series ----------------------------------
    #
    # Why a step, not the VC's integrals advanced to now: the advance (``dt`` since the VC's
    # last change, two products added) was about 30 bytecodes a change and every job makes two
    # or three (a start and an end, a wait), where a step is one ``extend``. A change in the
    # same instant as the last one adds a step of no length: its products are 0.0, and adding
    # 0.0 to the integrals changes no bit, as the advance's ``dt > 0`` test left them alone.

    def run(self, job: Any, gpus: int) -> None:
        """``gpus`` more (or fewer) GPUs in use by ``job`` (its VC made on first use)."""
        self.used += gpus
        vc = self.vcs[job.vc]  # (made at ``now`` on first use: ``_VCs``)
        vc.used = used = vc.used + gpus
        vc.steps.extend((self.now, used, vc.waiting_gpus))

    def wait(self, job: Any, sign: int) -> None:
        self.waiting += sign
        size = job.gpus
        sizes = self._wait_sizes
        count = sizes.get(size, 0) + sign
        if count:
            sizes[size] = count
        else:
            del sizes[size]
        vc = self.vcs[job.vc]
        vc.waiting_gpus = waiting = vc.waiting_gpus + sign * size
        vc.steps.extend((self.now, vc.used, waiting))

    def started(self, job: Any, gpus: int) -> None:
        """``wait(job, -1)`` then ``run(job, gpus)``: a waiting job starts (one step for both
        changes: the first one's, at the same time, would have no length)."""
        # (``wait``'s body, written out: once for every job that waited, and the VC is found
        # once for both changes.)
        self.waiting -= 1
        size = job.gpus
        sizes = self._wait_sizes
        count = sizes[size] - 1  # (it waits, so its size is counted)
        if count:
            sizes[size] = count
        else:
            del sizes[size]
        vc = self.vcs[job.vc]  # (it waits, so its VC is known)
        self.used += gpus
        vc.used = used = vc.used + gpus
        vc.waiting_gpus = waiting = vc.waiting_gpus - size
        vc.steps.extend((self.now, used, waiting))

    def preempted(self, job: Any) -> None:
        self.preemptions += 1

    def close(self, t: float) -> None:
        self.advance(t)
        self._steps.extend((self.now, self.used, self.waiting))
        for vc in self.vcs.values():
            vc.advance(self.now)

    # ---- the integrals, summed from the steps when read (at the end, by the metrics) ------
    #
    # Why: ``advance`` added to three running totals once an instant (27 bytecodes while jobs
    # wait, two or more instants a job), and the series holds the same numbers. A step's start
    # is the ``now`` that ``advance`` moved from and the next one's the ``t`` it moved to (the
    # last one's, now), so each length is the same subtraction; GPU counts are exact as
    # doubles, so each product is the same multiplication (in numpy as in Python); and a
    # cumulative sum adds in order from the first, as the running totals did (``0.0 + x`` is
    # ``x``): the same bits. A step is fragmented where jobs waited and GPUs were idle, unless
    # ``advance`` found the idle GPUs too few for every waiting job (``_roomless``).

    @property
    def busy_gpu_seconds(self) -> float:
        """GPU time in use so far."""
        steps, lengths = self._step_lengths()
        lengths *= steps[:, 1]
        return _running_sum(lengths)

    @property
    def frag_gpu_seconds(self) -> float:
        """Idle GPU time while a waiting job would have fit by count."""
        idle, lengths = self._fragmented()
        return _running_sum(idle * lengths)

    @property
    def frag_seconds(self) -> float:
        """Time during which a waiting job would have fit the idle GPUs by count."""
        return _running_sum(self._fragmented()[1])

    def _step_lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """The steps as rows (start, GPUs used, jobs waiting), a view of the series (no copy,
        released on return), and each step's length, a new array."""
        steps = np.frombuffer(self._steps, dtype=np.float64).reshape(-1, 3)
        return steps, np.diff(steps[:, 0], append=self.now) if len(steps) else np.zeros(0)

    def _fragmented(self) -> tuple[np.ndarray, np.ndarray]:
        """The fragmented steps' idle GPUs and lengths, in order."""
        steps, lengths = self._step_lengths()
        idle = self.total_gpus - steps[:, 1]
        fragmented = (steps[:, 2] != 0) & (idle > 0)
        fragmented[np.frombuffer(self._roomless, dtype=np.int64) // 3 - 1] = False
        return idle[fragmented], lengths[fragmented]

    @property
    def t(self) -> array[float]:
        """When each step began."""
        return self._steps[0::3]

    @property
    def used_series(self) -> array[float]:
        """GPUs in use from each step on."""
        return self._steps[1::3]

    @property
    def waiting_series(self) -> array[float]:
        """Jobs waiting from each step on."""
        return self._steps[2::3]

    @property
    def span(self) -> float:
        return 0.0 if self.start is None else self.now - self.start


def _running_sum(values: np.ndarray) -> float:
    """``values`` added one after the other from the first, as a running total adds (numpy's
    ``sum`` adds pairwise: other bits); 0.0 for none."""
    return float(np.cumsum(values)[-1]) if len(values) else 0.0
