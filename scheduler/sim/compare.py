"""A trace's job statistics next to a real cluster's (AcmeTrace's ``cluster_summary.csv``).

The synthetic Philly-schema log was generated from assumed distributions; this puts its figures
beside the real Philly row (Hu et al., NSDI '24: 112,956 GPU jobs) so a reader sees how far the
assumptions are from the real cluster: run time (median, average), GPUs per job (median,
average) and the shares of jobs that completed, were cancelled (Philly's ``Killed``) or failed.
The trace side counts the jobs the loader replays (runnable rows); statuses are the trace's.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path
from typing import Any

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.sim.traces import Trace

#: (label, trace statistic, AcmeTrace column, kind) in the order printed.
ROWS = (
    ("GPU jobs", "jobs", "gpu_job_num", "int"),
    ("run time, median (s)", "run_median", "med_run_time_gpu", "num"),
    ("run time, average (s)", "run_avg", "avg_run_time_gpu", "num"),
    ("GPUs per job, median", "gpus_median", "med_gpu_num", "num"),
    ("GPUs per job, average", "gpus_avg", "avg_gpu_num", "num"),
    ("completed share", "completed", "complete_rate_gpu", "pct"),
    ("cancelled share", "cancelled", "cancel_rate_gpu", "pct"),
    ("failed share", "failed", "fail_rate_gpu", "pct"),
)
CANCELLED = frozenset({"killed", "cancelled", "canceled"})
FAILED = frozenset({"failed", "fail", "error"})


def trace_stats(trace: Trace) -> dict[str, float]:
    jobs = trace.jobs
    if not jobs:
        raise UserError(f"{trace.source}: no runnable jobs to describe")
    status = [j.status.strip().lower() for j in jobs]
    n = len(jobs)
    cancelled = sum(s in CANCELLED for s in status) / n
    failed = sum(s in FAILED for s in status) / n
    return {
        "jobs": n,
        "run_median": statistics.median(j.duration for j in jobs),
        "run_avg": statistics.fmean(j.duration for j in jobs),
        "gpus_median": statistics.median(j.gpus for j in jobs),
        "gpus_avg": statistics.fmean(j.gpus for j in jobs),
        "completed": 1 - cancelled - failed,
        "cancelled": cancelled,
        "failed": failed,
    }


def cluster_row(path: str | Path, name: str = "Philly") -> dict[str, str]:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist; give AcmeTrace's cluster_summary.csv")
    with open(path, encoding="utf-8-sig", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        if row.get("id", "").strip().lower() == name.lower():
            return row
    names = ", ".join(r.get("id", "?") for r in rows)
    raise UserError(f"{path}: no cluster {name!r}; it lists {names}")


def comparison(trace: Trace, summary: str | Path, name: str = "Philly") -> list[dict[str, Any]]:
    """One row per statistic: the trace's value, the real cluster's, and their ratio."""
    ours = trace_stats(trace)
    real = cluster_row(summary, name)
    out = []
    for label, key, column, kind in ROWS:
        raw = (real.get(column) or "").strip()
        theirs = float(raw) if raw else None
        ratio = ours[key] / theirs if theirs else None
        row = {"statistic": label, "trace": ours[key], name: theirs, "ratio": ratio}
        out.append({**row, "kind": kind})
    return out


def comparison_text(rows: list[dict[str, Any]], name: str = "Philly") -> str:
    from labhive.scheduler.sim.report import _grid

    def show(value: Any, kind: str) -> str:
        if value is None:
            return "-"
        if kind == "int":
            return f"{value:,.0f}"
        if kind == "pct":
            return f"{100 * value:.1f}%"
        return f"{value:,.1f}"

    body = [
        [
            r["statistic"],
            show(r["trace"], r["kind"]),
            show(r[name], r["kind"]),
            "-" if r["ratio"] is None else f"{r['ratio']:.2f}x",
        ]
        for r in rows
    ]
    return _grid(["", "this trace", f"real {name}", "trace / real"], body)
