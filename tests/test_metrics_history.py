"""Given a job's GPU sampled over a long run, expect the kept history to stay under its bound,
cover the whole run, and keep mean utilization and peak memory."""

from __future__ import annotations

from dataclasses import replace

import pytest
from metrics_world import h100_sample

from labhive.scheduler.observe.history import HistoryPoint, compact, halve, merge


def test_point_from_an_h100_reading() -> None:
    (gpu,) = h100_sample().gpus
    p = HistoryPoint.of(5.0, gpu)
    assert (p.t0, p.t1, p.n, p.gpu_util, p.temperature_c) == (5.0, 5.0, 1, 100, 51)
    assert p.fb_used_mib == pytest.approx(1870.8, abs=0.05)


def test_merge_means_rates_and_keeps_peaks() -> None:
    a = HistoryPoint(0, 0, 3, gpu_util=90, fb_used_mib=1000, power_w=300, temperature_c=60)
    b = HistoryPoint(1, 1, 1, gpu_util=10, fb_used_mib=4000, power_w=100, temperature_c=50)
    m = merge(a, b)
    assert (m.t0, m.t1, m.n) == (0, 1, 4)
    assert m.gpu_util == 70 and m.power_w == 250  # weighted by samples
    assert m.fb_used_mib == 4000 and m.temperature_c == 60
    assert merge(a, replace(b, gpu_util=None)).gpu_util == 90  # a missing field is no zero


def test_long_run_stays_bounded_and_covers_everything() -> None:
    points = [HistoryPoint(float(t), float(t), gpu_util=float(t % 100)) for t in range(10_000)]
    kept = compact(points, max_points=360)
    assert len(kept) <= 360
    assert kept[0].t0 == 0 and kept[-1].t1 == 9_999
    assert sum(p.n for p in kept) == 10_000
    weighted = 0.0
    for p in kept:
        assert p.gpu_util is not None, "every point had a utilisation: so has every merge"
        weighted += p.gpu_util * p.n
    mean = weighted / 10_000
    assert mean == pytest.approx(sum(t % 100 for t in range(10_000)) / 10_000)


def test_halve_keeps_an_odd_last_point() -> None:
    pts = [HistoryPoint(float(t), float(t)) for t in range(5)]
    assert [(p.t0, p.t1, p.n) for p in halve(pts)] == [(0, 1, 2), (2, 3, 2), (4, 4, 1)]
