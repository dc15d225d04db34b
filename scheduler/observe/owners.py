"""Which LabHive job a GPU process belongs to.

NVML names the process holding GPU memory (say ``python train.py``); LabHive records the pid it
started (the task's shell). The GPU process is that pid or one of its descendants, so a process
is mapped to a job by walking up its parents until a recorded task pid appears.
"""

from __future__ import annotations

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


def owner_of(
    pid: int,
    task_pids: Mapping[int, Owner],
    parent_of: Callable[[int], int | None] = parent_pid,
) -> Owner | None:
    """The owner of ``pid`` or of its nearest recorded ancestor; None for a stranger's process."""
    current: int | None = pid
    for _ in range(MAX_DEPTH):
        if current is None or current <= 1:
            return None
        if current in task_pids:
            return task_pids[current]
        current = parent_of(current)
    return None


def process_owners(
    pids: Iterable[int],
    task_pids: Mapping[int, Owner],
    parent_of: Callable[[int], int | None] = parent_pid,
) -> dict[int, Owner]:
    """Owners of the GPU processes that belong to LabHive tasks."""
    found = {}
    for pid in pids:
        owner = owner_of(pid, task_pids, parent_of)
        if owner is not None:
            found[pid] = owner
    return found
