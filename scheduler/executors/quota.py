"""A task's work-dir quota, enforced by a watcher in its supervisor.

The data dir's file system is shared by every task and by the service's own store, so one task
must not be able to fill it. File-system quotas would be exact, but need ext4/XFS project
quotas set up by the admin (``prjquota`` mount option, a project id per directory), and tmpfs,
overlayfs and the hosts LabHive runs on mostly have none. So the supervisor measures what the
task's files take (``usage``: allocated blocks, each inode once, symlinks never followed) every
``interval_s`` seconds, and stops the task once it holds more than its quota. A task can go over
by what it writes between two looks (at most ``interval_s`` times its write speed); the output
cap bounds its logs, the service's disk reserve (``service/diskspace.py``) the rest.

What counts: the task's ``work/`` directory (its files, a container's bind-mounted working
directory) and its strace log. Not counted: ``/tmp`` and ``/dev/shm`` (shared, see
docs/admin.md), and a container's own root file system (podman's storage, not the data dir).
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from labhive.scheduler.sizes import show_size


def usage(paths: Iterable[Path]) -> int:
    """Bytes allocated to the files under ``paths`` (each inode once: hard links to one file
    count once), never following a symlink; entries that vanish while counted are skipped."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [str(p) for p in paths]
    while stack:
        top = stack.pop()
        try:
            st = os.lstat(top)
        except OSError:
            continue
        total += _count(st, seen)
        if not stat.S_ISDIR(st.st_mode):
            continue
        try:
            with os.scandir(top) as entries:
                for entry in entries:
                    try:
                        est = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISDIR(est.st_mode):
                        stack.append(entry.path)
                    else:
                        total += _count(est, seen)
        except OSError:
            continue
    return total


def _count(st: os.stat_result, seen: set[tuple[int, int]]) -> int:
    key = (st.st_dev, st.st_ino)
    if key in seen:
        return 0
    seen.add(key)
    return st.st_blocks * 512


def over_quota_reason(quota: int, used: int) -> str:
    return (
        f"killed: over its disk quota of {show_size(quota)} (its work dir held "
        f"{used / (1024 * 1024):.1f} MiB); write less, or ask an admin for a larger "
        "--work-quota"
    )


class QuotaWatcher:
    """Measures ``paths`` every ``interval_s`` and calls ``stop(reason)`` once over ``quota``."""

    def __init__(
        self,
        paths: list[Path],
        quota: int,
        interval_s: float,
        stop: Callable[[str], None],
    ) -> None:
        self.paths = paths
        self.quota = quota
        self.interval_s = interval_s
        self.stop = stop
        self.peak = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="quota", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        self._done.set()

    def _run(self) -> None:
        while not self._done.wait(self.interval_s):
            started = time.monotonic()
            used = usage(self.paths)
            self.peak = max(self.peak, used)
            if used > self.quota:
                self.stop(over_quota_reason(self.quota, used))
                return
            # a huge tree takes long to walk: never spend more than half the time walking it
            self._done.wait(time.monotonic() - started)
