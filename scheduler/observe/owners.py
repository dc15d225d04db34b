"""Which LabHive job a GPU process belongs to.

NVML names the process holding GPU memory (say ``python train.py``); LabHive records the pid it
started (the local executor's supervisor, which leads the task's process group). The GPU
process is that pid or one of its descendants, so a process is mapped to a job by walking up
its parents until a recorded task pid appears; a process whose parent died (reparented to init)
is still found by its process group.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping

import psutil

from labhive.scheduler.observe.prometheus import Owner

#: Deeper than any real launcher chain (shell -> launcher -> python -> workers), and a stop for
#: a pid-reuse loop.
MAX_DEPTH = 32


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` on this machine, None once it is gone or unreadable."""
    try:
        parent = psutil.Process(pid).ppid()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    return parent or None


def process_group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def owner_of(
    pid: int,
    task_pids: Mapping[int, Owner],
    parent_of: Callable[[int], int | None] = parent_pid,
    group_of: Callable[[int], int | None] = process_group,
) -> Owner | None:
    """The owner of ``pid`` or of its nearest recorded ancestor, else of the process group it
    is in; None for a stranger's process."""
    current: int | None = pid
    for _ in range(MAX_DEPTH):
        if current is None or current <= 1:
            break
        if current in task_pids:
            return task_pids[current]
        current = parent_of(current)
    group = group_of(pid)
    return task_pids.get(group) if group is not None and group > 1 else None


def process_owners(
    pids: Iterable[int],
    task_pids: Mapping[int, Owner],
    parent_of: Callable[[int], int | None] = parent_pid,
    group_of: Callable[[int], int | None] = process_group,
) -> dict[int, Owner]:
    """Owners of the GPU processes that belong to LabHive tasks."""
    found = {}
    for pid in pids:
        owner = owner_of(pid, task_pids, parent_of, group_of)
        if owner is not None:
            found[pid] = owner
    return found
