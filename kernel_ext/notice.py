"""The stop notice in the notebook: a banner with the reason and the deadline.

``%load_ext labhive.kernel_ext`` starts the kernel's stop watch (``labhive.on_stop``'s, see
scheduler/drivers/stop_watch.py) with this banner as its display: it shows when the notice arrives
(in the output of the cell running then, or the last one) and again above the output of every
cell run while the notice stands, so a student who comes back to the notebook sees it. Under
papermill the same banner is its plain text.
"""

from __future__ import annotations

import time
from datetime import datetime
from html import escape
from typing import Any

from labhive.scheduler.drivers.stop_watch import Notice, watch


def banner_text(notice: Notice, now: float) -> str:
    """ "LabHive: this server stops at 10:42:00 (in 58 s): culled: idle ... Save your work." """
    deadline = float(notice["deadline"])
    at = datetime.fromtimestamp(deadline).strftime("%H:%M:%S")
    left = max(0, round(deadline - now))
    return (
        f"LabHive: this job stops at {at} (in {left} s): {notice.get('reason', 'stopping')}. "
        "Save your work; labhive.on_stop callbacks have been run."
    )


def banner_html(notice: Notice, now: float) -> str:
    return (
        '<div class="labhive-stop-notice" style="background:#fef3c7;border:1px solid #d97706;'
        f'padding:6px 10px;border-radius:4px;font-weight:600">{escape(banner_text(notice, now))}'
        "</div>"
    )


def show_banner(notice: Notice) -> None:
    from IPython.display import display

    now = time.time()
    bundle = {"text/plain": banner_text(notice, now), "text/html": banner_html(notice, now)}
    display(bundle, raw=True)


def install(ipython: Any) -> None:
    """Banner on arrival and before each cell while the notice stands; the watch started."""
    stop_watch = watch()
    stop_watch.shown = show_banner

    def again(*_: Any) -> None:
        if stop_watch.notice is not None:
            show_banner(stop_watch.notice)

    ipython.events.register("pre_run_cell", again)
    stop_watch.start()
