"""A process's descendants from ``/proc``, and killing them without hitting a reused pid.

The task supervisor (``supervise.py``) needs only this of psutil: one Python process runs per
task and a class of 50 starts two per student on two cores, so it reads ``/proc`` itself rather
than import psutil (~0.035 CPU s of each task's start; docs/hub.md, "A class of 50").

A pid is only a name: one that ended and was reaped may name another process a moment later
(pid_max is small on some machines). Each process is therefore known by its pid and its start
time (``/proc/PID/stat`` field 22), and killed through a pidfd opened while the start time still
matched, so the signal reaches that process or none.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Proc:
    pid: int
    started: int  # clock ticks after boot: with the pid, names one process
    zombie: bool


def _stat(pid: int) -> tuple[int, Proc] | None:
    """(parent pid, the process) from ``/proc/PID/stat``; None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: fields follow the last ')'
    fields = raw[raw.rfind(b")") + 2 :].split()
    return int(fields[1]), Proc(pid, int(fields[19]), fields[0] == b"Z")


def descendants(root: int) -> list[Proc]:
    """Every process below ``root`` (zombies too), found by each process's parent pid."""
    children: dict[int, list[Proc]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            found = _stat(int(name))
            if found is not None:
                children.setdefault(found[0], []).append(found[1])
    below: list[Proc] = []
    todo = [root]
    while todo:
        for proc in children.get(todo.pop(), []):
            below.append(proc)
            todo.append(proc.pid)
    return below


def kill(proc: Proc) -> None:
    """SIGKILL ``proc`` if that very process still runs (not a later one with its pid)."""
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError:
        return  # gone
    try:
        now = _stat(proc.pid)
        if now is not None and now[1].started == proc.started:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
    finally:
        os.close(fd)
