"""Calibrated ranges: given a VC's history of estimates and starts, expect the p10-p90 range
widened where it held too few starts and narrowed where it held too many, so that about 80%
fall inside; the same history, in any order, gives the same range (pure, no clock)."""

from __future__ import annotations

import math
import random

import pytest

from labhive.scheduler.eta import Estimate
from labhive.scheduler.eta_calibration import MIN_OUTCOMES, Calibrator, Outcome, conformal_margin

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


def shown_coverage(spread: float, n: int = 400) -> tuple[float, float]:
    """Coverage of the raw and the calibrated ranges over the last 300 jobs, each calibrated
    from the starts seen before it was forecast, as the service does."""
    rows = history(n, spread)
    raw = shown = 0
    scored = rows[n - 300 :]
    for o, e in scored:
        past = [p for p, _ in rows if p.started <= o.predicted_at]
        c = Calibrator(past).adjust("vc1", o.predicted_at, e)
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


def test_the_same_history_in_any_order_gives_the_same_range():
    rows = [o for o, _ in history(100, 1.5)]
    shuffled = rows[:]
    random.Random(1).shuffle(shuffled)
    e = Estimate(500 * HOUR + 1800, 500 * HOUR + 1200, 500 * HOUR + 2700)
    a = Calibrator(rows).adjust("vc1", 500 * HOUR, e)
    b = Calibrator(shuffled).adjust("vc1", 500 * HOUR, e)
    assert a == b and (a.low, a.high) == (b.low, b.high) and a.eta == e.eta


def test_too_little_history_changes_nothing_and_other_vcs_fill_in():
    few = [o for o, _ in history(MIN_OUTCOMES - 1, 1.2)]
    e = Estimate(1800.0, 1500.0, 2100.0)
    assert Calibrator(few).adjust("vc1", 0.0, e) == e and Calibrator(few).margin("vc1") is None
    enough = [o for o, _ in history(MIN_OUTCOMES, 1.2)]
    assert Calibrator(enough).margin("vc2") == Calibrator(enough).margin("vc1") > 0


def test_the_margin_is_the_split_conformal_quantile():
    # n = 9: the ceil(10 * 0.8) = 8th smallest
    assert conformal_margin([float(x) for x in range(9)]) == 7.0
    assert conformal_margin([1.0, 2.0]) == 2.0  # past the end: the largest
