"""What one strace line (or a joined unfinished/resumed pair) becomes.

Records are small slotted dataclasses so that a million of them stay cheap to create; anything
costly (argument structure, the fd a call works on) is computed on demand from the raw text
kept in the record.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# A file descriptor argument decorated by -y/-yy: "3</dev/nvidiactl>", "9</dev/nvidiactl<char
# 195:255>>", or with -X verbose "-100 /* AT_FDCWD */</tmp>".
_FD_ARG = re.compile(r"\s*(-?\d+|AT_FDCWD)(?: /\*[^*]*\*/)?(?:<(.*))?")


def angle_content(text: str) -> str | None:
    """The text of a ``<...>`` group whose opening bracket was already consumed, honouring the
    nested ``<char 195:255>`` that -yy adds; None when the group never closes."""
    close = text.find(">")
    if close < 0:
        return None
    if "<" not in text[:close]:  # the usual case: no -yy detail inside
        return text[:close]
    depth = 1
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
            if depth == 0:
                return text[:i]
    return None


def split_fd_path(decorated: str) -> tuple[str, str | None]:
    """Split a -yy path "/dev/nvidiactl<char 195:255>" into ("/dev/nvidiactl", "char 195:255")."""
    if decorated.endswith(">"):
        i = decorated.find("<")
        if i > 0:
            return decorated[:i], decorated[i + 1 : -1]
    return decorated, None


@dataclass(slots=True)
class Call:
    """One system call. ``state`` says how complete it is: ``"complete"`` (one line),
    ``"joined"`` (an ``<unfinished ...>`` line and its ``<... resumed>`` line), ``"unfinished"``
    (never resumed: the task died or the log ends), ``"resumed"`` (its first half is not in the
    log). ``args`` is the raw argument text; :meth:`parsed_args` gives structure. ``path`` is
    the file the first-argument descriptor refers to (from -y, or tracked from the open that
    made it) once an :class:`~labhive.scheduler.observe.strace_observer.Observer` has seen it."""

    line: int
    pid: int | None
    time: float | None
    name: str
    args: str | None
    ret: str | None = None
    retval: int | None = None
    errno: str | None = None
    note: str | None = None
    duration: float | None = None
    state: str = "complete"
    end_line: int | None = None
    stack: list[str] | None = None  # -k frames
    data: list[str] | None = None  # -e read=/write= hex dump lines
    path: str | None = None  # what the first-argument fd refers to; filled by the Observer

    @property
    def fd(self) -> int | None:
        """The first argument when it is a file descriptor number (AT_FDCWD is -100)."""
        if not self.args:
            return None
        m = _FD_ARG.match(self.args)
        if m is None:
            return None
        tok = m.group(1)
        return -100 if tok == "AT_FDCWD" else int(tok)

    @property
    def fd_path(self) -> str | None:
        """The -y path of the first argument ("/dev/nvidiactl"), without the -yy device part."""
        decorated = self.fd_path_decorated
        return None if decorated is None else split_fd_path(decorated)[0]

    @property
    def fd_path_decorated(self) -> str | None:
        """The -y/-yy path of the first argument as strace printed it."""
        if not self.args:
            return None
        m = _FD_ARG.match(self.args)
        if m is None or m.group(2) is None:
            return None
        return angle_content(m.group(2))

    @property
    def ret_path(self) -> str | None:
        """The -y path strace printed after a returned descriptor (``= 3</etc/ld.so.cache>``)."""
        ret = self.ret
        if ret and ret.endswith(">"):
            i = ret.find("<")
            if i > 0:
                return split_fd_path(ret[i + 1 : -1])[0]
        return None

    @property
    def failed(self) -> bool:
        return self.errno is not None

    def parsed_args(self) -> list[Any]:
        """The arguments as Python values (see :mod:`strace_args`); parsed on each call."""
        from labhive.scheduler.observe.strace_args import parse_args

        return parse_args(self.args or "")


@dataclass(slots=True)
class Signal:
    """``--- SIGCHLD {si_signo=SIGCHLD, ...} ---`` or ``--- stopped by SIGSTOP ---``."""

    line: int
    pid: int | None
    time: float | None
    signal: str
    info: str
    stack: list[str] | None = None  # -k: where the task was when the signal came


@dataclass(slots=True)
class Exit:
    """``+++ exited with 0 +++`` (``code``), ``+++ killed by SIGKILL (core dumped) +++``, or
    ``+++ superseded by execve in pid 9 +++`` (a thread's execve ended the leader; the thread
    is ``execve_by``)."""

    line: int
    pid: int | None
    time: float | None
    code: int | None
    signal: str | None
    core_dumped: bool = False
    execve_by: int | None = None


@dataclass(slots=True)
class Message:
    """A line strace wrote about itself: ``strace: Process 668 attached``, ``[ Process PID=12
    runs in 32 bit mode. ]``. ``event`` is "attached"/"detached" when recognised."""

    line: int
    pid: int | None
    text: str
    event: str | None = None


@dataclass(slots=True)
class SummaryRow:
    """One row of a -c/-C/-w table; ``syscall == "total"`` for the closing row. ``extra`` holds
    columns this parser has no field for (strace -U can choose columns)."""

    line: int
    syscall: str
    calls: int | None
    errors: int
    seconds: float | None
    usecs_per_call: float | None
    percent_time: float | None
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Unparsed:
    """A line the parser did not understand, kept whole with its number."""

    line: int
    text: str


Record = Call | Signal | Exit | Message | SummaryRow | Unparsed
