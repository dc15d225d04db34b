"""The service's housekeeping thread: the disk guard's tick, the work-dir retention and the
event journal's (``journal/retention.py``, swept at most every 10 minutes).

Neither may wait for the scheduling loop nor hold it up, so they run in a thread of their own:
the guard every ``interval_s`` (it releases its reserve file when the disk fills, even when no
request comes), the retention every ``retention_every_s`` (a tenth of the retention, between
1 s and 10 min). A failing sweep is logged and tried again at the next tick.
"""

from __future__ import annotations

import logging
import threading
import time

from labhive.scheduler.service.diskspace import DiskGuard
from labhive.scheduler.service.journal.retention import JournalRetention
from labhive.scheduler.service.retention import WorkRetention

log = logging.getLogger("labhive.service.housekeeping")


class Housekeeping:
    def __init__(
        self,
        disk: DiskGuard | None,
        retention: WorkRetention | None,
        interval_s: float = 1.0,
        journal: JournalRetention | None = None,
    ) -> None:
        self.disk = disk
        self.retention = retention
        self.journal = journal
        self._next_journal_sweep = 0.0
        self.interval_s = interval_s
        keep = retention.keep_s if retention is not None else None
        self.retention_every_s = min(max((keep or 0) / 10, 1.0), 600.0)
        self._next_sweep = 0.0
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="housekeeping", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def tick(self) -> None:
        if self.disk is not None:
            self.disk.tend()
        now = time.time()
        if self.retention is not None and now >= self._next_sweep:
            self._next_sweep = now + self.retention_every_s
            for work in self.retention.sweep(now):
                log.info("removed the work dir %s (past --keep-work)", work)
        if self.journal is not None and now >= self._next_journal_sweep:
            self._next_journal_sweep = now + 600.0
            if pruned := self.journal.sweep(now):
                log.info("pruned %d journal passes (past --journal-days)", pruned)

    def _run(self) -> None:
        while not self._done.wait(self.interval_s):
            try:
                self.tick()
            except Exception:  # the next tick tries again; the service goes on
                log.exception("housekeeping failed")
