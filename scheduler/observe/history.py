"""Per-job GPU history, kept small by halving its resolution as the job runs on.

A job's GPU gets one point per sample. When a GPU's series grows past ``max_points``,
neighbouring points are merged pairwise (oldest first) so the series covers the whole run at
half the resolution: a ten-minute job keeps second-level detail, a week-long one still fits in
a few hundred rows, and a widget or report draws the whole run from one small query. Merging
keeps the mean of rates (utilization, power) and the peak of levels that matter at their
maximum (memory held, temperature).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from labhive.scheduler.observe.nvml import GpuReading

#: Points kept per job and GPU before the series is halved.
MAX_POINTS = 360


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    """``n`` samples taken from ``t0`` to ``t1``."""

    t0: float
    t1: float
    n: int = 1
    gpu_util: float | None = None  # mean %
    mem_copy_util: float | None = None  # mean %
    fb_used_mib: float | None = None  # peak
    power_w: float | None = None  # mean
    temperature_c: float | None = None  # peak

    @classmethod
    def of(cls, t: float, gpu: GpuReading) -> HistoryPoint:
        return cls(
            t0=t,
            t1=t,
            gpu_util=gpu.gpu_util,
            mem_copy_util=gpu.mem_copy_util,
            fb_used_mib=gpu.fb_used_mib,
            power_w=gpu.power_w,
            temperature_c=gpu.temperature_c,
        )


def _mean(a: float | None, na: int, b: float | None, nb: int) -> float | None:
    if a is None or b is None:
        return a if b is None else b
    return (a * na + b * nb) / (na + nb)


def _peak(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return a if b is None else b
    return max(a, b)


def merge(a: HistoryPoint, b: HistoryPoint) -> HistoryPoint:
    return HistoryPoint(
        t0=min(a.t0, b.t0),
        t1=max(a.t1, b.t1),
        n=a.n + b.n,
        gpu_util=_mean(a.gpu_util, a.n, b.gpu_util, b.n),
        mem_copy_util=_mean(a.mem_copy_util, a.n, b.mem_copy_util, b.n),
        fb_used_mib=_peak(a.fb_used_mib, b.fb_used_mib),
        power_w=_mean(a.power_w, a.n, b.power_w, b.n),
        temperature_c=_peak(a.temperature_c, b.temperature_c),
    )


def halve(points: Sequence[HistoryPoint]) -> list[HistoryPoint]:
    """Neighbours merged pairwise in time order; an odd last point stays as it is."""
    ordered = sorted(points, key=lambda p: p.t0)
    out = [merge(ordered[i], ordered[i + 1]) for i in range(0, len(ordered) - 1, 2)]
    if len(ordered) % 2:
        out.append(ordered[-1])
    return out


def compact(points: Sequence[HistoryPoint], max_points: int = MAX_POINTS) -> list[HistoryPoint]:
    """The series, halved as often as needed to fit in ``max_points``."""
    out = sorted(points, key=lambda p: p.t0)
    while len(out) > max_points:
        out = halve(out)
    return out
