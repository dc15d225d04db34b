"""Calibrated ranges: given a VC's history of estimates and starts, expect the p10-p90 range
widened where it held too few starts and narrowed where it held too many, so that about 80%
fall inside; the same history, in any order, gives the same range (pure, no clock)."""

from __future__ import annotations

import math
import random

import pytest

from labhive.scheduler.forecast.eta import Estimate
from labhive.scheduler.forecast.eta_calibration import STEP, Calibrator, Outcome

HOUR = 3600.0


def history(n: int, spread: float, seed: int = 7) -> list[tuple[Outcome, Estimate]]:
    """One job an hour, each forecast to start in ~30 min with a range of x/spread..x*spread
    around it; the real wait is log-normal around 30 min (a factor of ~2.7 at one sigma)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        at = i * HOUR
        mid = 1800.0
        e = Estimate(at + mid, at + mid / spread, at + mid * spread)
        start = at + mid * math.exp(rng.gauss(0.0, 1.0))
        out.append((Outcome("vc1", at, e.low, e.high, start), e))
    return out


def shown_coverage(spread: float, n: int = 1500) -> tuple[float, float]:
    """Coverage of the raw and the calibrated ranges over the last 300 jobs, each calibrated
    from what was known when it was forecast: the starts by then, and the jobs still waiting
    past their high end (the calibrator never looks past ``at``)."""
    rows = history(n, spread)
    calibrator = Calibrator(o for o, _ in rows)
    raw = shown = 0
    scored = rows[n - 300 :]
    for o, e in scored:
        assert o.started is not None, "every job of the history started"
        c = calibrator.adjust("vc1", o.predicted_at, e)
        raw += e.low <= o.started <= e.high
        shown += c.low <= o.started <= c.high
    return raw / len(scored), shown / len(scored)


def test_too_narrow_ranges_are_widened_toward_80_percent():
    raw, shown = shown_coverage(spread=1.2)  # x/1.2 .. x*1.2: a third of starts inside
    assert raw < 0.3
    assert shown == pytest.approx(0.8, abs=0.06)


def test_too_wide_ranges_are_narrowed_toward_80_percent():
    raw, shown = shown_coverage(spread=20.0)  # x/20 .. x*20: nearly every start inside
    assert raw > 0.97
    assert shown == pytest.approx(0.8, abs=0.06)


def test_a_job_still_waiting_past_its_range_counts_as_a_miss_already():
    """Twenty jobs forecast to start within 30 min; none has started 2 h later. Learning
    only from starts there would be nothing to learn; they are misses, so the range widens."""
    waiting = [Outcome("vc1", 0.0, 600.0, 1800.0, None) for _ in range(20)]
    assert Calibrator(waiting).margin("vc1", 1000.0)[1] == 0.0  # not past their high end yet
    assert Calibrator(waiting).margin("vc1", 2 * HOUR)[1] > 0


def test_the_same_history_in_any_order_gives_the_same_range():
    rows = [o for o, _ in history(100, 1.5)]
    shuffled = rows[:]
    random.Random(1).shuffle(shuffled)
    e = Estimate(500 * HOUR + 1800, 500 * HOUR + 1200, 500 * HOUR + 2700)
    a = Calibrator(rows).adjust("vc1", 500 * HOUR, e)
    b = Calibrator(shuffled).adjust("vc1", 500 * HOUR, e)
    assert a == b and (a.low, a.high) == (b.low, b.high) and a.eta == e.eta


def test_no_history_changes_nothing_and_each_outcome_moves_its_end_once_known():
    """A start before the low end moves the low end out by 0.9 of a step (and the high end in
    by 0.1: it was not late); a start inside moves both ends in by 0.1 of a step, each once
    it is known (the low end's hit as soon as the wait passed it); a VC learns from its own
    outcomes only."""
    e = Estimate(1800.0, 1500.0, 2100.0)
    assert Calibrator([]).adjust("vc1", 0.0, e) == e
    early = Outcome("vc1", 0.0, 600.0, 1800.0, 60.0)  # before its low end: a miss
    inside = Outcome("vc1", 0.0, 600.0, 1800.0, 900.0)
    c = Calibrator([inside, early])
    assert c.margin("vc1", 30.0) == (0.0, 0.0)
    assert c.margin("vc1", 60.0) == pytest.approx((0.9 * STEP, -0.1 * STEP))  # and not late
    assert c.margin("vc1", 1000.0) == pytest.approx((0.8 * STEP, -0.2 * STEP))
    assert c.margin("vc2", 1000.0) == (0.0, 0.0)
