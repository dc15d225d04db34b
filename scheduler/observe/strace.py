"""strace observation: parse any strace log, decode its ioctls, get pandas DataFrames.

Public API (what the notebook widget uses)::

    from labhive.scheduler.observe.strace import parse_file, run_strace, summarize_file

    trace = parse_file("train.strace.gz")    # plain or .gz, "-" for stdin; any strace form
    trace.calls_df()      # one row per syscall: pid, time, t, name, args, ret, retval, errno,
                          #   duration, state, fd_path, device, ioctl (decoded), ...
    trace.counts()        # calls / errors / seconds per syscall
    trace.ioctls()        # ioctls by device and request, decoded (NV_ESC_RM_CONTROL, UVM_...)
    trace.timeline()      # one row per task: parent, start, end, calls, busy, exit / kill
    trace.activity(0.5)   # calls per task per time bin
    trace.transitions()   # call-transition graph: source, target, count
    trace.summary_table() # the -c/-C/-w table, when the log has one
    trace.summary()       # all of it as one JSON-ready dict (trace.to_json() as text)
    trace.stats           # LineStats: total == parsed + unparsed, lines by kind
    trace.unparsed        # lines not understood, with their numbers

    summarize_file(path)  # the summary dict, streaming: memory independent of log length
    parse_ff("out/trace") # the per-task files of `strace -ff -o out/trace`, as one Trace
    run_strace(["python", "train.py"])  # run under `strace -f -tt -T -y`: (Trace, exit status)

    from labhive.scheduler.observe.ioctl import decode
    decode("_IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2a, 0x20)", "/dev/nvidiactl").name
    # -> 'NV_ESC_RM_CONTROL'

Devices: an ioctl's device is the ``-y`` path of its fd (``-yy``'s ``<char 195:255>`` dropped)
or, without ``-y``, the path the fd was opened with (tracked per task through open/dup/clone);
other targets group as "socket", "pipe", "regular file" or "(fd path unknown)". A GPU request
sent to a non-GPU device is split into its fields but not named.

Lower layers, for streaming use: :func:`strace_parse.iter_records` (lines -> records),
:class:`strace_observer.Observer` (records -> aggregates), :mod:`strace_args` (argument text
-> Python values).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.observe.ioctl import IoctlRequest, decode
from labhive.scheduler.observe.strace_frames import Trace
from labhive.scheduler.observe.strace_observer import Observer
from labhive.scheduler.observe.strace_parse import (
    LineStats,
    cut_note,
    ff_pid,
    iter_records,
    open_log,
)
from labhive.scheduler.observe.strace_records import (
    Call,
    Exit,
    Message,
    Record,
    Signal,
    SummaryRow,
    Unparsed,
)

__all__ = [
    "DEFAULT_FLAGS",
    "Call",
    "Exit",
    "IoctlRequest",
    "LineStats",
    "Message",
    "Record",
    "Signal",
    "SummaryRow",
    "Trace",
    "Unparsed",
    "decode",
    "iter_records",
    "parse_ff",
    "parse_file",
    "parse_lines",
    "run_strace",
    "summarize_file",
]

#: Flags ``run_strace`` uses: follow threads and children, wall-clock times in µs, time spent
#: in each call, and the path behind every descriptor (so ioctls name their device).
DEFAULT_FLAGS: tuple[str, ...] = ("-f", "-tt", "-T", "-y")


def parse_lines(
    lines: Iterable[str], *, pid: int | None = None, source: str | None = None
) -> Trace:
    """Parse strace output lines; ``pid`` is the task of lines that carry no pid column."""
    stats = LineStats()
    return Trace(iter_records(lines, pid=pid, stats=stats), stats, source)


def parse_file(path: str | Path, *, pid: int | None = None) -> Trace:
    """Parse one log file (plain or gzip; ``-`` reads stdin). An ``-ff`` file's pid is taken
    from its name (``trace.604``) unless ``pid`` is given."""
    with open_log(path) as fh:
        return parse_lines(fh, pid=pid if pid is not None else ff_pid(path), source=str(path))


def ff_files(prefix: str | Path) -> list[Path]:
    """The files ``strace -ff -o PREFIX`` wrote: PREFIX.<pid>, in pid order."""
    p = Path(prefix)
    found = [f for f in p.parent.glob(p.name + ".*") if ff_pid(f) is not None]
    return sorted(found, key=lambda f: ff_pid(f) or 0)


def parse_ff(prefix: str | Path) -> Trace:
    """All files of an ``strace -ff -o PREFIX`` run as one trace. Line numbers count through
    the files one after the other, in pid order."""
    files = ff_files(prefix)
    if not files:
        raise UserError(f"no {prefix}.<pid> files: give the prefix passed to strace -ff -o")
    stats = LineStats()

    def records() -> Iterable[Record]:
        offset = 0
        for f in files:
            part = LineStats()
            with open_log(f) as fh:
                for rec in iter_records(fh, pid=ff_pid(f), stats=part):
                    _shift(rec, offset)
                    yield rec
            offset += part.total
            _merge(stats, part)

    return Trace(records(), stats, str(prefix))


def _shift(rec: Record, offset: int) -> None:
    if offset:
        rec.line += offset
        if isinstance(rec, Call) and rec.end_line is not None:
            rec.end_line += offset


def _merge(total: LineStats, part: LineStats) -> None:
    total.total += part.total
    total.parsed += part.parsed
    total.unparsed += part.unparsed
    for k, v in part.kinds.items():
        total.kinds[k] = total.kinds.get(k, 0) + v
    total.time_mode = total.time_mode or part.time_mode


def summarize_file(
    paths: str | Path | Sequence[str | Path], top: int | None = None
) -> dict[str, Any]:
    """The summary of one or more logs without keeping their calls: memory stays bounded
    whatever their length. Several paths are read as one run (e.g. the files of -ff)."""
    if isinstance(paths, str | Path):
        paths = [paths]
    observer = Observer()
    stats = LineStats()
    notes = []
    for path in paths:
        part = LineStats()
        with open_log(path) as fh:
            for rec in iter_records(fh, pid=ff_pid(path), stats=part):
                observer.add(rec)
            note = cut_note(fh, part.total)
        if note:
            notes.append(f"{path}: {note}")
        _merge(stats, part)
    out: dict[str, Any] = {"source": [str(p) for p in paths]}
    out.update(observer.summary(stats, top=top))
    if notes:  # a log still being written: what was there is summarized, and said to be partial
        out["notes"] = notes
    return out


def strace_binary() -> str:
    found = shutil.which("strace")
    if found is None:
        raise UserError("strace is not installed: install it (apt-get install strace)")
    return found


def run_strace(
    command: Sequence[str],
    *,
    flags: Sequence[str] = DEFAULT_FLAGS,
    output: str | Path | None = None,
    timeout: float | None = None,
) -> tuple[Trace, int]:
    """Run ``command`` under strace and parse what it logged. Returns (trace, the command's
    exit status). ``output`` keeps the raw log at that path (else a temporary file is used and
    removed). The command's own stdout/stderr pass through."""
    if not command:
        raise UserError("give a command to trace, e.g. labhive strace run -- python train.py")
    binary = strace_binary()
    fd, tmp = tempfile.mkstemp(prefix="labhive-strace-", suffix=".log")
    os.close(fd)
    log = Path(output) if output is not None else Path(tmp)
    try:
        try:
            proc = subprocess.run(
                [binary, *flags, "-o", str(log), "--", *command], timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise UserError(f"the traced command ran longer than {timeout} s") from None
        if not log.exists() or (proc.returncode != 0 and log.stat().st_size == 0):
            raise UserError(
                f"strace could not trace {command[0]!r} (exit {proc.returncode}): check the "
                "command, and that tracing is allowed here (ptrace, e.g. in containers)"
            )
        return parse_file(log, pid=None), proc.returncode
    finally:
        Path(tmp).unlink(missing_ok=True)  # the log itself when no output was asked for
