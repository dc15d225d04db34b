"""Who waits for the loop's next pass that changed the store: threads (``changed``, the ETA
thread) and async handlers (``next_change``: ``cancel?wait=``), woken after each such pass."""

from __future__ import annotations

import asyncio
import contextlib
import threading


class Changes:
    def __init__(self) -> None:
        self.changed = threading.Condition()  # notified after every pass that changed the store
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._lock = threading.Lock()

    async def next_change(self, timeout: float) -> None:
        """Wait, without holding a thread, for the next pass that changed the store (or for
        ``timeout``)."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter[1].wait(), timeout)
        except TimeoutError:
            pass
        finally:
            with self._lock:
                self._waiters.remove(waiter)

    def notify(self) -> None:
        with self.changed:
            self.changed.notify_all()
        with self._lock:
            waiters = list(self._waiters)
        for aloop, event in waiters:
            # its event loop may have closed: then nobody waits there any more
            with contextlib.suppress(RuntimeError):
                aloop.call_soon_threadsafe(event.set)
