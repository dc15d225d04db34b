"""IPython extension: ``%submit`` / ``%%submit`` magics and job widgets.

``%load_ext labhive.kernel_ext`` registers the magics. The extension talks to the service only
through ``labhive.client``; importing it registers ``display`` as the client's display, so the
client's handles show as live views (the client itself never imports Jupyter or this package).
"""

from __future__ import annotations

from typing import Any

from labhive.kernel_ext.display import register, show, show_table, widget

__all__ = ["load_ipython_extension", "show", "show_table", "unload_ipython_extension", "widget"]

register()


def load_ipython_extension(ipython: Any) -> None:
    from labhive.kernel_ext.magics import LabHiveMagics

    ipython.register_magics(LabHiveMagics)
    from labhive.kernel_ext.notice import install

    install(ipython)  # the stop notice's banner (and labhive.on_stop's watch)


def unload_ipython_extension(ipython: Any) -> None:
    from labhive.kernel_ext.views import forget_views

    forget_views()
