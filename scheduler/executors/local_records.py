"""A local task's files as the service reads them: where its directory is, the copy of its
handle, its exit record (or why there is none: a full disk, a command that never started),
its logs and its strace log. Shared with the Slurm executor, whose tasks write the same files.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from labhive.scheduler.core.sizes import MIB
from labhive.scheduler.executors import limits
from labhive.scheduler.executors.base import LaunchError, Stream, TaskKey
from labhive.scheduler.executors.local_procs import _kill_tree
from labhive.scheduler.executors.output import DISK_FULL_ERRNOS
from labhive.scheduler.executors.supervise import CANNOT_START

STRACE_LOG = "strace.log"
#: A copy of the handle's info, so a launch the service never recorded can still be found.
HANDLE_FILE = "handle.json"


#: With no exit record and less than this free where the task lived, the disk filled up.
_DISK_FULL_FREE = 1 * MIB


def task_dir(data_dir: Path, key: TaskKey) -> Path:
    """Where the task lives; a key that would name a path elsewhere is refused."""
    run = f"{key.role}-{key.index}" + (f".g{key.generation}" if key.generation > 1 else "")
    parts = (key.job_id, str(key.attempt), run)
    for part in parts:
        if not part or "/" in part or "\0" in part or part in (".", ".."):
            raise LaunchError(f"task {key} cannot name a directory: {part!r}")
    return data_dir.joinpath("jobs", *parts)


def _retire(work: Path) -> None:
    """Clear the way for a launch whose directory exists: an earlier launch of the same attempt
    that the service never recorded (it died in between). Its processes must not keep the GPUs
    the new launch is given, so they are killed; its files are kept aside for inspection."""
    with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
        info = json.loads((work / HANDLE_FILE).read_text())
        _kill_tree(info)
    set_aside_task_dir(work)


def set_aside_task_dir(work: Path) -> None:
    """Rename an earlier launch's task directory to ``<name>.stale-N``, kept for inspection."""
    n = 1
    while work.with_name(f"{work.name}.stale-{n}").exists():
        n += 1
    work.rename(work.with_name(f"{work.name}.stale-{n}"))


def _read_exit(info: dict[str, Any]) -> dict[str, Any] | None:
    """``exit.json``, else the record the supervisor wrote into the slot (disk full)."""
    for path in (info["exit_file"], info.get("exit_slot")):
        if path is None:
            continue
        try:
            exit_info = json.loads(Path(path).read_text())
        except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(exit_info, dict) and "exit_code" in exit_info:
            return exit_info
    return None


#: The exit code of a task whose command succeeded but whose end could only be recorded in
#: the slot (or not at all) because the disk was full: its output or results may be cut short.
DISK_FULL_EXIT_CODE = 1


def _exit_code(record: dict[str, Any]) -> int:
    code = int(record["exit_code"])
    return DISK_FULL_EXIT_CODE if record.get("disk_full") and code == 0 else code


def _disk_full_at_launch(err: BaseException) -> str | None:
    if isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS:
        return (
            f"disk full: no room for the task's files in the data dir ({err.strerror}); "
            "an admin must free space there"
        )
    return None


def _disk_full_evidence(info: dict[str, Any]) -> str | None:
    """Why a task with no exit record at all ended, when its file system is (nearly) full:
    its supervisor could not even use the slot (it predates it, or the slot is gone)."""
    try:
        st = os.statvfs(info["workdir"])
    except (OSError, KeyError):
        return None
    free = st.f_bavail * st.f_frsize
    if free >= _DISK_FULL_FREE:
        return None
    return (
        f"disk full: the data dir's file system had {free // 1024} KiB free and the task's "
        "supervisor could not record its end; free space there (see docs/admin.md, 'Disk')"
    )


def _describe(record: dict[str, Any], enforced: dict[str, Any]) -> str:
    how = f"killed by {record['signal_name']}" if record.get("signal_name") else ""
    how = how or f"exit code {record['exit_code']}"
    if record.get("disk_full"):
        return (
            f"disk full: the data dir's file system filled up while the task ran ({how}; its "
            "end was recorded in the reserved slot); free space there or lower the work-dir quota"
        )
    if record.get("stopped"):  # the supervisor's own limits: disk quota, output cap
        return str(record["stopped"])
    if limits.oom_killed(enforced):
        mb = enforced["memory"]["bytes"] // limits.MIB
        return f"killed: over its memory limit of {mb} MiB"
    return how + (f" ({record['output_lost']})" if record.get("output_lost") else "")


def _not_started(info: dict[str, Any], record: dict[str, Any]) -> str:
    """Why the command never ran (its cwd refused, say), from the first stderr line the
    supervisor wrote; "" for a command that ran (or one that exits 127 on its own)."""
    if record.get("exit_code") != 127:
        return ""
    try:
        with open(info["stderr"], "rb") as err:
            first = err.readline(1024).decode("utf-8", "replace").rstrip("\n")
    except (OSError, KeyError):
        return ""
    return first.removeprefix("labhive: ") if first.startswith(CANNOT_START) else ""


def strace_observations(info: dict[str, Any] | None) -> list[str]:
    """The task's strace log, when it ran under strace and wrote one."""
    if info is None or info.get("observe") != "strace":
        return []
    path = Path(info["workdir"]) / STRACE_LOG
    return [str(path)] if path.exists() else []


def recorded_info(data_dir: Path, key: TaskKey) -> dict[str, Any] | None:
    """The copy of a task's info in its directory (for a launch the service never recorded)."""
    try:
        info: dict[str, Any] = json.loads((task_dir(data_dir, key) / HANDLE_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return info


def read_log_range(info: dict[str, Any], stream: Stream, offset: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from ``offset`` of the task's stdout or stderr file (named in its
    info); empty when the task wrote nothing there yet. Shared by executors whose tasks write
    their logs to files the service can read (local, Slurm on a shared file system)."""
    if stream not in ("stdout", "stderr"):
        raise ValueError(f"no log stream {stream!r}: the choice is stdout or stderr")
    if offset < 0 or limit < 0:
        raise ValueError("offset and limit must be >= 0")
    try:
        with open(info[stream], "rb") as f:
            f.seek(offset)
            return f.read(limit)
    except FileNotFoundError:
        return b""
