"""A task's work-dir quota, enforced by a watcher in its supervisor.

The data dir's file system is shared by every task and by the service's own store, so one task
must not be able to fill it. File-system quotas would be exact, but need ext4/XFS project
quotas set up by the admin (``prjquota`` mount option, a project id per directory), and tmpfs,
overlayfs and the hosts LabHive runs on mostly have none. So the supervisor measures what the
task's files take (``usage``: allocated blocks, each inode once, symlinks never followed) and
stops the task once it holds more than its quota.

When it looks again adapts to how close the task is (``next_look``): at most ``interval_s``
apart, but never later than half the time the task needs to fill what is left of its quota at
the faster of its own measured write speed and ``ASSUMED_SPEED`` (what one task writes to page
cache at full speed: 580 MiB/s measured on the ext4 data disk of the test machine, rounded up to
2 GiB/s for faster disks); never sooner than ``MIN_LOOK_S`` apart, nor than ``WALK_SHARE`` times
its last walk took (a tenth of a core at most for a task parked near its quota: 1000 files take
about 14 ms to walk on the loaded test machine, so they are looked at every 0.13 s). Far below
the quota it looks every ``interval_s``; near it, every few tens of milliseconds.

A task can go over by what it writes between two looks: ``dd`` at full speed from an empty work
dir went 2876 MiB past a 64 MiB quota with a fixed 5 s poll, and 20 to 49 MiB with this one
(``benchmarks/bench_disk.py``, docs/local-executor.md); a burst faster than twice the speed
assumed, or from a large tree parked near its quota, can overshoot by more. The output cap bounds
the logs, the service's disk reserve (``service/diskspace.py``) the rest.

Writes are not refused at write time: that needs ext4/XFS project quotas (a ``prjquota`` mount,
a project id per task directory) or a file system per task (a size-limited loop mount), which
the hosts LabHive runs on mostly lack (the test machine's data disk: ext4 without ``prjquota``).
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from labhive.scheduler.core.sizes import show_size

#: A task's write speed the watcher reckons with until it has measured a faster one.
ASSUMED_SPEED = 2 * 1024**3
#: The least time between two looks: a small tree's walk takes well under this.
MIN_LOOK_S = 0.05
#: The wait after a look is at least this many times the look's own walk.
WALK_SHARE = 9


def next_look(quota: int, used: int, speed: float, interval_s: float) -> float:
    """Seconds to the next measurement: half the time the task needs, at ``speed`` (bytes/s,
    its measured one) or ``ASSUMED_SPEED``, whichever is faster, to fill what is left of its
    quota; within ``MIN_LOOK_S``..``interval_s``."""
    left = quota - used
    fastest = max(speed, ASSUMED_SPEED)
    return min(interval_s, max(MIN_LOOK_S, left / fastest / 2))


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
    """Measures ``paths`` (at most ``interval_s`` apart, sooner near the quota: ``next_look``)
    and calls ``stop(reason)`` once over ``quota``."""

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
        self.looks = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="quota", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        self._done.set()

    def _run(self) -> None:
        wait, last_used, last_at = min(self.interval_s, MIN_LOOK_S), 0, time.monotonic()
        while not self._done.wait(wait):
            started = time.monotonic()
            used = usage(self.paths)
            self.peak = max(self.peak, used)
            self.looks += 1
            if used > self.quota:
                self.stop(over_quota_reason(self.quota, used))
                return
            speed = max(0, used - last_used) / max(started - last_at, 1e-3)
            last_used, last_at = used, started
            walked = time.monotonic() - started
            # a huge tree takes long to walk: never spend more than a tenth of the time walking
            # it (a task parked near its quota would otherwise keep a core busy)
            wait = max(next_look(self.quota, used, speed, self.interval_s), WALK_SHARE * walked)
