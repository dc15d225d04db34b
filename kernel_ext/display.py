"""How job handles and sweep tables show in a notebook, registered with the client.

``labhive.client`` draws nothing itself (it imports no Jupyter and no kernel extension); this
module is the ``Display`` it hands its handles to, registered when ``labhive.kernel_ext`` is
imported, which ``%load_ext labhive.kernel_ext`` does. Jupyter is imported inside the functions,
so registering costs nothing until something is shown.
"""

from __future__ import annotations

from typing import Any

from labhive.scheduler.client import register_display


def show(job: Any) -> Any:
    """Display a job handle as its live view (once per cell); returns the view."""
    from labhive.kernel_ext.views import job_view

    return job_view(job).show()


def show_table(table: Any) -> Any:
    """Display a sweep's ``JobTable`` as a table that follows its jobs until they end; one
    view per table, so the magic's display and the table as the cell's result are one."""
    from labhive.kernel_ext.facts import JobFacts
    from labhive.kernel_ext.views import TableView

    view = getattr(table, "_labhive_view", None)
    if view is None:

        def fetch() -> list[JobFacts]:
            return [JobFacts.from_job(job.refresh().info) for job in table.jobs]

        view = TableView(fetch)
        table._labhive_view = view
    else:
        view.jobs = list(view._fetch())  # shown again: as it is now
    return view.show()


def widget(job: Any) -> Any:
    """The live ipywidget for a job handle, already following it."""
    from labhive.kernel_ext.widgets import JobWidget

    return JobWidget(job).start()


def strace(job: Any, task: str | None, top: int) -> list[Any]:
    """Show a job's strace logs (counts, ioctls, timeline, transitions per task)."""
    from labhive.kernel_ext.strace_view import job_logs, show_logs

    return show_logs(job_logs(job, task), top)


class NotebookDisplay:
    """The client's ``Display``: the functions above."""

    show = staticmethod(show)
    show_table = staticmethod(show_table)
    widget = staticmethod(widget)
    strace = staticmethod(strace)


def register() -> None:
    """Make the client's handles show through this module."""
    register_display(NotebookDisplay())
