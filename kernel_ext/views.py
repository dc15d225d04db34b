"""Display objects: a live widget when someone watches, a text/HTML snapshot always.

Every view is shown with a display id and re-published when what it shows changes, so a report
executed by papermill ends with the job's final state ("job a: SUCCEEDED after 12.3 s on
node-1 GPUs 0,1"), not the state at submission. A job is shown once per cell; later cells that
wait on it (``%wait``) update its earlier displays too.
"""

from __future__ import annotations

import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from html import escape
from typing import TYPE_CHECKING, Any, Self

from IPython import get_ipython
from IPython.display import DisplayHandle, display

from labhive.kernel_ext.facts import ClusterFacts, JobFacts, QueueFacts
from labhive.kernel_ext.frontend import interactive
from labhive.kernel_ext.logtail import LogTail
from labhive.kernel_ext.picture import cluster_svg, cluster_text
from labhive.kernel_ext.render import (
    job_html,
    jobs_html,
    jobs_text,
    queue_html,
    queue_text,
    summary_line,
)
from labhive.kernel_ext.snapshot import (
    LOG_LINES,
    JobSnapshot,
    JobSource,
    fetch_snapshot,
    stderr_html,
)

if TYPE_CHECKING:
    from labhive.kernel_ext.widgets import JobWidget, LiveHTML


def _execution_count() -> int | None:
    shell = get_ipython()
    return getattr(shell, "execution_count", None)


class View(ABC):
    """Shared display plumbing: snapshot bundle, optional widget, display handles."""

    def __init__(self, live: bool | None = None) -> None:
        self.live = interactive(get_ipython()) if live is None else live
        self.handles: list[DisplayHandle] = []
        self.widget: Any = None
        self._shown_in: int | None = None

    @abstractmethod
    def text(self) -> str:
        """The ``text/plain`` snapshot."""

    @abstractmethod
    def html(self) -> str:
        """The ``text/html`` snapshot."""

    @abstractmethod
    def make_widget(self) -> Any:
        """The live widget, already polling."""

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = {}
        if self.live:
            if self.widget is None:
                self.widget = self.make_widget()
            bundle.update(self.widget._repr_mimebundle_())
        bundle["text/plain"] = self.text()
        bundle["text/html"] = self.html()
        return bundle

    def show(self) -> Self:
        """Display once per cell, with a display id that later updates reach."""
        count = _execution_count()
        if self._shown_in is not None and self._shown_in == count:
            return self
        self._shown_in = count
        handle = display(self, display_id=True)
        if handle is not None:
            self.handles.append(handle)
        return self

    def publish(self) -> None:
        """Re-send every display of this view with the current snapshot."""
        for handle in self.handles:
            handle.update(self)

    def close(self) -> None:
        if self.widget is not None:
            self.widget.close()


class JobView(View):
    """One job: the widget follows it live; the snapshot is the one-line summary."""

    def __init__(self, job: JobSource, live: bool | None = None) -> None:
        super().__init__(live)
        self.job = job
        self.facts = JobFacts.from_job(job.info)
        self.tail = LogTail(job, LOG_LINES)
        self.log = ""
        self.stderr = ""

    def text(self) -> str:
        return summary_line(self.facts, time.time())

    def html(self) -> str:
        log = f'<pre class="labhive-log">{escape(self.log)}</pre>' if self.log else ""
        return job_html(self.facts, time.time()) + log + stderr_html(self.stderr)

    def make_widget(self) -> JobWidget:
        from labhive.kernel_ext.widgets import JobWidget  # ipywidgets: only when one is shown

        widget = JobWidget(self.job, on_snapshot=self._from_widget)
        return widget.start()

    def _from_widget(self, snap: JobSnapshot) -> None:
        before = (self.facts.state, self.facts.position)
        self.facts, self.log, self.stderr = snap.facts, snap.log, snap.stderr
        if (snap.facts.state, snap.facts.position) != before:
            self.publish()

    def drop_log(self) -> None:
        """Show the job without its log tail (the magic printed it beside the display)."""
        self.log = ""
        self.publish()

    def refresh(self) -> JobFacts:
        snap = fetch_snapshot(self.job, self.tail)
        self.facts, self.log, self.stderr = snap.facts, snap.log, snap.stderr
        return self.facts


#: job id -> its view, so ``%wait`` in a later cell updates the displays made at submission.
_JOB_VIEWS: dict[str, JobView] = {}


def job_view(job: JobSource, live: bool | None = None) -> JobView:
    key = str(job.info.id)
    view = _JOB_VIEWS.get(key)
    if view is None or (live is not None and view.live != live):
        view = JobView(job, live)
        _JOB_VIEWS[key] = view
    else:
        # A later cell (``job``, ``%job``) shows the job as it is now, not as it was cached.
        view.refresh()
    return view


def forget_views() -> None:
    for view in _JOB_VIEWS.values():
        view.close()
    _JOB_VIEWS.clear()


def wait_for(
    view: JobView,
    timeout: float | None = None,
    *,
    interval: float = 0.5,
    progress_every: float = 10.0,
    min_gap: float = 3.0,
    out: Callable[[str], None] | None = None,
) -> JobFacts:
    """Block until the job ends, keeping its displays current and printing sparse progress.

    A progress line is printed when the state or queue position changes, or after
    ``progress_every`` seconds without change, but never twice within ``min_gap`` seconds.
    """
    emit = out or (lambda line: print(line, file=sys.stdout, flush=True))
    start = last_line = time.monotonic()
    last_key: tuple[Any, ...] | None = (view.facts.state, view.facts.position)
    while True:
        facts = view.refresh()
        key = (facts.state, facts.position)
        now = time.monotonic()
        if key != last_key:
            view.publish()
        quiet = now - last_line
        if not facts.terminal and (
            (key != last_key and quiet >= min_gap) or quiet >= progress_every
        ):
            emit(summary_line(facts, time.time()))
            last_line = now
        last_key = key
        if facts.terminal or (timeout is not None and now - start >= timeout):
            return facts
        time.sleep(interval)


class TableView(View):
    """Several jobs (``%jobs``, a sweep): a table that follows them until all have ended."""

    def __init__(self, fetch: Callable[[], Sequence[JobFacts]], live: bool | None = None):
        super().__init__(live)
        self._fetch = fetch
        self.jobs = list(fetch())

    def text(self) -> str:
        return jobs_text(self.jobs, time.time())

    def html(self) -> str:
        return jobs_html(self.jobs, time.time())

    def _render(self) -> str:
        self.jobs = list(self._fetch())
        return self.html()

    def make_widget(self) -> LiveHTML:
        def done(_html: str) -> bool:
            return all(j.terminal for j in self.jobs)

        from labhive.kernel_ext.widgets import LiveHTML

        return LiveHTML(self._render, css_class="labhive-jobs-widget", done=done).start()


class QueueView(View):
    def __init__(self, fetch: Callable[[], QueueFacts], live: bool | None = None):
        super().__init__(live)
        self._fetch = fetch
        self.queue = fetch()

    def text(self) -> str:
        return queue_text(self.queue, time.time())

    def html(self) -> str:
        return queue_html(self.queue, time.time())

    def _render(self) -> str:
        self.queue = self._fetch()
        return self.html()

    def make_widget(self) -> LiveHTML:
        from labhive.kernel_ext.widgets import LiveHTML

        return LiveHTML(self._render, css_class="labhive-queue-widget").start()


class ClusterMapView(View):
    def __init__(self, fetch: Callable[[], ClusterFacts], live: bool | None = None):
        super().__init__(live)
        self._fetch = fetch
        self.cluster = fetch()

    def text(self) -> str:
        return cluster_text(self.cluster)

    def html(self) -> str:
        return cluster_svg(self.cluster)

    def _render(self) -> str:
        self.cluster = self._fetch()
        return self.html()

    def make_widget(self) -> LiveHTML:
        from labhive.kernel_ext.widgets import LiveHTML

        return LiveHTML(self._render, css_class="labhive-cluster-widget", interval=2.0).start()
