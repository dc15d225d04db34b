"""Lines of strace output -> records, streaming.

The parser takes any strace output form in one pass, without being told which: ``-f`` pid
columns (``[pid  N]`` on stderr, ``N  `` with ``-o``), ``--decode-pids=comm``, ``-t/-tt/-ttt``
and ``-r`` timestamps, ``-i``/``-n`` columns, ``-T`` durations, ``-y/-yy`` paths, ``-X`` forms,
``<unfinished ...>``/``<... resumed>`` pairs (joined per pid), signals, exits, strace's own
messages, ``-k`` stack frames, and the ``-c/-C/-w`` summary tables. A line it does not
understand becomes an :class:`Unparsed` record with its number; every line is counted exactly
once in :class:`LineStats`, so ``parsed + unparsed == total`` always holds.

Speed matters (a training job produces millions of lines): the common case, a complete call,
costs one regex match and a few string splits; argument structure is parsed only on request
(:meth:`Call.parsed_args`). Memory is bounded by the number of tasks with a call in flight.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from labhive.scheduler.observe.strace_clock import StraceClock
from labhive.scheduler.observe.strace_logfile import cut_note, ff_pid, open_log
from labhive.scheduler.observe.strace_records import (
    Call,
    Exit,
    Message,
    Record,
    Signal,
    SummaryRow,
    Unparsed,
    angle_content,
)
from labhive.scheduler.observe.strace_table import (
    TABLE_COLUMNS,
    _is_table_header,
    _Table,
    _table_line,
)

# The names other modules import from here; the tables and log files have modules of their own.
__all__ = [
    "TABLE_COLUMNS",
    "LineStats",
    "cut_note",
    "ff_pid",
    "iter_records",
    "open_log",
    "split_return",
]

# pid column: "[pid  667] " (stderr) or "667   " (-o), either with an optional "<comm>".
_PID = r"(?:\[pid +(\d+)(?:<[^>\]]*>)?\] |(\d+)(?:<[^>\s]*>)? +)?"
# -t/-tt "11:17:14.877061", -ttt "1795346229.453172", -r "     0.000123" (right-aligned).
_TIME = r"(?: *(\d+:\d\d:\d\d(?:\.\d+)?|\d+\.\d+) +)?"
# -n "[ 257] " and -i "[00007f6bbee7eb1d] ".
_COLUMNS = r"(?:\[ *\d+\] )?(?:\[[0-9a-f?]{4,16}\] )?"
_PREFIX = _PID + _TIME + _COLUMNS
_TIME_RE = re.compile(r"\d+:\d\d:\d\d(?:\.\d+)?|\d+\.\d+", re.ASCII)
_PREFIX_RE = re.compile(_PREFIX, re.ASCII)
# The hot path: a complete call. Greedy args find the LAST ") = ", so "=" inside strings is safe.
_CALL_RE = re.compile(_PREFIX + r"([A-Za-z_?][\w?]*)\((.*)\) += (.*)$", re.ASCII)
_RESUMED_RE = re.compile(r"<\.\.\. ([\w?]+) resumed>(.*)$")
# "<pid changed to N ...>": an execve by a thread, finished under the leader's pid
_UNFINISHED_RE = re.compile(
    r"([A-Za-z_?][\w?]*)\((.*?) ?<(?:unfinished|pid changed to \d+) \.\.\.>$"
)
_TAIL_RE = re.compile(r"(.*)\) += (.*)$")
_SIGNAL_RE = re.compile(r"--- (?:stopped by )?(\w+)(?: (.*))? ---$")
_EXIT_RE = re.compile(
    r"\+\+\+ (?:exited with (-?\d+)|killed by (\w+)( \(core dumped\))?"
    r"|superseded by execve in pid (\d+)) \+\+\+$"
)
_MESSAGE_RE = re.compile(
    r"(?:\S*strace: (.*)|\[ (Process PID=.*) \]|(System call usage summary for .*))$"
)
_DETACHED_RE = re.compile(r"([A-Za-z_?][\w?]*)\((.*?) ?<detached \.\.\.>$")
_PROCESS_EVENT_RE = re.compile(r"Process (\d+) (attached|detached)")
_EMBEDDED_MESSAGE_RE = re.compile(r"(.*?)((?:/\S*/)?strace: Process \d+ (?:attached|detached).*)$")
_UNFINISHED_TAIL = " <unfinished ...>"


@dataclass
class LineStats:
    """How every line of a log was accounted for. ``kinds`` counts lines by what they were:
    call, unfinished, resumed, signal, exit, message, stack (-k), dump (-e read=/write=), table,
    blank, unparsed."""

    total: int = 0
    parsed: int = 0
    unparsed: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    time_mode: str | None = None  # "clock" (-t/-tt), "epoch" (-ttt), "relative" (-r) or None


def split_return(ret: str) -> tuple[str, int | None, str | None, str | None, float | None]:
    """``"-1 ENOENT (No such file or directory) <0.000012>"`` -> (value text, value, errno,
    note, duration). The value text keeps a -y path (``3</etc/ld.so.cache>``)."""
    if ret.isdigit() and ret.isascii():  # the common case: "0", "3", "832"
        return ret, int(ret), None, None, None
    duration = None
    if ret.endswith(">"):
        i = ret.rfind(" <")
        if i >= 0:
            d = ret[i + 2 : -1]
            if d[:1].isdigit():
                try:
                    duration = float(d)
                    ret = ret[:i]
                except ValueError:
                    pass
            elif d == "unavailable":
                ret = ret[:i]
    val, _, rest = ret.partition(" ")
    lt = val.find("<")
    if lt > 0:
        if not val.endswith(">"):  # a -y path with a space in it
            inner = angle_content(ret[lt + 1 :])
            if inner is not None:
                end = lt + len(inner) + 2
                val, rest = ret[:end], ret[end:].lstrip()
        num = val[:lt]
    else:
        num = val
    if num == "?":
        retval = None
    else:
        try:
            retval = int(num, 16) if num.startswith("0x") else int(num)
        except ValueError:
            retval = None
    errno = note = None
    if rest:
        if rest[0] == "E":
            errno, _, note = rest.partition(" ")
        else:
            note = rest
        if note and note[0] == "(" and note[-1] == ")":
            note = note[1:-1]
        note = note or None
    return val, retval, errno, note, duration


def iter_records(
    lines: Iterable[str], *, pid: int | None = None, stats: LineStats | None = None
) -> Iterator[Record]:
    """Parse strace output lines (with or without their newline) into records, streaming.

    ``pid`` is the task for lines without a pid column (the file suffix of ``-ff`` logs).
    Unfinished calls are held until their resumed half arrives (then yielded once, joined,
    ``state="joined"``) or until their task exits or the input ends (``state="unfinished"``).
    ``-k`` stack frames are attached to the call they follow before it is yielded.
    ``stats`` (when given) is filled in as the generator finishes.
    """
    reader = _LineReader(pid)
    held: Record | None = None  # the last record, kept back until its -k frames have come
    try:
        for raw in lines:
            got = reader.read(raw)
            if got is None:
                continue
            for rec in got if isinstance(got, list) else (got,):
                if held is not None:
                    yield held
                held = rec
        if held is not None:
            yield held
            held = None
        yield from reader.in_flight()
    finally:
        reader.fill(stats if stats is not None else LineStats())


class _LineReader:
    """One log's parse state, and a small reader per kind of line: complete calls (a fast
    split, then the regex), -c table rows, -k frames and data dumps, and the rare rest."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid  # the task of lines without a pid column
        self.clock = StraceClock()
        self.n = self.n_call = self.n_unparsed = self.n_stack = self.n_dump = 0
        self.kinds: dict[str, int] = {}
        self.pending: dict[int | None, Call] = {}
        self.pids: dict[str, int] = {}  # pid column text -> number (a log has few tasks)
        self.last_call: Call | Signal | None = None  # where -k frames and data dumps go
        self.table: _Table | None = None
        self.fragment: tuple[int, str] | None = None  # a call cut by a message strace wrote

    def read(self, raw: str) -> Record | list[Record] | None:
        """The record(s) one line completes, or None."""
        self.n += 1
        line = raw.rstrip("\r\n")
        first_n = self.n
        if self.fragment is not None and _MESSAGE_RE.match(line) is None:
            first_n, head_text = self.fragment  # stderr form: the call goes on on this line
            self.fragment = None
            line = head_text + line
        if self.table is not None:
            taken, row = self._table_row(line)
            if taken:
                return row
        if not line.endswith(_UNFINISHED_TAIL):
            call = self._fast_call(line, first_n)
            if call is None:
                call = self._regex_call(line, first_n)
            if call is not None:
                self.n_call += 1
                self.last_call = call
                return call
        # --- everything but a complete call: rarer, so clarity over speed ---
        if line.startswith((" > ", " | ")):
            return self._frame_or_dump(line)
        return self._rare(line, first_n)

    def _table_row(self, line: str) -> tuple[bool, SummaryRow | None]:
        """(whether the line belongs to the -c table being read, its row)."""
        assert self.table is not None
        got = _table_line(line, self.n, self.table)
        if got is None:
            self.table = None  # the table ended early: read this line as any other
            return False, None
        row, self.table = got
        self._bump("table")
        return True, row

    def _fast_call(self, line: str, first_n: int) -> Call | None:
        """A complete call, without regex: the LAST " = " splits the return off (strings in
        the arguments may hold " = "), the first "(" ends the name; the prefix is split on
        blanks. None for anything unexpected (the regex reader then tries)."""
        eq = line.rfind(" = ")
        if eq <= 0:
            return None
        head = line[:eq].rstrip(" ")
        lp = head.find("(")
        if lp <= 0 or head[-1] != ")":
            return None
        pre = head[:lp]
        toks = pre.split()
        name = toks.pop() if toks and pre[-1] != " " else ""
        if not name.isidentifier():
            return None
        prefix = self._prefix_tokens(toks) if toks else (self.pid, None)
        if prefix is None:
            return None
        call_pid, ts = prefix
        ret = line[eq + 3 :]
        if ret.isdigit() and ret.isascii():  # most returns: "0", "3"
            val, errno, note, dur = ret, None, None, None
            retval: int | None = int(ret)
        else:
            val, retval, errno, note, dur = split_return(ret)
        time = None if ts is None else self.clock.to_seconds(ts)
        args = head[lp + 1 : -1]
        return Call(first_n, call_pid, time, name, args, val, retval, errno, note, dur)

    def _prefix_tokens(self, toks: list[str]) -> tuple[int | None, str | None] | None:
        """The pid and timestamp of a call's prefix tokens; None when a token is none of the
        columns strace writes (pid, time, -n "[ 257]", -i "[00007f6b...]")."""
        call_pid, ts, i = self.pid, None, 0
        t0 = toks[0]
        if t0.isdecimal():
            call_pid = self.pids.get(t0)
            if call_pid is None:
                call_pid = self.pids[t0] = int(t0)
            i = 1
        elif t0 == "[pid" and len(toks) > 1 and toks[1][:-1].isdecimal():
            call_pid, i = int(toks[1][:-1]), 2
        ok = True
        if i < len(toks) and toks[i][0].isdigit():
            ts = toks[i]
            i += 1
            if not _TIME_RE.fullmatch(ts):
                ok = False
        for tok in toks[i:]:
            if tok[0] != "[" and tok[-1] != "]":
                ok = False
        return (call_pid, ts) if ok else None

    def _regex_call(self, line: str, first_n: int) -> Call | None:
        """A complete call in a form the fast split does not take (``<comm>`` pids, ...)."""
        m = _CALL_RE.match(line)
        if m is None:
            return None
        p1, p2, ts, name, args, ret = m.groups()
        if ret.endswith(_UNFINISHED_TAIL):  # "= " inside an unfinished call's string
            return None
        val, retval, errno, note, dur = split_return(ret)
        call_pid = int(p1 or p2) if (p1 or p2) else self.pid
        time = self.clock.to_seconds(ts) if ts else None
        return Call(first_n, call_pid, time, name, args, val, retval, errno, note, dur)

    def _frame_or_dump(self, line: str) -> Unparsed | None:
        """A " > " -k stack frame or a " | " -e read=/write= dump line, kept with its call."""
        last = self.last_call
        if last is not None and line[1] == ">":
            if last.stack is None:
                last.stack = []
            last.stack.append(line[3:])
            self.n_stack += 1
        elif isinstance(last, Call):
            if last.data is None:
                last.data = []
            last.data.append(line[3:])
            self.n_dump += 1
        else:
            self.n_unparsed += 1
            return Unparsed(self.n, line)
        return None

    def _rare(self, line: str, first_n: int) -> Record | list[Record] | None:
        emit, kind, self.table, attach, cut = _parse_rare(
            line, first_n, self.pid, self.table, self.pending, self.clock.to_seconds
        )
        if cut is not None:
            self.fragment = cut
        if kind == "unparsed":
            self.n_unparsed += 1
        else:
            self._bump(kind)
        if attach is not None:
            self.last_call = attach
        return emit

    def _bump(self, kind: str) -> None:
        self.kinds[kind] = self.kinds.get(kind, 0) + 1

    def in_flight(self) -> Iterator[Call]:
        """The calls never resumed: the log ended first."""
        yield from self.pending.values()
        self.pending.clear()

    def fill(self, st: LineStats) -> None:
        kinds = self.kinds
        kinds["call"] = self.n_call
        kinds["stack"] = self.n_stack
        kinds["dump"] = self.n_dump
        kinds["unparsed"] = self.n_unparsed
        st.total = self.n
        st.unparsed = self.n_unparsed
        st.parsed = self.n - self.n_unparsed
        st.kinds = {k: v for k, v in kinds.items() if v}
        st.time_mode = self.clock.mode


#: What a rare line yields: (what to emit: None, a record or a list of records; the line's
#: kind; the -c table state; the call that following -k stack frames belong to, or None; the
#: head of a call that a message cut, to be continued by the next line, or None).
_Rare = tuple[
    Record | list[Record] | None, str, _Table | None, Call | Signal | None, tuple[int, str] | None
]


def _parse_rare(
    line: str,
    n: int,
    default_pid: int | None,
    table: _Table | None,
    pending: dict[int | None, Call],
    to_seconds: Callable[[str], float],
) -> _Rare:
    """Classify a line that is not a complete call (see ``_Rare`` for what it returns)."""
    if not line.strip():
        return None, "blank", table, None, None
    if _is_table_header(line):
        return None, "table", _Table(line), None, None
    m = _MESSAGE_RE.match(line)
    if m is not None:
        return _message(n, m.group(1) or m.group(2) or m.group(3)), "message", table, None, None
    m = _PREFIX_RE.match(line)
    assert m is not None  # every part of the prefix is optional: it always matches
    p1, p2, ts = m.group(1), m.group(2), m.group(3)
    pid = int(p1 or p2) if (p1 or p2) else default_pid
    body = line[m.end() :]
    time = to_seconds(ts) if ts else None
    got = _task_event(body, n, pid, time, pending)
    if got is not None:
        emit, kind, attach = got
        return emit, kind, table, attach, None
    em = _EMBEDDED_MESSAGE_RE.match(line)
    if em is not None and em.group(1).strip():
        # stderr form: "clone(...|SIGCHLDstrace: Process 9 attached" and the call goes on
        # on the next line; keep the head, report the message.
        msg = _message(n, em.group(2).split("strace: ", 1)[1])
        return msg, "message", table, None, (n, em.group(1))
    return Unparsed(n, line), "unparsed", table, None, None


def _message(n: int, text: str) -> Message:
    """strace's own words; "Process N attached/detached" names the task."""
    ev = _PROCESS_EVENT_RE.match(text)
    return Message(n, int(ev.group(1)) if ev else None, text, ev.group(2) if ev else None)


def _task_event(
    body: str, n: int, pid: int | None, time: float | None, pending: dict[int | None, Call]
) -> tuple[Record | list[Record] | None, str, Call | Signal | None] | None:
    """A line of one task after its prefix: a resumed, unfinished or detached call, a signal
    or an exit -> (what to emit, kind, where -k frames go); None when it is none of them."""
    if body.startswith("<... "):
        emit, attach = _resumed(body, n, pid, time, pending)
        if emit is not None or attach is not None:
            return emit, "resumed", attach
        return None
    if body.endswith("<detached ...>"):
        return _detached(body, n, pid, time)
    if body.endswith((_UNFINISHED_TAIL, " ...>")):
        return _unfinished(body, n, pid, time, pending)
    if body.startswith("--- "):
        return _signal(body, n, pid, time)
    if body.startswith("+++ "):
        return _exit(body, n, pid, time, pending)
    return None


def _unfinished(
    body: str, n: int, pid: int | None, time: float | None, pending: dict[int | None, Call]
) -> tuple[Call | None, str, Call] | None:
    """``name(args <unfinished ...>``: held in flight until its task resumes it."""
    um = _UNFINISHED_RE.match(body)
    if um is None:
        return None
    call = Call(n, pid, time, um.group(1), um.group(2), state="unfinished")
    previous = pending.pop(pid, None)  # a task has one call in flight; keep an odd one
    pending[pid] = call
    return previous, "unfinished", call


def _detached(
    body: str, n: int, pid: int | None, time: float | None
) -> tuple[Call, str, Call] | None:
    """strace let go of the task (-p, then ^C) during this call."""
    dm = _DETACHED_RE.match(body)
    if dm is None:
        return None
    call = Call(n, pid, time, dm.group(1), dm.group(2), note="detached", state="unfinished")
    return call, "unfinished", call


def _signal(
    body: str, n: int, pid: int | None, time: float | None
) -> tuple[Signal, str, Signal] | None:
    """``--- SIGCHLD {...} ---`` or ``--- stopped by SIGSTOP ---``."""
    sm = _SIGNAL_RE.match(body)
    if sm is None:
        return None
    info = "stopped" if body.startswith("--- stopped by ") else (sm.group(2) or "")
    sig = Signal(n, pid, time, sm.group(1), info)
    return sig, "signal", sig


def _exit(
    body: str, n: int, pid: int | None, time: float | None, pending: dict[int | None, Call]
) -> tuple[Record | list[Record], str, None] | None:
    """``+++ exited with 0 +++`` and kin; the task's call in flight will never return."""
    em = _EXIT_RE.match(body)
    if em is None:
        return None
    code = int(em.group(1)) if em.group(1) is not None else None
    execer = int(em.group(4)) if em.group(4) else None
    ex = Exit(n, pid, time, code, em.group(2), bool(em.group(3)), execer)
    flushed = pending.pop(pid, None)
    if execer is not None and execer in pending:
        # a thread's execve replaced the leader: the exec resumes under the leader's pid
        pending[pid] = pending.pop(execer)
    return ([flushed, ex] if flushed is not None else ex), "exit", None


def _resumed(
    body: str, n: int, pid: int | None, time: float | None, pending: dict[int | None, Call]
) -> tuple[Call | None, Call | None]:
    """Join ``<... name resumed>rest`` with its task's unfinished call.

    Returns (the call to emit, the call stack frames attach to); (None, None) when the line
    is not a well-formed resumed line."""
    rm = _RESUMED_RE.match(body)
    if rm is None:
        return None, None
    name, rest = rm.group(1), rm.group(2)
    first = pending.pop(pid, None)
    if first is not None and first.name != name:
        pending[pid] = first  # not ours: leave it in flight
        first = None
    if first is None and pid is not None and None in pending and pending[None].name == name:
        first = pending.pop(None)  # stderr form: the task had no pid column when it started
    if first is None and pid is None:
        # stderr form: the task lost its pid column when the others ended; join with the one
        # call of that name in flight, if only one is.
        same = [k for k, c in pending.items() if c.name == name]
        if len(same) == 1:
            first = pending.pop(same[0])
    tm = _TAIL_RE.match(rest)
    if tm is None:
        if rest.endswith(_UNFINISHED_TAIL) and first is not None:  # interrupted again
            first.args = (first.args or "") + rest[: -len(_UNFINISHED_TAIL)]
            pending[pid] = first
            return None, first
        if first is not None:
            pending[pid] = first
        return None, None
    tail, ret = tm.groups()
    if tail.endswith(_UNFINISHED_TAIL):  # "<... poll resumed> <unfinished ...>) = ?"
        tail = tail[: -len(_UNFINISHED_TAIL)]
    val, retval, errno, note, dur = split_return(ret)
    if first is None:
        orphan = Call(n, pid, time, name, None, val, retval, errno, note, dur, "resumed", n)
        return orphan, orphan
    first.args = (first.args or "") + tail
    first.ret, first.retval, first.errno, first.note = val, retval, errno, note
    first.duration = dur
    first.state = "joined"
    first.end_line = n
    if first.pid is None:
        first.pid = pid
    return first, first
