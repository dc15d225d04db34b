"""``labhive whatif``'s report: a table per VC, the jobs whose wait changed most, and a plotly
figure (waits per VC, before and after) for ``--html``."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from labhive.scheduler.core.errors import UserError


def text(report: dict[str, Any]) -> str:
    span = report["span"]
    base, new = report["baseline"], report["whatif"]
    lines = [
        f"what-if over {_at(span['begin'])} .. {_at(span['end'])} ({_span(span['seconds'])}):"
        f" {report['jobs']} jobs replayed with their real run times",
        f"  baseline: {base['label']} ({base['gpus']} GPUs)",
        f"  what-if:  {new['label']} ({new['gpus']} GPUs)",
    ]
    for reason, n in sorted(report["left_out"].items()):
        lines.append(f"  left out: {n} jobs {reason}")
    lines.append("")
    lines.append(
        f"{'VC':<12} {'jobs':>5}  {'wait p50 s':>17}  {'wait p95 s':>17}  {'quota use':>13}  "
        f"{'GPU-h wasted':>13}  {'refused':>7}"
    )
    for vc, both in report["per_vc"].items():
        b, w = both["baseline"], both["whatif"]
        lines.append(
            f"{vc:<12} {max(b['jobs'], w['jobs']):>5}  "
            f"{_pair(b.get('wait_p50_s'), w.get('wait_p50_s'), '.0f'):>17}  "
            f"{_pair(b.get('wait_p95_s'), w.get('wait_p95_s'), '.0f'):>17}  "
            f"{_pair(b.get('utilisation_of_quota'), w.get('utilisation_of_quota'), '.0%'):>13}  "
            f"{_pair(b.get('wasted_gpu_hours'), w.get('wasted_gpu_hours'), '.2f'):>13}  "
            f"{_pair(b.get('refused'), w.get('refused'), 'd'):>7}"
        )
    lines.append(
        f"{'all':<12} {report['jobs']:>5}  "
        f"{_pair(base['wait_p50_s'], new['wait_p50_s'], '.0f'):>17}  "
        f"{_pair(base['wait_p95_s'], new['wait_p95_s'], '.0f'):>17}  "
        f"{_pair(base['utilisation'], new['utilisation'], '.0%'):>13}  "
        f"{_pair(base['wasted_gpu_hours'], new['wasted_gpu_hours'], '.2f'):>13}  "
        f"{_pair(base['refused'], new['refused'], 'd'):>7}"
    )
    lines.append("  (quota use: a VC's GPU-hours over its guaranteed GPUs x the span; all: the")
    lines.append("   cluster's utilisation; a VC may use more than its quota opportunistically)")
    if report["changed_most"]:
        lines.append("")
        lines.append("jobs whose wait changed most:")
        for r in report["changed_most"]:
            never = "" if r["started"]["whatif"] else " (never started)"
            lines.append(
                f"  job {r['job_id']} {r['name']} ({r['user'] or '?'}, {r['vc']}, {r['gpus']} "
                f"GPUs): waited {r['baseline_wait_s']:.0f} s -> {r['whatif_wait_s']:.0f} s"
                f"{never} ({r['change_s']:+.0f} s)"
            )
    else:
        lines.append("no job's wait changed")
    return "\n".join(lines)


def _pair(a: Any, b: Any, fmt: str) -> str:
    def one(v: Any) -> str:
        return "-" if v is None else format(v, fmt)

    return f"{one(a)} -> {one(b)}"


def _span(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _at(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")


def write_html(report: dict[str, Any], path: Path) -> None:
    """Waits per VC (p50 and p95), baseline beside what-if, as one self-contained page."""
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise UserError(
            "--html needs plotly: pip install plotly (or pip install labhive, which has it)"
        ) from None
    vcs = list(report["per_vc"])
    fig = go.Figure()
    for side, label in (("baseline", report["baseline"]["label"]),
                        ("whatif", report["whatif"]["label"])):  # fmt: skip
        for stat in ("wait_p50_s", "wait_p95_s"):
            fig.add_bar(
                name=f"{stat[5:8]} {label}",
                x=vcs,
                y=[report["per_vc"][vc][side].get(stat) for vc in vcs],
            )
    fig.update_layout(
        barmode="group",
        title="Wait per VC: the recorded submissions under each setting",
        yaxis_title="wait (s)",
    )
    path.write_text(fig.to_html(include_plotlyjs="cdn", full_html=True))
