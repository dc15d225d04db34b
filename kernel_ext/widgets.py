"""Live ipywidgets: a job, the queue, the cluster map.

Each widget owns a ``Poller`` that refreshes it from the service and stops when the job ends or
the widget is closed. The HTML inside comes from ``render``, ``picture`` and ``snapshot``, so
the live view and the report snapshot never disagree. Only ``views`` imports this module, and
only when a front end shows a widget (ipywidgets is not free to import: docs/hub.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from html import escape
from typing import Any

import ipywidgets as widgets

from labhive.kernel_ext.logtail import LogTail
from labhive.kernel_ext.poller import Poller
from labhive.kernel_ext.render import job_html
from labhive.kernel_ext.snapshot import (
    LOG_LINES,
    JobSnapshot,
    JobSource,
    fetch_snapshot,
    gpu_html,
    log_html,
    stderr_html,
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
