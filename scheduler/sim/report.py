"""What a simulation shows: a terminal table, one JSON document, per-job CSV, plotly figures."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from labhive.scheduler.sim.runner import PolicyRun

#: (label, key, format) of the overall table, in order.
OVERALL_ROWS: tuple[tuple[str, str, str], ...] = (
    ("jobs replayed", "jobs", "int"),
    ("ended (run to their end)", "finished", "int"),
    ("  of which failed/killed in trace", "failed", "int"),
    ("unfinished at end", "unfinished", "int"),
    ("rejected (never fit)", "rejected", "int"),
    ("JCT avg", "jct_avg", "dur"),
    ("JCT median", "jct_median", "dur"),
    ("JCT p95", "jct_p95", "dur"),
    ("JCT p99", "jct_p99", "dur"),
    ("queuing delay avg", "queue_delay_avg", "dur"),
    ("queuing delay median", "queue_delay_median", "dur"),
    ("queuing delay p95", "queue_delay_p95", "dur"),
    ("queuing delay p99", "queue_delay_p99", "dur"),
    ("total waiting avg (also after preemptions)", "waiting_total_avg", "dur"),
    ("total waiting p95", "waiting_total_p95", "dur"),
    ("makespan", "makespan", "dur"),
    ("throughput (jobs/h)", "throughput_per_hour", "num"),
    ("GPU utilization", "utilization", "pct"),
    ("fragmentation (idle GPU share)", "fragmentation", "pct"),
    ("Jain index of VC shares", "jain_vc_share", "num"),
    ("finish-time fairness, worst VC rho", "ftf_worst_vc", "num"),
    ("Jain index of VC rho", "jain_vc_ftf", "num"),
    ("  worst VC rho, jobs > 1 min", "ftf_worst_vc_long", "num"),
    ("  Jain index of VC rho, jobs > 1 min", "jain_vc_ftf_long", "num"),
    ("preemptions", "preemptions", "int"),
    ("GPU time wasted by preemption", "wasted_share", "pct"),
)
VC_ROWS: tuple[tuple[str, str, str], ...] = (
    ("jobs", "jobs", "int"),
    ("JCT avg", "jct_avg", "dur"),
    ("queue avg", "queue_delay_avg", "dur"),
    ("queue p95", "queue_delay_p95", "dur"),
    ("wait avg", "waiting_total_avg", "dur"),
    ("share", "share", "num"),
    ("rho", "ftf_rho", "num"),
    ("preempt", "preemptions", "int"),
)
#: Per VC, over its users (only for traces that name users: ``metrics.per_user``).
USER_ROWS: tuple[tuple[str, str, str], ...] = (
    ("users", "users", "int"),
    ("Jain wait", "jain_user_wait", "num"),
    ("Jain rho>1min", "jain_user_rho_long", "num"),
    ("median user's wait", "user_wait_median", "dur"),
    ("worst user's wait", "user_wait_worst", "dur"),
)


def fmt(value: Any, kind: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if kind == "int":
        return f"{int(value):,}"
    if kind == "pct":
        return f"{100 * value:.1f}%"
    if kind == "dur":
        return duration_text(float(value))
    return f"{value:.3f}"


def duration_text(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _grid(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(
        h.ljust(w) if i == 0 else h.rjust(w)
        for i, (h, w) in enumerate(zip(header, widths, strict=True))
    )
    out = [line, "-" * len(line)]
    for r in rows:
        out.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    return "\n".join(out)


def table(runs: list[PolicyRun], notes: list[str], per_vc: bool = True) -> str:
    """The readable comparison: one column per policy, overall then per VC."""
    labels = [r.label for r in runs]
    rows = [
        [label, *(fmt(r.summary["overall"].get(key), kind) for r in runs)]
        for label, key, kind in OVERALL_ROWS
    ]
    parts = [*notes, "", _grid(["metric", *labels], rows)]
    if per_vc:
        parts += ["", "per VC (share: GPU time served / asked for; rho: mean JCT / duration)"]
        for r in runs:
            vc_rows = [
                [vc, *(fmt(stats.get(key), kind) for _, key, kind in VC_ROWS)]
                for vc, stats in sorted(r.summary["per_vc"].items())
            ]
            parts += ["", _grid([f"[{r.label}] VC", *(label for label, _, _ in VC_ROWS)], vc_rows)]
    if any("per_user" in r.summary for r in runs):
        parts += ["", "per user inside each VC (a user's wait: their jobs' mean queuing delay;"]
        parts += ["Jain: 1 when every user of the VC waited alike; --json has each user's)"]
        for r in runs:
            user_rows = [
                [vc, *(fmt(stats.get(key), kind) for _, key, kind in USER_ROWS)]
                for vc, stats in sorted(r.summary.get("per_user", {}).items())
            ]
            header = [f"[{r.label}] VC", *(label for label, _, _ in USER_ROWS)]
            parts += ["", _grid(header, user_rows)]
    return "\n".join(parts)


def document(runs: list[PolicyRun], meta: dict[str, Any]) -> dict[str, Any]:
    return {**meta, "policies": {r.label: r.summary for r in runs}}


def write_outputs(runs: list[PolicyRun], meta: dict[str, Any], out: Path) -> list[Path]:
    """Per-job CSV per policy, the JSON summary and the figures; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for r in runs:
        path = out / f"jobs_{_safe(r.label)}.csv"
        write_jobs_csv(r, path)
        written.append(path)
    summary = out / "summary.json"
    summary.write_text(json.dumps(document(runs, meta), indent=2) + "\n")
    written.append(summary)
    written += write_figures(runs, out)
    return written


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in label)


JOB_COLUMNS = (
    "job_id",
    "vc",
    "user",
    "gpus",
    "trace_status",
    "state",
    "submit",
    "first_start",
    "end",
    "duration",
    "jct",
    "queue_delay",
    "gpu_seconds",
    "preemptions",
    "attempts",
    "nodes",
    "reason",
)


def write_jobs_csv(run: PolicyRun, path: Path) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(JOB_COLUMNS)
        for j in run.result.jobs:
            w.writerow(
                [
                    j.job_id,
                    j.vc,
                    j.user,
                    j.gpus,
                    j.status,
                    j.state,
                    j.submit,
                    "" if j.first_start is None else j.first_start,
                    "" if j.end is None else j.end,
                    j.duration,
                    "" if j.jct is None else j.jct,
                    "" if j.queue_delay is None else j.queue_delay,
                    round(j.gpu_seconds, 3),
                    j.preemptions,
                    j.attempts,
                    ";".join(j.nodes),
                    j.reason,
                ]
            )


def _thin(x: np.ndarray, y: np.ndarray, points: int = 3000) -> tuple[np.ndarray, np.ndarray]:
    """At most ``points`` samples of a step series, taken on a uniform time grid."""
    if len(x) <= points:
        return x, y
    grid = np.linspace(x[0], x[-1], points)
    idx = np.searchsorted(x, grid, side="right") - 1
    return grid, y[np.clip(idx, 0, len(y) - 1)]


#: One colour per policy, the same in every figure (plotly's default qualitative palette).
PALETTE = ("#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880")


def policy_colours(runs: list[PolicyRun]) -> dict[str, str]:
    """Each run's colour by its position in the comparison, so a policy keeps its colour in
    the CDF, both panels of the utilization figure and the per-VC bars."""
    return {r.label: PALETTE[i % len(PALETTE)] for i, r in enumerate(runs)}


def write_figures(runs: list[PolicyRun], out: Path) -> list[Path]:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    colour = policy_colours(runs)
    files = []
    cdf = go.Figure()
    for r in runs:
        jct = np.sort([j.jct for j in r.result.jobs if j.jct is not None])
        if len(jct) == 0:
            continue
        q = np.linspace(0, 1, min(len(jct), 2000))
        cdf.add_trace(
            go.Scatter(
                x=np.quantile(jct, q) / 3600,
                y=q,
                mode="lines",
                name=r.label,
                line={"color": colour[r.label]},
            )
        )
    cdf.update_layout(
        title="JCT CDF per policy",
        xaxis_title="job completion time (hours, log)",
        yaxis_title="CDF",
    )
    cdf.update_xaxes(type="log")
    files.append(_write(cdf, out / "jct_cdf.html"))

    over_time = make_subplots(
        rows=2, cols=1, shared_xaxes=True, subplot_titles=("GPU utilization", "queue length")
    )
    for r in runs:
        tl = r.result.timeline
        t = np.asarray(tl.t, dtype=float)
        if len(t) == 0:
            continue
        days = (t - t[0]) / 86400
        x, used = _thin(days, np.asarray(tl.used_series, dtype=float))
        over_time.add_trace(
            go.Scatter(
                x=x,
                y=100 * used / max(r.result.total_gpus, 1),
                name=f"{r.label} util %",
                line_shape="hv",
                line={"color": colour[r.label]},
                legendgroup=r.label,
            ),
            row=1,
            col=1,
        )
        x, waiting = _thin(days, np.asarray(tl.waiting_series, dtype=float))
        over_time.add_trace(
            go.Scatter(
                x=x,
                y=waiting,
                name=f"{r.label} waiting jobs",
                line_shape="hv",
                line={"color": colour[r.label], "dash": "dot"},
                legendgroup=r.label,
            ),
            row=2,
            col=1,
        )
    over_time.update_xaxes(title_text="days since the first submission", row=2, col=1)
    over_time.update_layout(title="Utilization and queue length over time")
    files.append(_write(over_time, out / "utilization_queue.html"))

    waits = go.Figure()
    for r in runs:
        vcs = sorted(r.summary["per_vc"])
        waits.add_trace(
            go.Bar(
                x=vcs,
                y=[(r.summary["per_vc"][v]["queue_delay_p95"] or 0) / 3600 for v in vcs],
                name=f"{r.label} p95",
                marker={"color": colour[r.label], "opacity": 0.4, "pattern": {"shape": "/"}},
                offsetgroup=r.label,
                legendgroup=r.label,
            )
        )
        waits.add_trace(
            go.Bar(
                x=vcs,
                y=[(r.summary["per_vc"][v]["queue_delay_avg"] or 0) / 3600 for v in vcs],
                name=f"{r.label} avg",
                marker={"color": colour[r.label]},
                offsetgroup=r.label,
                legendgroup=r.label,
            )
        )
    waits.update_layout(
        title="Queuing delay per VC: each policy's avg (solid) paired with its p95 (hatched)",
        barmode="group",  # one slot per policy; its avg drawn over its p95
        yaxis_title="hours",
        xaxis_title="VC",
    )
    files.append(_write(waits, out / "vc_waits.html"))
    return files


def _write(fig: Any, path: Path) -> Path:
    # one plotly.min.js beside the figures: they open offline, and stay small
    fig.write_html(path, include_plotlyjs="directory")
    return path
