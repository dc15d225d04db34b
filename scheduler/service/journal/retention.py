"""How long the journal keeps its passes (``labhive serve --journal-days N``, default 30):
older passes are deleted by the housekeeping thread (``service/housekeeping.py``)."""

from __future__ import annotations

from labhive.scheduler.service.journal import table
from labhive.scheduler.service.store import Store

DEFAULT_DAYS = 30.0


class JournalRetention:
    def __init__(self, store: Store, keep_s: float | None) -> None:
        self.store = store
        self.keep_s = keep_s  # None: forever

    def sweep(self, now: float) -> int:
        """Delete the passes older than the retention; how many went."""
        if self.keep_s is None:
            return 0
        with self.store.write() as conn:
            return table.prune(conn, now - self.keep_s)
