"""Ranges that keep their word: the p10-p90 range of an ETA widened or narrowed from the
service's own recent errors, per VC, so that about 80% of starts fall inside it.

Why: the forecast's range is the spread of three forward runs (every job at its p10, every job
at its p90). That is not an 80% range of a start: on the heavy-tailed Alibaba v2023 trace it
was ~43 h wide and held 99% of starts; where history is thin it holds too few. Each end of the
range is moved out by a margin of its own (in ``log(1 + wait / SCALE_S)``: a miss by a minute
matters on a 2-minute wait, not on a 2-day one; negative moves it in), tracked per VC from the
outcomes in the order they became known: out on a start beyond that end of the range as shown,
in otherwise, so that a tenth of starts settle on each side (quantile tracking, "conformal PID
control" with the P term only). An outcome is known at the start, or as soon as the wait
passed the end shown (a miss known before the job starts: waiting for the start would learn
first from the jobs that started soon, and narrow the ranges the late ones missed).

Tried first and dropped: a split-conformal quantile of the last 200 scores, one margin for both
ends. It took the Alibaba replay (2 nodes, no limits) from 65% to 49%: the scores drift over a
trace (the load does) and a window's quantile lags; and nearly all misses there are late ones,
which one margin for both ends cannot widen without widening the low end too.

Pure: no clock, no I/O; the same outcomes give the same margins (ties in time broken by the
outcome's own fields, never by arrival order in a dict or a set).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass

from labhive.scheduler.forecast.eta import Estimate

#: The share of starts a range should hold: a tenth may start before it, a tenth after.
NOMINAL = 0.8
TAIL = (1.0 - NOMINAL) / 2
#: How far one outcome moves an end's margin (log-wait units): out by 0.9 of it on a miss on
#: that side, in by 0.1 of it on a hit.
STEP = 0.05
#: Waits are compared as log(1 + wait / SCALE_S).
SCALE_S = 60.0


@dataclass(frozen=True, slots=True)
class Outcome:
    """One waiting job's first estimate (its raw forecast range) and its real start (None:
    not started yet)."""

    vc: str
    predicted_at: float
    low: float
    high: float
    started: float | None

    def low_side(self, margin: float) -> tuple[float, bool]:
        """When it became known whether the start fell before the low end shown with
        ``margin`` (moved out by it), and whether it did: at the start, or once the wait
        passed that low end without one."""
        shown = self.predicted_at + _wait_of(_log_wait(self.low - self.predicted_at) - margin)
        if self.started is not None and self.started < shown:
            return self.started, True
        return shown, False

    def high_side(self, margin: float) -> tuple[float, bool]:
        """When it became known whether the start fell after the high end shown with
        ``margin``, and whether it did: at the start, or as soon as the wait passed that
        high end (a miss known before the job starts: waiting for the start would learn
        first from the jobs that started soon, and narrow the ranges the late ones missed)."""
        shown = self.predicted_at + _wait_of(_log_wait(self.high - self.predicted_at) + margin)
        if self.started is not None and self.started <= shown:
            return self.started, False
        return shown, True


def _log_wait(wait: float) -> float:
    return math.log1p(max(0.0, wait) / SCALE_S)


def _wait_of(log_wait: float) -> float:
    return SCALE_S * math.expm1(max(0.0, log_wait))


class Calibrator:
    """The margin of each VC as it stood at any moment, tracked from the first estimates
    given (started or not) in the order their outcomes became known."""

    def __init__(self, outcomes: Iterable[Outcome], step: float = STEP) -> None:
        self.step = step
        self._by_vc: dict[str, list[Outcome]] = {}
        ordered = sorted(
            outcomes,
            key=lambda o: (
                o.predicted_at,
                o.low,
                o.high,
                math.inf if o.started is None else o.started,
            ),
        )
        for o in ordered:
            self._by_vc.setdefault(o.vc, []).append(o)
        self._margins: dict[tuple[str, float], tuple[float, float]] = {}

    def margin(self, vc: str, at: float) -> tuple[float, float]:
        """The VC's margins (low end, high end) at ``at``: 0 at first; after each outcome
        known by then, an end's margin goes out by ``step`` x 0.9 if the start fell beyond
        that end of the range as shown (the raw range moved by the margins of the moment it
        was given), in by ``step`` x 0.1 if not. The misses then settle at a tenth on each
        side (quantile tracking: the long-run share holds whatever the order)."""
        key = (vc, at)
        if key not in self._margins:
            self._margins[key] = self._track(self._by_vc.get(vc, []), at)
        return self._margins[key]

    def _track(self, outcomes: list[Outcome], at: float) -> tuple[float, float]:
        margins = [0.0, 0.0]  # low end, high end
        known: list[tuple[float, int, int, bool]] = []  # (when known, order, end, missed)

        def settle(until: float) -> None:
            while known and known[0][0] <= until:
                _, _, end, missed = heapq.heappop(known)
                margins[end] += self.step * ((1.0 - TAIL) if missed else -TAIL)

        for n, o in enumerate(outcomes):
            if o.predicted_at > at:
                break
            settle(o.predicted_at)
            for end, (when, missed) in enumerate((o.low_side(margins[0]), o.high_side(margins[1]))):
                if when <= at:
                    heapq.heappush(known, (when, n, end, missed))
        settle(at)
        return margins[0], margins[1]

    def adjust(self, vc: str, now: float, e: Estimate) -> Estimate:
        """``e`` (forecast at ``now``) with its ends moved by the VC's margins as they stood
        then, never past its middle and never below its earliest possible start."""
        low, high = self.margin(vc, now)
        return e if low == high == 0.0 else widen(e, now, low, high)


def widen(e: Estimate, now: float, low_margin: float, high_margin: float) -> Estimate:
    """Each end moved out by its margin in log-wait (in when negative), the range still
    holding ``eta`` and its low end not before ``e.earliest``."""
    low = now + _wait_of(_log_wait(e.low - now) - low_margin)
    high = now + _wait_of(_log_wait(e.high - now) + high_margin)
    low = max(min(low, e.eta), e.earliest)
    return Estimate(e.eta, low, max(high, e.eta), e.earliest)
