"""IPython extension: ``%submit`` / ``%%submit`` magics and job widgets.

``%load_ext labhive.kernel_ext`` registers the magics. The extension talks to the service only
through ``labhive.client``; the client's handles display themselves through ``show`` below,
which is imported lazily so that ``labhive.scheduler`` never imports Jupyter.
"""

from __future__ import annotations

from typing import Any


def load_ipython_extension(ipython: Any) -> None:
    from labhive.kernel_ext.magics import LabHiveMagics

    ipython.register_magics(LabHiveMagics)


def unload_ipython_extension(ipython: Any) -> None:
    from labhive.kernel_ext.views import forget_views

    forget_views()


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
