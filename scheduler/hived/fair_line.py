"""A VC's line under fair share: its waiting jobs in the order the scheduler serves them
(priority, their user's rank key, submission), and a job's place in it.

One concept in one place: the position a job shows (``turns.fair_position``, the views) and
a user's standing (``standing``: "5 jobs of users with less usage are ahead of yours") both
read it, so the place a user is told is the place their job has. Pure: built from
(-priority, key, submission, job id) entries (keys: ``fairshare.Ledger.key``, what the
scheduler files accounts by).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

#: A waiting job in the line: (-priority, its user's rank key, submission, job id).
Entry = tuple[int, float, int, str]


class FairLine:
    """A VC's waiting jobs sorted as the pass tries them; each priority's stretch of it."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self.entries = sorted(entries)
        # -priority -> (first, past the last) index of its jobs in ``entries``
        self.levels: dict[int, tuple[int, int]] = {}
        start = 0
        for i, (neg, *_) in enumerate(self.entries):
            if i and neg != self.entries[i - 1][0]:
                self.levels[self.entries[start][0]] = (start, i)
                start = i
        if self.entries:
            self.levels[self.entries[start][0]] = (start, len(self.entries))

    def __len__(self) -> int:
        return len(self.entries)

    def ahead(self, neg: int, key: float, seq: int, job_id: str) -> int:
        """How many jobs the line puts before this one (it need not be in the line)."""
        return bisect.bisect_left(self.entries, (neg, key, seq, job_id))

    def ahead_less_used(self, neg: int, key: float) -> int:
        """Of the jobs ahead of one of this priority and key, those whose user's key is
        lower: at this priority and every higher one (a lower priority is never ahead)."""
        count = 0
        for level, (lo, hi) in self.levels.items():
            if level <= neg:  # (a first element alone: each job with a lower key sorts first)
                count += bisect.bisect_left(self.entries, (level, key), lo, hi) - lo
        return count
