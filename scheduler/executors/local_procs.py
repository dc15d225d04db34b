"""A local task's processes, found again by pid AND start time (pids are reused fast), and
signalled as one tree: the supervisor's process group plus descendants that left it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil

#: A start time read twice for the same process agrees far better than this; a reused pid
#: cannot have started within it.
_START_TIME_SLACK_S = 0.05


def _process(info: dict[str, Any]) -> psutil.Process | None:
    """The task's supervisor if it is still running: same pid, same start time, not a zombie."""
    try:
        proc = psutil.Process(int(info["pid"]))
        if not _same_start(proc, info):
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except psutil.Error:
        return None


def supervisor_running(info: dict[str, Any]) -> bool:
    """Whether the task's supervisor (and so possibly the task) still runs: nothing of a task's
    directory is removed while it does (``service/retention.py``)."""
    return _process(info) is not None


def _start_ticks(pid: int) -> int | None:
    """The process's start in clock ticks since boot (``/proc/PID/stat`` field 22).

    A wall-clock create time moves when the system clock is stepped (psutil derives it from
    the boot time, which the kernel recomputes from the clock), so a task could look like a
    reused pid after an NTP step; ticks since boot never move.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _same_start(proc: psutil.Process, info: dict[str, Any]) -> bool:
    """Whether ``proc`` is the process the handle recorded, not a later one with its pid."""
    if info.get("start_ticks") is not None:
        return _start_ticks(proc.pid) == int(info["start_ticks"])
    return bool(abs(proc.create_time() - float(info["create_time"])) <= _START_TIME_SLACK_S)


def _killpg(info: dict[str, Any], sig: signal.Signals) -> None:
    """Signal the task's process group, unless its number now belongs to someone else.

    Linux never hands out a pid that still names a live process group, so if a different
    process now has the supervisor's pid, the task's group is gone and must not be signalled.
    """
    try:
        proc = psutil.Process(int(info["pid"]))
        if not _same_start(proc, info):
            return
    except psutil.NoSuchProcess:
        pass
    except psutil.Error:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(int(info["pgid"]), sig)


def _descendants(info: dict[str, Any]) -> list[psutil.Process]:
    proc = _process(info)
    if proc is None:
        return []
    try:
        children: list[psutil.Process] = proc.children(recursive=True)
        return children
    except psutil.Error:
        return []


def _signal_tree(info: dict[str, Any], sig: signal.Signals) -> None:
    """The process group, and descendants that left it (setsid), all get ``sig``."""
    _killpg(info, sig)
    for proc in _descendants(info):
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)


def _kill_tree(info: dict[str, Any], timeout_s: float = 5.0) -> None:
    """SIGKILL the descendants while the supervisor still holds them (it is their subreaper and
    reaps them), let it record the end and leave, and KILL it and its group only if it does
    not."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = _descendants(info)
        if not left:
            break
        for proc in filter(is_running, left):
            with contextlib.suppress(psutil.Error):
                proc.kill()
        time.sleep(0.005)
    while _process(info) is not None and time.monotonic() < deadline:
        time.sleep(0.005)
    last = _process(info)
    if last is not None:
        with contextlib.suppress(psutil.Error):
            last.kill()
    _killpg(info, signal.SIGKILL)


def is_running(proc: psutil.Process) -> bool:
    """Alive, and not a zombie waiting to be reaped."""
    try:
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False
