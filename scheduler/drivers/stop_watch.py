"""``labhive.on_stop(callback)``: run code of yours when a stop notice arrives, before SIGTERM.

Inside a LabHive job (a notebook server and its kernels, or a batch task) the service announces
every stop before it happens (service/notices.py): culling, a time limit, preemption, a drain,
a cancel. A watcher thread looks for the notice every ``interval_s`` seconds:

1. ``$LABHIVE_NOTICE_FILE`` (written by the local executor into the task's directory), else
2. the job's ``stopping`` field (``GET /jobs/$LABHIVE_JOB_ID``, with the kernel's token).

On a new notice it calls every callback once with the notice (``reason``, ``deadline`` in epoch
seconds, ``deadline_iso``, ``kind``), in the watcher thread, and the display hook (the kernel
extension's banner). A SIGTERM that arrives first (preemption gives only the grace period)
runs the callbacks not yet run, in the main thread, then carries on as SIGTERM would have.

Callbacks should be quick (a checkpoint write): SIGKILL follows SIGTERM after the grace period.
An error in one is printed and does not stop the others.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType
from typing import Any

from labhive.scheduler.executors.notice_file import ENV, read_notice

Notice = dict[str, Any]
Callback = Callable[[Notice], Any]


class StopWatch:
    """The callbacks and the thread that watches for the notice (one per process)."""

    def __init__(
        self,
        interval_s: float = 1.0,
        fetch: Callable[[], Notice | None] | None = None,
    ) -> None:
        self.interval_s = interval_s
        self.callbacks: list[Callback] = []
        self.shown: Callable[[Notice], None] | None = None  # the kernel extension's banner
        self._fetch = fetch or default_fetch()
        self._lock = threading.Lock()
        self._fired: set[tuple[Any, Any]] = set()  # notices already acted on
        self._thread: threading.Thread | None = None
        self._previous_term: Any = None
        self.notice: Notice | None = None  # the pending notice, once seen

    def add(self, callback: Callback) -> Callback:
        if not callable(callback):
            raise TypeError(f"on_stop needs a function (called with the notice), got {callback!r}")
        with self._lock:
            self.callbacks.append(callback)
        self._start()
        return callback

    def start(self) -> None:
        """Watch (once per process); SIGTERM is caught where called from the main thread."""
        self._start()

    def _start(self) -> None:
        if self._thread is not None:
            return
        if threading.current_thread() is threading.main_thread():
            self._previous_term = signal.signal(signal.SIGTERM, self._on_term)
        self._thread = threading.Thread(target=self._run, name="labhive-on-stop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # a service down now may answer later
                self.check()
            time.sleep(self.interval_s)

    def check(self) -> Notice | None:
        """Look once; act on a notice not seen before. Returns the pending notice."""
        notice = self._fetch()
        self.notice = notice
        if notice is None:
            return None
        self._run_callbacks(notice, first=self.shown)  # the banner, then the callbacks
        return notice

    def _run_callbacks(self, notice: Notice, first: Callable[[Notice], None] | None = None) -> bool:
        """Every callback, once per notice (a withdrawn notice and a later one: twice)."""
        key = (notice.get("deadline"), notice.get("reason"))
        with self._lock:
            if key in self._fired:
                return False
            self._fired.add(key)
            due = list(self.callbacks)
        for callback in [first, *due] if first is not None else due:
            try:
                callback(notice)
            except Exception:
                print("labhive.on_stop: a callback failed:", file=sys.stderr)
                traceback.print_exc()
        return True

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        # the pending notice's callbacks have run already, unless SIGTERM came first
        notice = self.notice or {"reason": "stopped (SIGTERM)", "deadline": 0.0, "kind": "stopping"}
        self._run_callbacks(notice)
        previous = self._previous_term
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)


def default_fetch() -> Callable[[], Notice | None]:
    """The notice file where the executor writes one, else the job's ``stopping`` field."""
    path = os.environ.get(ENV)
    job_id = os.environ.get("LABHIVE_JOB_ID")
    client: Any = None

    def fetch() -> Notice | None:
        nonlocal client
        if path:
            return read_notice(path)
        if not job_id:
            return None
        if client is None:
            from labhive.scheduler.client import connect

            client = connect()
        stopping = client.job(job_id).data.get("stopping")
        return dict(stopping) if stopping else None

    return fetch


_WATCH: StopWatch | None = None


def watch() -> StopWatch:
    """The process's watch: the file every second, the REST field every 10 s (a course of
    200 kernels must not poll the service 200 times a second)."""
    global _WATCH
    if _WATCH is None:
        _WATCH = StopWatch(1.0 if os.environ.get(ENV) else 10.0)
    return _WATCH


def on_stop(callback: Callback) -> Callback:
    """Call ``callback(notice)`` once when this job is told it will stop (see the module
    docstring); usable as a decorator. Returns the callback."""
    return watch().add(callback)
