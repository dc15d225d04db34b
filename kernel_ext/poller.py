"""A background thread that refreshes a view while what it shows can still change.

ipywidgets sends a trait change from any thread, so a plain thread keeps a widget live after
its cell has returned. The rate is capped at 4 Hz (a notebook full of widgets must not flood
the service), and the thread ends when the view says it is done or when it is stopped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

MAX_HZ = 4.0
MAX_BACKOFF_S = 5.0


class Poller(Generic[T]):
    """Calls ``fetch`` every ``interval`` seconds and hands the result to ``update``.

    ``done(result)`` ends the loop (a job reached a final state); ``stop()`` ends it from
    outside (the widget closed); ``max_seconds`` bounds views that never finish on their own.
    A failing ``fetch`` goes to ``on_error`` and the loop backs off rather than dying.
    """

    def __init__(
        self,
        fetch: Callable[[], T],
        update: Callable[[T], None],
        done: Callable[[T], bool] = lambda _: False,
        *,
        interval: float = 0.5,
        max_seconds: float | None = None,
        on_error: Callable[[Exception], None] | None = None,
        name: str = "labhive-poller",
    ) -> None:
        self.interval = max(interval, 1.0 / MAX_HZ)
        self._fetch, self._update, self._done = fetch, update, done
        self._on_error = on_error
        self._max_seconds = max_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.polls = 0

    def start(self) -> Poller[T]:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        delay = self.interval
        deadline = None
        if self._max_seconds is not None:
            deadline = threading.Event()
            timer = threading.Timer(self._max_seconds, deadline.set)
            timer.daemon = True
            timer.start()
        while not self._stop.is_set() and not (deadline and deadline.is_set()):
            try:
                result = self._fetch()
            except Exception as err:
                if self._on_error is not None:
                    self._on_error(err)
                delay = min(delay * 2, MAX_BACKOFF_S)
            else:
                delay = self.interval
                self.polls += 1
                self._update(result)
                if self._done(result):
                    return
            self._stop.wait(delay)
