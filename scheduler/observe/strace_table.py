"""The ``-c/-C/-w`` summary tables of strace: their columns come from the dashes line under the
header, so any set of ``-U`` columns reads; each row becomes a ``SummaryRow``.
"""

from __future__ import annotations

import re

from labhive.scheduler.observe.strace_records import (
    SummaryRow,
)

_DASHES_RE = re.compile(r"-+(?: +-+)*$")


#: Column titles of -c tables (including the ones -U can select) -> SummaryRow fields.
TABLE_COLUMNS = {
    "% time": "percent_time",
    "seconds": "seconds",
    "usecs/call": "usecs_per_call",
    "calls": "calls",
    "errors": "errors",
    "syscall": "syscall",
}


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


class _Table:
    """State of a -c table being read: column spans come from its dashes line."""

    def __init__(self, header: str) -> None:
        self.header = header
        self.columns: list[tuple[int, int | None, str]] | None = None
        self.closed = False  # the dashes line before "total" was seen

    def set_dashes(self, dashes: str) -> None:
        spans = [(m.start(), m.end()) for m in re.finditer(r"-+", dashes)]
        cols = []
        for n, (start, end) in enumerate(spans):
            last = n == len(spans) - 1
            title = (self.header[start:] if last else self.header[start:end]).strip()
            cols.append((start, None if last else end, title))
        self.columns = cols

    def row(self, line_no: int, text: str) -> SummaryRow | None:
        assert self.columns is not None
        values: dict[str, str] = {}
        extra: dict[str, str] = {}
        for start, end, title in self.columns:
            cell = (text[start:] if end is None else text[start:end]).strip()
            key = TABLE_COLUMNS.get(title)
            if key is None:
                extra[title] = cell
            else:
                values[key] = cell
        name = values.get("syscall", "")
        if not name or " " in name:
            return None
        calls = _int(values["calls"]) if "calls" in values else None
        errors = _int(values.get("errors") or "0")
        seconds = _float(values["seconds"]) if "seconds" in values else None
        usecs = _float(values["usecs_per_call"]) if "usecs_per_call" in values else None
        pct = _float(values["percent_time"]) if "percent_time" in values else None
        numbers = [v for k, v in values.items() if k != "syscall" and v]
        if errors is None or any(_float(v) is None for v in numbers):
            return None
        return SummaryRow(line_no, name, calls, errors, seconds, usecs, pct, extra)


def _is_table_header(body: str) -> bool:
    s = body.strip()
    return s.startswith("% time") or ("calls" in s.split() and "syscall" in s.split())


def _table_line(line: str, n: int, table: _Table) -> tuple[SummaryRow | None, _Table | None] | None:
    """A line inside a -c table -> (its row or None, the table state after it); None when the
    line does not belong to the table."""
    if table.columns is None:
        if _DASHES_RE.match(line):
            table.set_dashes(line)
            return None, table
        return None
    if _DASHES_RE.match(line):
        table.closed = True
        return None, table
    row = table.row(n, line)
    if row is None:
        return None
    return row, (None if row.syscall == "total" else table)
