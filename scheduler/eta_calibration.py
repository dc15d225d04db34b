"""Ranges that keep their word: the p10-p90 range of an ETA widened or narrowed from the
service's own recent errors, per VC, so that about 80% of starts fall inside it.

Why: the forecast's range is the spread of three forward runs (every job at its p10, every job
at its p90). That is not an 80% range of a start: on the heavy-tailed Alibaba v2023 trace it
was ~43 h wide and held 99% of starts; where history is thin it holds too few. Split-conformal
calibration (conformalized quantile regression) corrects it from outcomes: for each of the last
``WINDOW`` starts of a VC, the score is how far (in log-wait) the start fell outside its range
(negative: inside, by how much); the ``NOMINAL`` quantile of the scores is the margin to add to
both ends, negative to narrow. Waits are compared on ``log(1 + wait / SCALE_S)``: a miss by a
minute matters on a 2-minute wait, not on a 2-day one.

Pure: no clock, no I/O; the same outcomes give the same margins (ties in time broken by the
outcome's own fields, never by arrival order in a dict or a set).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass

from labhive.scheduler.eta import Estimate

#: The share of starts a range should hold.
NOMINAL = 0.8
#: Recent starts of a VC the margin is learnt from.
WINDOW = 200
#: Fewer starts than this in a VC: the margin of all VCs together; fewer overall: none.
MIN_OUTCOMES = 20
#: Waits are compared as log(1 + wait / SCALE_S).
SCALE_S = 60.0


@dataclass(frozen=True, slots=True)
class Outcome:
    """One waiting job's first estimate (its raw forecast range) and its real start."""

    vc: str
    predicted_at: float
    low: float
    high: float
    started: float

    def score(self) -> float:
        """How far the start fell outside the range in log-wait (negative: inside)."""
        lo, hi, y = (_log_wait(x - self.predicted_at) for x in (self.low, self.high, self.started))
        return max(lo - y, y - hi)


def _log_wait(wait: float) -> float:
    return math.log1p(max(0.0, wait) / SCALE_S)


def _wait_of(log_wait: float) -> float:
    return SCALE_S * math.expm1(max(0.0, log_wait))


def conformal_margin(scores: list[float], nominal: float = NOMINAL) -> float:
    """The split-conformal quantile of ``scores``: the ceil((n + 1) * nominal)-th smallest,
    the largest when that is past the end."""
    ordered = sorted(scores)
    rank = math.ceil((len(ordered) + 1) * nominal)
    return ordered[min(rank, len(ordered)) - 1]


class Calibrator:
    """The margins of each VC as they stood at any moment, from outcomes in start order."""

    def __init__(self, outcomes: Iterable[Outcome], window: int = WINDOW) -> None:
        self.window = window
        ordered = sorted(outcomes, key=lambda o: (o.started, o.predicted_at, o.vc, o.low, o.high))
        self._all = ordered
        self._times = [o.started for o in ordered]
        self._by_vc: dict[str, list[Outcome]] = {}
        for o in ordered:
            self._by_vc.setdefault(o.vc, []).append(o)
        self._vc_times = {vc: [o.started for o in got] for vc, got in self._by_vc.items()}
        self._margins: dict[tuple[str, float], float | None] = {}

    def margin(self, vc: str, before: float = math.inf) -> float | None:
        """The VC's margin from its last ``window`` starts before ``before`` (the VCs'
        together when it has too few); None when there are too few anywhere."""
        key = (vc, before)
        if key not in self._margins:
            own = self._by_vc.get(vc, [])
            own = own[: bisect.bisect_left(self._vc_times.get(vc, []), before)]
            if len(own) < MIN_OUTCOMES:
                own = self._all[: bisect.bisect_left(self._times, before)]
            self._margins[key] = (
                conformal_margin([o.score() for o in own[-self.window :]])
                if len(own) >= MIN_OUTCOMES
                else None
            )
        return self._margins[key]

    def adjust(self, vc: str, now: float, e: Estimate, before: float = math.inf) -> Estimate:
        """``e`` (forecast at ``now``) with its range moved by the VC's margin, never past its
        middle and never below its earliest possible start."""
        m = self.margin(vc, before)
        return e if m is None else widen(e, now, m)


def widen(e: Estimate, now: float, margin: float) -> Estimate:
    """Both ends moved out by ``margin`` in log-wait (in when negative), the range still
    holding ``eta`` and its low end not before ``e.earliest``."""
    low = now + _wait_of(_log_wait(e.low - now) - margin)
    high = now + _wait_of(_log_wait(e.high - now) + margin)
    low = max(min(low, e.eta), e.earliest)
    return Estimate(e.eta, low, max(high, e.eta), e.earliest)
