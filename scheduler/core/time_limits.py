"""Job time limits: how users write them ("90", "30m", "2h", "1h30m") and how they are shown.

A limit is the most wall-clock seconds one attempt of a job may run; the service stops the job
at its limit (with the grace period, the way a cancellation stops it) and the job ends FAILED
with "time limit of 2 h reached". Declared limits also give the ETA its best durations.
"""

from __future__ import annotations

import re
from typing import Any

#: Seconds per unit suffix; a bare number is seconds.
UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
#: A year: longer than any sensible limit, yet a number every store and clock holds.
MAX_LIMIT_S = 366 * 86400
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(min|s|m|h|d)?", re.IGNORECASE)
HOW = 'seconds or a duration like "90s", "30m", "2h", "1h30m", "1d"'


def parse_time_limit(value: Any) -> float:
    """Seconds from a number or a duration text; ValueError (saying the accepted forms) else."""
    if isinstance(value, bool):
        raise ValueError(f"must be {HOW}, got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        seconds = _parse_text(value.strip())
    else:
        raise ValueError(f"must be {HOW}, got {value!r}")
    if not 0 < seconds <= MAX_LIMIT_S:
        raise ValueError(f"must be more than 0 and at most {MAX_LIMIT_S // 86400} days")
    return seconds


def _parse_text(text: str) -> float:
    pos, total = 0, 0.0
    while pos < len(text):
        match = _PART.match(text, pos)
        if match is None:
            raise ValueError(f"must be {HOW}, got {text!r}")
        unit = (match.group(2) or "s").lower()
        if match.group(2) is None and match.end() < len(text):
            raise ValueError(f"must be {HOW}, got {text!r}")
        total += float(match.group(1)) * UNITS[unit]
        pos = match.end()
        while pos < len(text) and text[pos] == " ":
            pos += 1
    return total


def show_duration(seconds: float) -> str:
    """Short and readable: "45 s", "30 min", "2 h", "1 h 30 min", "2 d"."""
    s = round(seconds)
    if s < 60:
        return f"{s} s" if s == seconds else f"{seconds:g} s"
    if s < 3600:
        m, rest = divmod(s, 60)
        return f"{m} min" + (f" {rest} s" if rest else "")
    if s < 86400 or s % 86400:
        h, rest = divmod(s, 3600)
        return f"{h} h" + (f" {rest // 60} min" if rest // 60 else "")
    return f"{s // 86400} d"


def limit_reached(seconds: float) -> str:
    """The reason a job stopped at its limit ends with."""
    return f"time limit of {show_duration(seconds)} reached"


def deadline(limit: float | None, started_at: float | None) -> float | None:
    """When an attempt that started at ``started_at`` reaches its limit (None: no limit)."""
    if limit is None or started_at is None:
        return None
    return started_at + limit
