"""strace timestamps -> seconds, as one log's lines arrive (pure: no clock is read).

``-t/-tt`` print a wall clock without a date (``11:17:14.877061``): a jump back of more than
half a day is taken as midnight passing. ``-ttt`` prints epoch seconds, ``-r`` the time since
the previous line, summed here so every record carries a time on one axis.
"""

from __future__ import annotations


class StraceClock:
    """The time state of one log; ``mode`` names the form the last timestamp had."""

    def __init__(self) -> None:
        self.mode: str | None = None  # "clock" (-t/-tt), "epoch" (-ttt), "relative" (-r)
        self._key = ""  # "HH:MM" of the last clock time, and its seconds: most lines share it
        self._base = 0.0
        self._day = 0.0
        self._last = -1.0
        self._rel_sum = 0.0

    def to_seconds(self, ts: str) -> float:
        if ":" in ts:
            return self._clock(ts)
        v = float(ts)
        if v > 1e8:
            self.mode = "epoch"
            return v
        self.mode = "relative"
        self._rel_sum += v
        return self._rel_sum

    def _clock(self, ts: str) -> float:
        """HH:MM:SS[.us]; the hour may carry extra digits."""
        key, _, secs = ts.rpartition(":")
        if key != self._key:
            h, _, m = key.partition(":")
            self._key, self._base = key, int(h) * 3600 + int(m) * 60
        t = self._base + float(secs)
        if t + self._day < self._last - 43200:  # past midnight
            self._day += 86400.0
        t += self._day
        self._last = t
        self.mode = "clock"
        return t
