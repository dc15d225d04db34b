"""Metrics of one simulated run, overall and per VC.

Definitions (also in ``docs/policies.md``):
- JCT: end - submit, over jobs that ended after running (SUCCEEDED, or FAILED as the trace
  recorded them: failed and killed jobs replay their recorded durations). Queuing delay:
  first start - submit. Total waiting: JCT - time running, i.e. every wait, also after a
  preemption (a preempted job under LAS may wait long after its first start).
- wasted GPU time: progress lost when a run was cut short (beyond its last checkpoint) plus
  restart costs, as a share of all GPU time held; above ``WASTE_WARNING`` the CLI warns.
- makespan: last end - first submit; throughput: finished jobs per hour of makespan.
- utilization: GPU-seconds held / (cluster GPUs x makespan), lost work included.
- fragmentation: GPU-seconds idle while some waiting job needed no more GPUs than were idle
  (it waited for their shape or place, or for its VC's quota under VC-enforcing policies,
  not for their number), over cluster GPUs x makespan.
- VC share: a VC's GPU-seconds served / GPU-seconds it asked for (running + waiting jobs'
  GPUs over time); 1 means it never waited. ``jain_vc_share`` is Jain's index over VCs.
- finish-time fairness: a job's rho = JCT / its duration (time in the shared cluster over its
  time alone, Themis' ratio with the job's own run as the isolated time); per VC the mean;
  overall the worst VC's mean and Jain's index over the VCs' means. Very short jobs dominate
  those means (a 10-s job that waits a minute has rho 7), so the same figures are also given
  over jobs longer than ``LONG_JOB`` seconds only (``*_long``), a more robust reading.
- per user, inside each VC (only when the trace names users: ``per_user``): each user's
  queuing delays (mean, p50, p95, over their jobs that started) and mean rho; per VC, Jain's
  index over its users' mean queuing delays (1: every user waited alike on average) and over
  their mean rho of jobs > 1 min, the median and worst user's mean delay. Fair share evens
  out usage, not waits: a heavy user waits longer than a light one under it, so the index
  over waits can fall while light users' waits fall too (docs/policies.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from labhive.scheduler.core.states import JobState
from labhive.scheduler.sim.engine import ENDED, SimResult
from labhive.scheduler.sim.jobtable import state_mask

#: Jobs longer than this (seconds) make the robust fairness figures.
LONG_JOB = 60.0
#: Preemption waste (share of GPU time) above which the CLI warns.
WASTE_WARNING = 0.03


def jain(values: Iterable[float]) -> float | None:
    """Jain's fairness index: 1 when all equal, 1/n when one value takes everything."""
    xs = [v for v in values if v is not None]
    if not xs:
        return None
    square = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * square) if square else 1.0


def _stats(values: np.ndarray, prefix: str) -> dict[str, float | None]:
    if not len(values):
        return {f"{prefix}_{k}": None for k in ("avg", "median", "p95", "p99")}
    arr = np.asarray(values, dtype=float)
    p50, p95, p99 = np.percentile(arr, [50, 95, 99])
    return {
        f"{prefix}_avg": float(arr.mean()),
        f"{prefix}_median": float(p50),
        f"{prefix}_p95": float(p95),
        f"{prefix}_p99": float(p99),
    }


def _total(values: np.ndarray) -> float:
    """Python's own left-to-right sum, as the per-job objects were summed (numpy sums in
    pairs, which differs in the last bits)."""
    total: float = sum(values.tolist())
    return total


def _group(cols: dict[str, np.ndarray]) -> dict[str, Any]:
    """The figures of one group of jobs, given as columns (``JobTable.arrays``)."""
    submit, end, run = cols["submit"], cols["end"], cols["run_seconds"]
    state = cols["state"]
    done = state_mask(state, *ENDED) & ~np.isnan(end)
    jct = end[done] - submit[done]
    started = ~np.isnan(cols["first_start"])
    delay = cols["first_start"][started] - submit[started]
    duration = cols["duration"][done]
    rho = jct[duration > 0] / duration[duration > 0]
    rho_long = jct[duration > LONG_JOB] / duration[duration > LONG_JOB]
    waits = jct - run[done]
    held = _total(cols["gpu_seconds"])
    wasted = _total(cols["wasted"])
    out: dict[str, Any] = {
        "jobs": len(state),
        "finished": int(done.sum()),
        "failed": int((done & state_mask(state, JobState.FAILED)).sum()),
        "unfinished": int(state_mask(state, JobState.WAITING, JobState.RUNNING).sum()),
        "rejected": int(state_mask(state, JobState.REJECTED).sum()),
        "cancelled": int(state_mask(state, JobState.STOPPED).sum()),
        "preemptions": int(cols["preemptions"].sum()),
        "gpu_hours": held / 3600.0,
        "wasted_gpu_hours": wasted / 3600.0,
        "wasted_share": wasted / held if held else 0.0,
    }
    out.update(_stats(jct, "jct"))
    out.update(_stats(delay, "queue_delay"))
    out.update(_stats(waits, "waiting_total"))
    out["ftf_rho"] = float(np.mean(rho)) if len(rho) else None
    out["ftf_rho_long"] = float(np.mean(rho_long)) if len(rho_long) else None
    return out


def summarize(result: SimResult) -> dict[str, Any]:
    tl = result.timeline
    cols = result.table.arrays()
    overall = _group(cols)
    submits, ends = cols["submit"], cols["end"][~np.isnan(cols["end"])]
    makespan = float(ends.max() - submits.min()) if len(ends) and len(submits) else 0.0
    capacity = result.total_gpus * tl.span
    overall.update(
        {
            "makespan": makespan,
            "throughput_per_hour": overall["finished"] / (makespan / 3600) if makespan else None,
            "utilization": tl.busy_gpu_seconds / capacity if capacity else None,
            "fragmentation": tl.frag_gpu_seconds / capacity if capacity else None,
            "fragmented_time_share": tl.frag_seconds / tl.span if tl.span else None,
        }
    )
    per_vc: dict[str, dict[str, Any]] = {}
    for code, vc in sorted(enumerate(result.table.vcs), key=lambda cv: cv[1]):
        mine = cols["vc"] == code
        stats = _group({name: col[mine] for name, col in cols.items()})
        acc = tl.vcs.get(vc)
        stats["share"] = acc.served / acc.demand if acc is not None and acc.demand else None
        per_vc[vc] = stats
    shares = [s["share"] for s in per_vc.values() if s["share"] is not None]
    rhos = [s["ftf_rho"] for s in per_vc.values() if s["ftf_rho"] is not None]
    longs = [s["ftf_rho_long"] for s in per_vc.values() if s["ftf_rho_long"] is not None]
    overall["jain_vc_share"] = jain(shares)
    overall["ftf_worst_vc"] = max(rhos) if rhos else None
    overall["jain_vc_ftf"] = jain(rhos)
    overall["ftf_worst_vc_long"] = max(longs) if longs else None
    overall["jain_vc_ftf_long"] = jain(longs)
    out = {
        "policy": result.policy,
        "total_gpus": result.total_gpus,
        "events": result.events,
        "overall": overall,
        "per_vc": per_vc,
        "over_time": over_time(result),
    }
    users = per_user(cols, result.table.vcs, result.table.users)
    if users:  # (a trace without users keeps its summary as it was, byte for byte)
        out["per_user"] = users
    return out


def per_user(cols: dict[str, np.ndarray], vcs: list[str], users: list[str]) -> dict[str, Any]:
    """Per VC, its users' waits and Jain's indexes over them (the module's docstring); empty
    when no job names a user."""
    if not any(users):
        return {}
    out: dict[str, Any] = {}
    started = ~np.isnan(cols["first_start"])
    delay = cols["first_start"] - cols["submit"]
    duration, end = cols["duration"], cols["end"]
    long_done = ~np.isnan(end) & (duration > LONG_JOB)
    groups = _user_groups(cols["vc"], cols["user"])
    for code, vc in sorted(enumerate(vcs), key=lambda cv: cv[1]):
        by_user: dict[str, Any] = {}
        rhos = []
        for ucode, mine in groups.get(code, ()):
            stats = _user_waits(delay[mine[started[mine]]])
            done = mine[long_done[mine]]
            rho = (end[done] - cols["submit"][done]) / duration[done]
            stats["ftf_rho_long"] = float(rho.mean()) if len(rho) else None
            if stats["ftf_rho_long"] is not None:
                rhos.append(stats["ftf_rho_long"])
            by_user[users[ucode]] = {"jobs": len(mine), **stats}
        means = [u["queue_delay_avg"] for u in by_user.values() if u["queue_delay_avg"] is not None]
        out[vc] = {
            "users": len(by_user),
            "jain_user_wait": jain(means),
            "jain_user_rho_long": jain(rhos),
            "user_wait_median": float(np.median(means)) if means else None,
            "user_wait_worst": max(means) if means else None,
            "by_user": dict(sorted(by_user.items())),
        }
    return out


def _user_waits(waits: np.ndarray) -> dict[str, float | None]:
    """``_stats(waits, "queue_delay")`` less its p99: a user's mean, median and p95 wait.
    The percentiles are worked out here from the sorted waits, by numpy's default (linear)
    rule and its float operations, so they are the same bits as ``np.percentile``'s
    (``tests/test_sim_per_user.py`` holds them to it on random samples): its call took two
    thirds of ``per_user`` (a 100k-job run's 4,600 users: 0.4 of 0.6 CPU s). The waits are
    of jobs that started, so never NaN (which ``np.percentile`` would turn the answer into)."""
    if not len(waits):
        return {"queue_delay_avg": None, "queue_delay_median": None, "queue_delay_p95": None}
    ordered = np.sort(waits).tolist()
    return {
        "queue_delay_avg": float(waits.mean()),
        "queue_delay_median": linear_percentile(ordered, 0.5),
        "queue_delay_p95": linear_percentile(ordered, 0.95),
    }


def linear_percentile(ordered: list[float], q: float) -> float:
    """``np.percentile(values, 100 * q)`` of ``values`` given sorted, to the bit: the
    value at index ``(n - 1) * q`` of the sorted values, interpolated between its two
    neighbours as numpy's ``_lerp`` does (from the upper one once the fraction is 1/2 or
    more, which rounds differently from the lower one)."""
    last = len(ordered) - 1
    at = last * q
    if at >= last:
        return float(ordered[-1])
    low = math.floor(at)
    a, b = ordered[low], ordered[low + 1]
    t = at - low
    diff = b - a
    return float(b - diff * (1 - t) if t >= 0.5 else a + diff * t)


def _user_groups(vc: np.ndarray, user: np.ndarray) -> dict[int, list[tuple[int, np.ndarray]]]:
    """VC code -> its users' (user code, rows), users in code order, each user's rows in
    row order: what masking the columns with ``vc == code & user == ucode`` selects, found by
    one stable sort instead of passes over every row per user (the synthetic trace's 319
    users cost a 1M-job FIFO run 15.2 of its 105 CPU s so, at load 8; 0.87 s this way)."""
    key = vc.astype(np.int64) * (int(user.max()) + 1 if len(user) else 1) + user
    order = np.argsort(key, kind="stable")  # (stable: equal keys keep their row order)
    sorted_key = key[order]
    bounds = np.flatnonzero(np.diff(sorted_key)) + 1
    groups: dict[int, list[tuple[int, np.ndarray]]] = {}
    for rows in np.split(order, bounds) if len(order) else ():
        first = int(rows[0])
        groups.setdefault(int(vc[first]), []).append((int(user[first]), rows))
    return groups


def over_time(result: SimResult, buckets: int = 200) -> dict[str, list[float]]:
    """Utilization and mean queue length in at most ``buckets`` equal spans of the run
    (time-weighted averages of the step series), for plots and ``--json`` readers."""
    tl = result.timeline
    t = np.asarray(tl.t, dtype=float)
    if len(t) < 2 or t[-1] <= t[0]:
        return {"t": [], "utilization": [], "queue_length": []}
    used = np.asarray(tl.used_series, dtype=float)[:-1]
    waiting = np.asarray(tl.waiting_series, dtype=float)[:-1]
    edges = np.linspace(t[0], t[-1], buckets + 1)
    # integral of a step series up to each edge, by cumulative sums over the steps
    dt = np.diff(t)
    cum_used = np.concatenate([[0.0], np.cumsum(used * dt)])
    cum_wait = np.concatenate([[0.0], np.cumsum(waiting * dt)])

    def integral(cum: np.ndarray, values: np.ndarray, x: np.ndarray) -> np.ndarray:
        i = np.clip(np.searchsorted(t, x, side="right") - 1, 0, len(dt) - 1)
        out: np.ndarray = cum[i] + values[i] * (x - t[i])
        return out

    span = np.diff(edges)
    util = np.diff(integral(cum_used, used, edges)) / span / max(result.total_gpus, 1)
    queue = np.diff(integral(cum_wait, waiting, edges)) / span
    return {
        "t": [float(x - t[0]) for x in edges[:-1]],
        "utilization": [round(float(u), 6) for u in util],
        "queue_length": [round(float(q), 3) for q in queue],
    }
