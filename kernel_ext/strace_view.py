"""A parsed strace log in a notebook: syscall counts, ioctls by device, a per-task timeline and
the call-transition graph.

The figures come from the strace engine's DataFrames (``Trace.counts()``, ``.ioctls()``,
``.timeline()``, ``.transitions()``); nothing is parsed again here. The pictures are SVG strings
so the same markup fills the widget's tabs and the report's ``text/html``, and no plotting
library or graphviz binary is needed. A log without timestamps still gets a timeline: its
tasks are drawn over log line numbers instead of seconds, and its title says so. Every edge of
the transition graph carries an arrow and its count; a call followed by itself is a loop.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

import pandas as pd

from labhive.kernel_ext.picture import PALETTE
from labhive.kernel_ext.views import View
from labhive.scheduler.core.errors import UserError
from labhive.scheduler.observe.strace import parse_file

TOP = 15  # rows of the count and ioctl tables, edges of the transition graph
MAX_TASKS = 40  # timeline rows: a log of hundreds of workers keeps its busiest
ROW_H, LABEL_W, PLOT_W = 22, 150, 520
KILLED = "#dc2626"
IOCTL_COLUMNS = ["device", "request", "family", "direction", "count", "errors", "seconds"]


def _table_html(frame: pd.DataFrame, css_class: str) -> str:
    if frame.empty:
        return "<p>none</p>"
    return frame.to_html(index=False, classes=css_class, border=0, float_format="{:.6g}".format)


def counts_frame(trace: Any, top: int = TOP) -> pd.DataFrame:
    """The busiest syscalls, their share of all calls in percent."""
    frame = trace.counts().head(top)
    share = (frame.pop("share") * 100).round(1)
    return frame.assign(**{"% of calls": share})


def ioctls_frame(trace: Any, top: int = TOP) -> pd.DataFrame:
    """The ``top`` busiest requests, grouped by device (busiest device first)."""
    frame = trace.ioctls()
    if frame.empty:
        return frame
    frame = frame.nlargest(top, "count", keep="first")
    frame = frame.assign(_device_total=frame.groupby("device")["count"].transform("sum"))
    frame = frame.sort_values(
        ["_device_total", "device", "count"], ascending=[False, True, False], kind="stable"
    )
    return frame[[c for c in IOCTL_COLUMNS if c in frame.columns]]


def _span_axis(tasks: pd.DataFrame) -> tuple[str, str, str]:
    """Seconds when the log has times for every task, log line numbers otherwise."""
    if len(tasks) and tasks["start"].notna().all() and tasks["end"].notna().all():
        return "start", "end", "s"
    return "first_line", "last_line", "line"


def _task_label(row: Any) -> str:
    return "task" if pd.isna(row.pid) else f"pid {row.pid}"


def timeline_svg(trace: Any) -> str:
    """One bar per task from its first to its last call; the tooltip says how it ended."""
    tasks = trace.timeline()
    if tasks.empty:
        return "<p>no tasks</p>"
    hidden = max(0, len(tasks) - MAX_TASKS)
    if hidden:
        tasks = tasks.nlargest(MAX_TASKS, "calls", keep="first").sort_index()
    lo_col, hi_col, unit = _span_axis(tasks)
    lo = float(tasks[lo_col].min())
    hi = float(tasks[hi_col].max())
    scale = PLOT_W / (hi - lo) if hi > lo else 0.0
    height = 30 + len(tasks) * ROW_H + 20
    title = "tasks over time (s)" if unit == "s" else "tasks over the log (no timestamps: by line)"
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="labhive-strace-timeline" '
        f'width="{LABEL_W + PLOT_W + 20}" height="{height}" font-family="sans-serif" '
        'font-size="12">',
        f'<text x="0" y="16" font-weight="bold">{title}</text>',
    ]
    for i, row in enumerate(tasks.itertuples(index=False)):
        y = 26 + i * ROW_H
        x0 = LABEL_W + (float(getattr(row, lo_col)) - lo) * scale
        width = max(2.0, (float(getattr(row, hi_col)) - float(getattr(row, lo_col))) * scale)
        killed = pd.notna(row.killed_by)  # NaN, not None, for a task that exited
        ended = f"killed by {row.killed_by}" if killed else f"exit {row.exit_code}"
        tip = f"{_task_label(row)}: {row.calls} calls, {row.errors} errors, {ended}"
        fill = KILLED if killed else PALETTE[i % len(PALETTE)]
        out.append(f'<text x="0" y="{y + 14}">{escape(_task_label(row))}</text>')
        out.append(
            f'<rect x="{x0:.1f}" y="{y}" width="{width:.1f}" height="{ROW_H - 6}" rx="2" '
            f'fill="{fill}"><title>{escape(tip)}</title></rect>'
        )
    axis_y = 26 + len(tasks) * ROW_H + 12
    first, last = (f"{lo:g} s", f"{hi:g} s") if unit == "s" else (f"line {lo:g}", f"line {hi:g}")
    out.append(f'<text x="{LABEL_W}" y="{axis_y}">{first}</text>')
    out.append(f'<text x="{LABEL_W + PLOT_W}" y="{axis_y}" text-anchor="end">{last}</text>')
    if hidden:
        note = f"{hidden} quieter tasks not drawn"
        out.append(
            f'<text x="{LABEL_W + PLOT_W / 2}" y="{axis_y}" text-anchor="middle">{note}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def transitions_svg(trace: Any, top: int = TOP) -> str:
    """The ``top`` most frequent call-to-call edges, syscalls on a circle, width by count."""
    edges = trace.transitions().head(top)
    if edges.empty:
        return "<p>no transitions</p>"
    names = list(dict.fromkeys([*edges["source"], *edges["target"]]))
    size, radius = 460, 170
    centre = size / 2
    place = {
        name: (
            centre + radius * math.cos(2 * math.pi * i / len(names) - math.pi / 2),
            centre + radius * math.sin(2 * math.pi * i / len(names) - math.pi / 2),
        )
        for i, name in enumerate(names)
    }
    most = int(edges["count"].max())
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="labhive-strace-graph" width="{size}" '
        f'height="{size + 24}" font-family="sans-serif" font-size="12">',
        '<defs><marker id="labhive-arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="9" markerHeight="9" markerUnits="userSpaceOnUse" '
        'orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#6b7280"/></marker></defs>',
        f'<text x="0" y="16" font-weight="bold">top {len(edges)} call transitions</text>',
    ]
    labels = []
    for row in edges.itertuples(index=False):
        (x1, y1), (x2, y2) = place[row.source], place[row.target]
        width = 1 + 5 * row.count / most
        tip = f"<title>{escape(f'{row.source} -> {row.target}: {row.count}')}</title>"
        if row.source == row.target:
            path, (lx, ly) = _self_loop(x1, y1 + 12, centre, radius)
        else:
            # stop short of the target's label so the arrow head stays visible
            length = math.hypot(x2 - x1, y2 - y1) or 1.0
            ex, ey = x2 - (x2 - x1) * 22 / length, y2 - (y2 - y1) * 22 / length
            path = f"M {x1:.1f} {y1 + 12:.1f} L {ex:.1f} {ey + 12:.1f}"
            lx, ly = x1 + (ex - x1) * 0.6, y1 + 12 + (ey - y1) * 0.6
        out.append(
            f'<path d="{path}" fill="none" stroke="#6b7280" stroke-opacity="0.7" '
            f'stroke-width="{width:.1f}" marker-end="url(#labhive-arrow)">{tip}</path>'
        )
        labels.append(
            f'<text x="{lx:.1f}" y="{ly + 4:.1f}" text-anchor="middle" font-size="10" '
            f'fill="#374151" stroke="white" stroke-width="3" paint-order="stroke" '
            f'class="labhive-edge-count">{int(row.count)}</text>'
        )
    out += labels  # over every edge, so no line crosses a count
    for name, (x, y) in place.items():
        out.append(
            f'<text x="{x:.1f}" y="{y + 16:.1f}" text-anchor="middle" font-weight="bold" '
            f'fill="#111827">{escape(name)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _self_loop(x: float, y: float, centre: float, radius: float) -> tuple[str, tuple[float, float]]:
    """A call followed by itself: a loop outside the circle, back into its own name, with
    its arrow; returns the path and where its count goes."""
    ux, uy = (x - centre) / radius, (y - 12 - centre) / radius  # outward, unit length
    px, py = -uy, ux  # along the circle
    sx, sy = x + ux * 10 + px * 8, y + uy * 10 + py * 8
    ex, ey = x + ux * 10 - px * 8, y + uy * 10 - py * 8
    c1 = (sx + ux * 48 + px * 22, sy + uy * 48 + py * 22)
    c2 = (ex + ux * 48 - px * 22, ey + uy * 48 - py * 22)
    path = (
        f"M {sx:.1f} {sy:.1f} C {c1[0]:.1f} {c1[1]:.1f} {c2[0]:.1f} {c2[1]:.1f} {ex:.1f} {ey:.1f}"
    )
    return path, (x + ux * 52, y + uy * 52)


def headline(trace: Any, title: str) -> str:
    """``train.strace: 562 calls, 3 errors, 2 tasks, 41 syscalls``."""
    counts = trace.counts()
    tasks = trace.timeline()
    calls = int(counts["calls"].sum()) if len(counts) else 0
    errors = int(counts["errors"].sum()) if len(counts) else 0
    task_word = "task" if len(tasks) == 1 else "tasks"
    return (
        f"{title}: {calls} calls, {errors} errors, {len(tasks)} {task_word}, {len(counts)} syscalls"
    )


def strace_text(trace: Any, title: str, top: int = 10) -> str:
    """The report's ``text/plain``: the headline, the top syscalls and the top ioctls."""
    counts = counts_frame(trace, top)
    if counts.empty:
        return headline(trace, title)
    parts = [headline(trace, title), "", "top syscalls:", counts.to_string(index=False)]
    ioctls = ioctls_frame(trace, top)
    if len(ioctls):
        cols = ["device", "request", "count"]
        parts += ["", "ioctls by device:", ioctls[cols].to_string(index=False)]
    return "\n".join(parts)


def sections(trace: Any, top: int = TOP) -> list[tuple[str, str]]:
    """The four tabs, as (title, HTML): shared by the widget and the HTML snapshot."""
    return [
        ("syscalls", _table_html(counts_frame(trace, top), "labhive-strace-counts")),
        ("ioctls", _table_html(ioctls_frame(trace, top), "labhive-strace-ioctls")),
        ("timeline", timeline_svg(trace)),
        ("transitions", transitions_svg(trace, top)),
    ]


class StraceView(View):
    """A parsed log: tabs when a front end watches, every section in a row in a report.

    The log does not change once parsed, so unlike the job views nothing polls.
    """

    def __init__(self, trace: Any, title: str, live: bool | None = None, top: int = TOP):
        super().__init__(live)
        self.trace = trace
        self.title = title
        self.top = top

    def text(self) -> str:
        return strace_text(self.trace, self.title)

    def html(self) -> str:
        body = "".join(
            f"<h4>{escape(name)}</h4>{content}" for name, content in sections(self.trace, self.top)
        )
        return (
            f'<div class="labhive-strace"><b>{escape(headline(self.trace, self.title))}</b>'
            f"{body}</div>"
        )

    def make_widget(self) -> Any:
        import ipywidgets as widgets

        parts = sections(self.trace, self.top)
        tabs = widgets.Tab(children=[widgets.HTML(content) for _name, content in parts])
        tabs.titles = tuple(name for name, _content in parts)
        head = widgets.HTML(f"<b>{escape(headline(self.trace, self.title))}</b>")
        return widgets.VBox([head, tabs])


def job_logs(job: Any, task: str | None = None) -> list[tuple[str, str]]:
    """(title, path) of a job's strace logs, as the service lists them.

    The paths are on the service's machine: readable here when the kernel runs beside a local
    executor, which is where ``--observe strace`` writes them.
    """
    found = [o for o in job.client.observations(job.info.id) if o["kind"] == "strace"]
    if task:
        found = [o for o in found if o["task"] == task]
    if not found:
        which = f" for task {task}" if task else ""
        raise UserError(
            f"job {job.info.id} has no strace log{which}; submit it with --observe strace"
        )
    return [(f"job {job.info.id} {o['task']} attempt {o['attempt']}", o["path"]) for o in found]


def show_logs(logs: list[tuple[str, str]], top: int = TOP) -> list[StraceView]:
    """Parse and display each log; a missing or unreadable one is a ``UserError``."""
    return [StraceView(parse_file(path), title, top=top).show() for title, path in logs]
