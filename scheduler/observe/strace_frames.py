"""A parsed strace log in memory, and its pandas DataFrames (what the widget draws)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from labhive.scheduler.observe.strace_observer import Observer, device_label, strip_device_detail
from labhive.scheduler.observe.strace_parse import LineStats
from labhive.scheduler.observe.strace_records import (
    Call,
    Exit,
    Message,
    Record,
    Signal,
    SummaryRow,
    Unparsed,
)

if TYPE_CHECKING:
    import pandas as pd


def _int_column(values: list[int | None]) -> Any:
    """Nullable integers, or plain objects when a value does not fit in int64 (addresses)."""
    import pandas as pd

    try:
        return pd.array(values, dtype="Int64")
    except (OverflowError, TypeError, ValueError):
        return values


class Trace:
    """Every record of one log (or of several ``-ff`` logs), with the line accounting.

    ``calls``, ``signals``, ``exits``, ``messages``, ``table`` and ``unparsed`` hold the records
    by kind, in log order; ``stats`` says how each line was read."""

    def __init__(self, records: Iterable[Record], stats: LineStats, source: str | None = None):
        self.stats = stats
        self.source = source
        self.observer = Observer()
        self.calls: list[Call] = []
        self.signals: list[Signal] = []
        self.exits: list[Exit] = []
        self.messages: list[Message] = []
        self.table: list[SummaryRow] = []
        self.unparsed: list[Unparsed] = []
        buckets: dict[type, list[Any]] = {
            Call: self.calls,
            Signal: self.signals,
            Exit: self.exits,
            Message: self.messages,
            SummaryRow: self.table,
            Unparsed: self.unparsed,
        }
        add = self.observer.add
        for rec in records:
            add(rec)
            buckets[type(rec)].append(rec)
        self.calls.sort(key=lambda c: c.line)  # joined calls arrive when they complete

    # ------------------------------------------------------------------ DataFrames
    def calls_df(self) -> pd.DataFrame:
        """One row per system call: line, end_line, pid, time (as logged, in seconds), t
        (seconds since the first timestamp), name, args, ret (as printed), retval, errno, note,
        duration (-T), state, fd_path (what the first-argument fd is), device (its group, as
        in :meth:`ioctls`), ioctl (decoded request name for ioctl calls), and when the log has
        them stack (-k frames) and data (-e read=/write= dumps)."""
        import pandas as pd  # lazy: streaming users and the CLI never pay for it

        calls = self.calls
        decode = self.observer.decode_ioctl
        times = [c.time for c in calls]
        t0 = min((t for t in times if t is not None), default=None)
        resolve = self.observer.resolve_path
        paths = [strip_device_detail(resolve(c)) for c in calls]
        ioctl_names: list[str | None] = []
        for c in calls:
            if c.name == "ioctl":
                req = decode(c)
                ioctl_names.append(None if req is None else req.label)
            else:
                ioctl_names.append(None)
        frame = pd.DataFrame(
            {
                "line": [c.line for c in calls],
                "end_line": _int_column([c.end_line for c in calls]),
                "pid": _int_column([c.pid for c in calls]),
                "time": pd.array(times, dtype="Float64"),
                "t": pd.array(
                    [None if t is None or t0 is None else t - t0 for t in times], dtype="Float64"
                ),
                "name": [c.name for c in calls],
                "args": [c.args for c in calls],
                "ret": [c.ret for c in calls],
                "retval": _int_column([c.retval for c in calls]),
                "errno": [c.errno for c in calls],
                "note": [c.note for c in calls],
                "duration": pd.array([c.duration for c in calls], dtype="Float64"),
                "state": [c.state for c in calls],
                "fd_path": paths,
                "device": [None if p is None else device_label(p) for p in paths],
                "ioctl": ioctl_names,
            }
        )
        if any(c.stack for c in calls):
            frame["stack"] = [c.stack for c in calls]
        if any(c.data for c in calls):
            frame["data"] = [c.data for c in calls]
        return frame

    def counts(self) -> pd.DataFrame:
        """Calls per syscall: syscall, calls, errors, seconds (sum of -T durations), share of
        calls; most called first. A log holding only a -c table is read from the table."""
        import pandas as pd  # lazy: streaming users and the CLI never pay for it

        rows = [
            {"syscall": k, "calls": int(v[0]), "errors": int(v[1]), "seconds": v[2]}
            for k, v in self.observer.syscalls.items()
        ]
        if not rows:
            rows = [
                {"syscall": r.syscall, "calls": r.calls, "errors": r.errors, "seconds": r.seconds}
                for r in self.table
                if r.syscall != "total"
            ]
        frame = pd.DataFrame(rows, columns=["syscall", "calls", "errors", "seconds"])
        total = frame["calls"].sum()
        frame["share"] = frame["calls"] / total if total else 0.0
        return frame.sort_values(["calls", "syscall"], ascending=[False, True], ignore_index=True)

    def ioctls(self) -> pd.DataFrame:
        """ioctls by device and request: device, request (name or hex), name, family, number,
        direction, type, type_char, nr, size, count, errors, seconds."""
        import pandas as pd  # lazy: streaming users and the CLI never pay for it

        rows = []
        for s in self.observer.ioctls.values():
            r = s.request
            rows.append(
                {
                    "device": s.device,
                    "request": r.label,
                    "name": r.name,
                    "family": r.family,
                    "number": None if r.number is None else hex(r.number),
                    "direction": r.direction,
                    "type": r.type,
                    "type_char": r.type_char,
                    "nr": r.nr,
                    "size": r.size,
                    "count": s.count,
                    "errors": s.errors,
                    "seconds": s.seconds,
                }
            )
        columns = ["device", "request", "name", "family", "number", "direction", "type"]
        columns += ["type_char", "nr", "size", "count", "errors", "seconds"]
        frame = pd.DataFrame(rows, columns=columns)
        return frame.sort_values(
            ["device", "count", "request"], ascending=[True, False, True], ignore_index=True
        )

    def timeline(self) -> pd.DataFrame:
        """One row per task (process or thread): pid, parent (from clone/fork), start and end
        (seconds since the first timestamp; NaN without timestamps), first_line, last_line,
        calls, errors, busy_seconds (sum of -T durations), exit_code, killed_by, signals."""
        import pandas as pd  # lazy: streaming users and the CLI never pay for it

        tasks = list(self.observer.tasks.values())
        starts = [t.start for t in tasks if t.start is not None]
        t0 = min(starts) if starts else None

        def rel(v: float | None) -> float | None:
            return None if v is None or t0 is None else v - t0

        frame = pd.DataFrame(
            {
                "pid": _int_column([t.pid for t in tasks]),
                "parent": _int_column([t.parent for t in tasks]),
                "start": pd.array([rel(t.start) for t in tasks], dtype="Float64"),
                "end": pd.array([rel(t.end) for t in tasks], dtype="Float64"),
                "first_line": [t.first_line for t in tasks],
                "last_line": [t.last_line for t in tasks],
                "calls": [t.calls for t in tasks],
                "errors": [t.errors for t in tasks],
                "busy_seconds": [t.busy for t in tasks],
                "exit_code": _int_column([t.exit_code for t in tasks]),
                "killed_by": [t.killed_by for t in tasks],
                "signals": [t.signals for t in tasks],
            }
        )
        return frame.sort_values(["first_line"], ignore_index=True)

    def activity(self, bin_seconds: float = 1.0) -> pd.DataFrame:
        """Calls per task per time bin (rows: bin start in seconds; columns: pid); empty
        without timestamps."""
        import pandas as pd  # lazy: streaming users and the CLI never pay for it

        df = self.calls_df()[["pid", "t"]].dropna()
        if df.empty:
            return pd.DataFrame()
        bins = (df["t"].astype(float) // bin_seconds) * bin_seconds
        return df.groupby([bins.rename("t"), "pid"]).size().unstack(fill_value=0)

    def transitions(self) -> pd.DataFrame:
        """The call-transition graph: which syscall a task made right after which (source,
        target, count), most frequent first. Edges never cross tasks."""
        import pandas as pd  # lazy: streaming users and the CLI never pay for it

        rows = [
            {"source": a, "target": b, "count": n}
            for (a, b), n in self.observer.transitions.items()
        ]
        frame = pd.DataFrame(rows, columns=["source", "target", "count"])
        return frame.sort_values(
            ["count", "source", "target"], ascending=[False, True, True], ignore_index=True
        )

    def summary_table(self) -> pd.DataFrame:
        """The -c/-C/-w table(s) in the log, as strace printed them (the ``total`` row too)."""
        import pandas as pd  # lazy: streaming users and the CLI never pay for it

        columns = ["syscall", "calls", "errors", "seconds", "usecs_per_call", "percent_time"]
        return pd.DataFrame(
            [{k: getattr(r, k) for k in columns} for r in self.table], columns=columns
        )

    # ------------------------------------------------------------------ JSON
    def summary(self, top: int | None = None) -> dict[str, Any]:
        """Everything at a glance as one JSON-ready dict: line accounting, syscalls, ioctls
        by device with decoded names, tasks, signals, transitions, the -c table, unparsed
        lines (the first few)."""
        out = {"source": self.source, **self.observer.summary(self.stats, top=top)}
        out["unparsed"] = [{"line": u.line, "text": u.text} for u in self.unparsed[:20]]
        return out

    def to_json(self, top: int | None = None, **kwargs: Any) -> str:
        return json.dumps(self.summary(top), **kwargs)
