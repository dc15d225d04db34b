"""Live ipywidgets: a job, the queue, the cluster map.

Each widget owns a ``Poller`` that refreshes it from the service and stops when the job ends or
the widget is closed. The HTML inside comes from ``render`` and ``picture``, so the live view
and the report snapshot never disagree.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any, Protocol

import ipywidgets as widgets

from labhive.kernel_ext.facts import JobFacts
from labhive.kernel_ext.logtail import LogTail
from labhive.kernel_ext.poller import Poller
from labhive.kernel_ext.render import job_html
from labhive.scheduler.client import JobInfo, JobState

LOG_LINES = 15
STDERR_LINES = 10  # of a FAILED job: where a MemoryError or a traceback says why


class JobSource(Protocol):
    """What a job widget needs from a job handle; ``labhive.client.Job`` is one."""

    @property
    def info(self) -> JobInfo: ...

    def refresh(self) -> Any: ...

    def logs(self, offset: int = 0, **kw: Any) -> Any: ...

    def gpu_usage(self) -> list[dict[str, Any]]: ...

    def cancel(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class JobSnapshot:
    facts: JobFacts
    log: str
    gpus: tuple[Mapping[str, Any], ...]
    stderr: str = ""  # the last lines a FAILED job's tasks wrote to stderr
    gpu_note: str = ""  # why a running job shows no GPU readings


def fetch_snapshot(source: JobSource, tail: LogTail) -> JobSnapshot:
    """One poll: the job, what its tasks printed since the last poll, its GPUs' readings
    (or why there are none), and for a failed job the end of its stderr."""
    source.refresh()
    facts = JobFacts.from_job(source.info)
    if facts.state != JobState.WAITING:
        tail.read_new()
    gpus, note = gpu_readings(source, facts) if facts.state == JobState.RUNNING else ((), "")
    stderr = ""
    if facts.state == JobState.FAILED:
        errors = LogTail(source, STDERR_LINES, stream="stderr")
        errors.read_new()
        stderr = errors.text()
    return JobSnapshot(facts, tail.text(), gpus, stderr, note)


def gpu_readings(source: JobSource, facts: JobFacts) -> tuple[tuple[Mapping[str, Any], ...], str]:
    """The GPUs' latest readings, or a sentence saying why the metrics area stays empty."""
    if facts.gpus == 0:
        return (), "this job holds no GPU"
    history = getattr(source, "gpu_history", None)
    if history is None:
        return tuple(source.gpu_usage()), ""
    try:
        doc = history()
    except Exception:
        return (), ""
    if not doc.get("sampling"):
        return (), (
            "no GPU readings: the service samples no GPUs here (a virtual cluster's GPUs are "
            "slots handed to processes, with nothing to measure)"
        )
    current = tuple(doc.get("current") or ())
    return current, "" if current else f"no GPU readings yet (every {doc.get('interval_s')} s)"


def gpu_html(gpus: Sequence[Mapping[str, Any]]) -> str:
    """Utilization and memory bars per GPU the job holds (real devices only)."""
    rows = []
    for gpu in gpus:
        util = float(gpu.get("gpu_util") or 0)
        used = float(gpu.get("fb_used_mib") or 0)
        total = float(gpu.get("fb_total_mib") or 0) or 1.0
        label = f"{gpu.get('node') or ''} GPU {gpu.get('gpu', '?')}".strip()
        rows.append(
            f'<div class="labhive-gpu">{escape(label)}: {util:.0f}% util, '
            f"{used:.0f}/{total:.0f} MiB"
            f'<div style="background:#e5e7eb;width:200px;height:6px">'
            f'<div style="background:#2563eb;width:{2 * min(util, 100):.0f}px;height:6px">'
            "</div></div></div>"
        )
    return "".join(rows)


def log_html(log: str) -> str:
    if not log:
        return ""
    return (
        '<pre class="labhive-log" style="max-height:18em;overflow:auto;margin:2px 0">'
        f"{escape(log)}</pre>"
    )


def stderr_html(stderr: str) -> str:
    """A failed job's last stderr lines, red, under the log."""
    if not stderr:
        return ""
    return (
        f'<div class="labhive-stderr"><b>last lines of stderr</b>'
        '<pre style="color:#b91c1c;max-height:12em;overflow:auto;margin:2px 0">'
        f"{escape(stderr)}</pre></div>"
    )


class JobWidget(widgets.VBox):
    """State with colour, queue position and why, placement, elapsed time, log tail, cancel."""

    def __init__(
        self,
        source: JobSource,
        *,
        interval: float = 0.5,
        on_snapshot: Callable[[JobSnapshot], None] | None = None,
    ) -> None:
        self.source = source
        self.summary = widgets.HTML()
        self.gpu_bars = widgets.HTML()
        self.log_view = widgets.HTML()
        self.cancel_button = widgets.Button(
            description="Cancel", button_style="danger", icon="stop", tooltip="cancel this job"
        )
        self.message = widgets.HTML()
        self.cancel_button.on_click(self._cancel)
        super().__init__(
            [
                self.summary,
                self.gpu_bars,
                self.log_view,
                widgets.HBox([self.cancel_button, self.message]),
            ]
        )
        self.add_class("labhive-job-widget")
        self.snapshot: JobSnapshot | None = None
        self._on_snapshot = on_snapshot
        self.tail = LogTail(source, LOG_LINES)
        self.poller = Poller(
            lambda: fetch_snapshot(source, self.tail),
            self.show,
            lambda snap: snap.facts.terminal,
            interval=interval,
            on_error=self._error,
            name=f"labhive-job-{source.info.id}",
        )

    def start(self) -> JobWidget:
        self.poller.start()
        return self

    def show(self, snap: JobSnapshot) -> None:
        self.snapshot = snap
        self.summary.value = job_html(snap.facts, time.time())
        self.gpu_bars.value = gpu_html(snap.gpus) or (
            f'<div class="labhive-gpu-note" style="color:#6b7280">{escape(snap.gpu_note)}</div>'
            if snap.gpu_note
            else ""
        )
        self.log_view.value = log_html(snap.log) + stderr_html(snap.stderr)
        self.cancel_button.disabled = snap.facts.terminal
        if snap.facts.terminal:  # nothing left to cancel: no dimmed button on a finished job
            self.cancel_button.layout.display = "none"
        if self._on_snapshot is not None:
            self._on_snapshot(snap)

    def _cancel(self, _button: Any) -> None:
        try:
            self.source.cancel()
        except Exception as err:
            self.message.value = f'<span style="color:#dc2626">{escape(str(err))}</span>'
        else:
            self.message.value = "cancel requested"

    def _error(self, err: Exception) -> None:
        self.message.value = f'<span style="color:#dc2626">{escape(str(err))}</span>'

    def close(self) -> None:
        self.poller.stop()
        super().close()


class LiveHTML(widgets.VBox):
    """An HTML picture refreshed from the service (queue, cluster map, job tables).

    Stops when ``done`` says so, when closed, or after ``max_seconds`` (a queue never ends
    by itself); the refresh button brings it up to date after that.
    """

    def __init__(
        self,
        render: Callable[[], str],
        *,
        css_class: str,
        interval: float = 1.0,
        max_seconds: float = 600.0,
        done: Callable[[str], bool] = lambda _: False,
    ) -> None:
        self._render = render
        self.html = widgets.HTML()
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh")
        self.refresh_button.on_click(lambda _b: self.refresh())
        super().__init__([self.html, self.refresh_button])
        self.add_class(css_class)
        self.poller = Poller(
            render, self._set, done, interval=interval, max_seconds=max_seconds, name=css_class
        )

    def start(self) -> LiveHTML:
        self.poller.start()
        return self

    def refresh(self) -> None:
        self._set(self._render())

    def _set(self, html: str) -> None:
        self.html.value = html

    def close(self) -> None:
        self.poller.stop()
        super().close()
