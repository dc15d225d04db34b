"""Streaming aggregates over strace records: counts per syscall, ioctls per device and
request, tasks, signals, call transitions. Memory grows with the number of distinct syscalls,
devices, requests and tasks, never with the length of the log, so a summary of a log of any
size costs the same (``labhive strace parse`` uses only this).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from labhive.scheduler.observe.ioctl import IoctlRequest, decode, device_family
from labhive.scheduler.observe.strace_args import split_args
from labhive.scheduler.observe.strace_fds import FD_CHANGING, FD_FIRST, FORKS, FdTracker
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

_SOCKET_PREFIXES = ("socket:", "UNIX", "TCP", "UDP", "NETLINK", "RAW", "PACKET", "SCTP", "L2TP")
_UNKNOWN_FD = "(fd path unknown)"
#: How many unparsed lines a summary quotes.
UNPARSED_SAMPLES = 20


def device_label(path: str | None) -> str:
    """Group ioctl targets the way people read them: a device keeps its path, sockets and
    pipes are one group each, every other path is "regular file"."""
    if not path:
        return _UNKNOWN_FD
    if path.startswith("/dev/"):
        return path
    if path.startswith(_SOCKET_PREFIXES) or path == "socket":
        return "socket"
    if path.startswith("pipe") or path == "pipe":
        return "pipe"
    if path.startswith("anon_inode") or path == "memfd":
        return path
    return "regular file"


@dataclass(slots=True)
class TaskStats:
    """What one task (process or thread) did."""

    pid: int | None
    parent: int | None = None
    first_line: int = 0
    last_line: int = 0
    start: float | None = None
    end: float | None = None
    calls: int = 0
    errors: int = 0
    busy: float = 0.0  # sum of -T durations
    exit_code: int | None = None
    killed_by: str | None = None
    signals: int = 0


@dataclass(slots=True)
class IoctlStats:
    device: str
    request: IoctlRequest
    count: int = 0
    errors: int = 0
    seconds: float = 0.0


@dataclass
class Observer:
    """Feed it records (:meth:`add`) in log order; read the aggregates or :meth:`summary`."""

    syscalls: dict[str, list[float]] = field(default_factory=dict)  # [calls, errors, seconds]
    ioctls: dict[tuple[str, str], IoctlStats] = field(default_factory=dict)
    tasks: dict[int | None, TaskStats] = field(default_factory=dict)
    signals: dict[str, int] = field(default_factory=dict)
    transitions: dict[tuple[str, str], int] = field(default_factory=dict)
    table: list[SummaryRow] = field(default_factory=list)
    unparsed: list[Unparsed] = field(default_factory=list)
    messages: int = 0
    fds: FdTracker = field(default_factory=FdTracker)
    _last_name: dict[int | None, str] = field(default_factory=dict)
    _decoded: dict[tuple[str, str | None, bool], IoctlRequest | None] = field(default_factory=dict)

    def task(self, pid: int | None) -> TaskStats:
        t = self.tasks.get(pid)
        if t is None:
            t = self.tasks[pid] = TaskStats(pid)
        return t

    def add(self, rec: Record) -> None:
        if isinstance(rec, Call):
            self._call(rec)
        elif isinstance(rec, Exit):
            t = self.task(rec.pid)
            t.exit_code, t.killed_by = rec.code, rec.signal
            self._seen(t, rec.line, rec.time)
            if rec.execve_by is None:
                self.fds.forget(rec.pid)
        elif isinstance(rec, Signal):
            self.signals[rec.signal] = self.signals.get(rec.signal, 0) + 1
            t = self.task(rec.pid)
            t.signals += 1
            self._seen(t, rec.line, rec.time)
        elif isinstance(rec, SummaryRow):
            if len(self.table) < 4096:
                self.table.append(rec)
        elif isinstance(rec, Unparsed):
            if len(self.unparsed) < UNPARSED_SAMPLES:
                self.unparsed.append(rec)
        elif isinstance(rec, Message):
            self.messages += 1

    @staticmethod
    def _seen(t: TaskStats, line: int, time: float | None) -> None:
        if not t.first_line or line < t.first_line:
            t.first_line = line
        t.last_line = max(t.last_line, line)
        if time is not None:
            if t.start is None or time < t.start:
                t.start = time
            if t.end is None or time > t.end:
                t.end = time

    def _call(self, call: Call) -> None:
        name = call.name
        failed = call.errno is not None
        dur = call.duration
        entry = self.syscalls.get(name)
        if entry is None:
            entry = self.syscalls[name] = [0, 0, 0.0]
        entry[0] += 1
        pid = call.pid
        t = self.tasks.get(pid)
        if t is None:
            t = self.task(pid)
        t.calls += 1
        if failed:
            entry[1] += 1
            t.errors += 1
        if dur is not None:
            entry[2] += dur
            t.busy += dur
        line = call.line
        if not t.first_line or line < t.first_line:
            t.first_line = line
        if line > t.last_line:
            t.last_line = line
        time = call.time
        if time is not None:
            if t.start is None or time < t.start:
                t.start = time
            end = time if dur is None else time + dur
            if t.end is None or end > t.end:
                t.end = end
        prev = self._last_name.get(pid)
        if prev is not None:
            key = (prev, name)
            self.transitions[key] = self.transitions.get(key, 0) + 1
        self._last_name[pid] = name
        if name in FD_FIRST:
            self._track_path(call)
            if name == "ioctl":
                self._ioctl(call)
        elif name in FORKS and call.retval and call.retval > 0:
            self.task(call.retval).parent = pid
        if name in FD_CHANGING and "<" not in (call.ret or ""):  # with -y, paths are given
            self.fds.feed(call)

    def _track_path(self, call: Call) -> None:
        """For a log without -y, remember now what the first-argument fd refers to (the
        tables change as the log goes on); with -y the path is read from the text later."""
        args = call.args
        if not args or not args[0].isdecimal():
            return
        i = 1
        while i < len(args) and args[i].isdecimal():
            i += 1
        if i < len(args) and args[i] == "<":
            return  # -y: Call.fd_path_decorated has it
        call.path = self.fds.lookup(call.pid, int(args[:i]))

    def resolve_path(self, call: Call) -> str | None:
        """What the call's first-argument fd refers to: the -y path, else the tracked one."""
        if call.path is None and call.args and call.args[0].isdecimal():
            return call.fd_path_decorated
        return call.path

    def decode_ioctl(self, call: Call) -> IoctlRequest | None:
        """The decoded request of an ioctl call (cached per request text and device kind)."""
        args = call.args or ""
        comma = args.find(", ")
        if comma < 0:
            return None
        rest = args[comma + 2 :]
        request_text = _first_arg(rest)
        device = strip_device_detail(self.resolve_path(call))
        key = (request_text, device_family(device), device is None)
        if key not in self._decoded:
            try:
                self._decoded[key] = decode(request_text, device)
            except (ValueError, KeyError):
                self._decoded[key] = None
        return self._decoded[key]

    def _ioctl(self, call: Call) -> None:
        request = self.decode_ioctl(call)
        if request is None:
            return
        device = device_label(strip_device_detail(self.resolve_path(call)))
        key = (device, request.label)
        stats = self.ioctls.get(key)
        if stats is None:
            stats = self.ioctls[key] = IoctlStats(device, request)
        stats.count += 1
        if call.errno is not None:
            stats.errors += 1
        if call.duration is not None:
            stats.seconds += call.duration

    def summary(self, stats: LineStats | None = None, *, top: int | None = None) -> dict[str, Any]:
        """Everything as one JSON-ready dict (``top`` limits the syscall and edge lists)."""
        syscalls = sorted(self.syscalls.items(), key=lambda kv: (-kv[1][0], kv[0]))
        edges = sorted(self.transitions.items(), key=lambda kv: (-kv[1], kv[0]))
        out: dict[str, Any] = {}
        if stats is not None:
            out["lines"] = {
                "total": stats.total,
                "parsed": stats.parsed,
                "unparsed": stats.unparsed,
                "kinds": stats.kinds,
            }
            out["time_mode"] = stats.time_mode
        out["calls"] = sum(int(v[0]) for v in self.syscalls.values())
        out["errors"] = sum(int(v[1]) for v in self.syscalls.values())
        out["seconds_in_syscalls"] = sum(v[2] for v in self.syscalls.values())
        out["syscalls"] = [
            {"name": k, "calls": int(v[0]), "errors": int(v[1]), "seconds": v[2]}
            for k, v in syscalls[:top]
        ]
        out["ioctls"] = [
            {
                "device": s.device,
                "request": s.request.label,
                **s.request.as_dict(),
                "count": s.count,
                "errors": s.errors,
                "seconds": s.seconds,
            }
            for s in sorted(
                self.ioctls.values(), key=lambda s: (s.device, -s.count, s.request.label)
            )
        ]
        out["tasks"] = [
            {
                "pid": t.pid,
                "parent": t.parent,
                "start": t.start,
                "end": t.end,
                "calls": t.calls,
                "errors": t.errors,
                "busy_seconds": t.busy,
                "exit_code": t.exit_code,
                "killed_by": t.killed_by,
                "signals": t.signals,
            }
            for t in sorted(self.tasks.values(), key=lambda t: (t.first_line, t.pid or 0))
        ]
        out["signals"] = dict(sorted(self.signals.items()))
        out["transitions"] = [{"source": a, "target": b, "count": c} for (a, b), c in edges[:top]]
        out["summary_table"] = [
            {
                "syscall": r.syscall,
                "calls": r.calls,
                "errors": r.errors,
                "seconds": r.seconds,
                "usecs_per_call": r.usecs_per_call,
                "percent_time": r.percent_time,
            }
            for r in self.table
        ]
        out["unparsed"] = [{"line": u.line, "text": u.text} for u in self.unparsed]
        return out


def _first_arg(rest: str) -> str:
    """The first argument of ``rest`` without a full split: ``_IOC(a, b, c, d), 0x7f`` and
    ``0xc020462a /* _IOC(a, b, c, d) */, 0x7f`` keep their inner commas."""
    if rest.startswith("_IO"):
        close = rest.find(")")
        if close > 0:
            return rest[: close + 1]
    end = rest.find(", ")
    comment = rest.find("/*")
    if comment >= 0 and (end < 0 or comment < end):
        close = rest.find("*/", comment)
        return rest if close < 0 else rest[: close + 2]
    if end < 0:
        return split_args(rest)[0] if rest else rest
    return rest[:end]


def strip_device_detail(path: str | None) -> str | None:
    """A -yy path without its device detail: "/dev/nvidiactl<char 195:255>" -> "/dev/nvidiactl"."""
    if path and path.endswith(">") and "<" in path:
        return path[: path.index("<")]
    return path
