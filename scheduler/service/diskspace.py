"""Headroom on the data dir's file system, so that a full disk never stops the service.

The data dir holds the store (SQLite), every task's records, logs and work dir. When tasks fill
it, SQLite cannot grow its files and every write fails, cancels and settles included (they
answered 503 before this guard). So:

- below the *reserve* (``--disk-reserve``, default 200 MiB or 1% of the file system, whichever
  is smaller) the service accepts no new work: a submission gets 507 "disk full: ..." saying
  what to do; reads, cancels, ``/health`` and the settling of running tasks go on;
- a *reserve file* (``disk.reserve``, half the reserve, at most 64 MiB, written with real
  bytes at start) keeps space the tasks cannot take: the moment the store is about to write
  with less than that free (``make_room``, called before every write transaction, and the
  housekeeping tick), the file is deleted and the space is the store's. It is made again once
  the file system has the reserve and the file's size free.

Not enforced: a task still writing when the file is released can take that space too; the
per-task work-dir quota and output cap (``executors/quota.py``, ``executors/output.py``) bound
what one task writes, and the admin sizes them so that the tasks that run at once fit.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from pathlib import Path

from labhive.scheduler.core.sizes import MIB, show_size

log = logging.getLogger("labhive.service.disk")

RESERVE_FILE = "disk.reserve"
DEFAULT_RESERVE = 200 * MIB
DEFAULT_RESERVE_FRACTION = 0.01
MAX_RESERVE_FILE = 64 * MIB
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
#: What SQLite (SQLITE_FULL) and PostgreSQL (SQLSTATE 53100) say when their disk is full.
_DISK_FULL_TEXTS = ("database or disk is full", "no space left on device", "could not extend file")


class DiskFull(Exception):
    """The data dir's file system is below the reserve: new work is refused (507)."""


def is_disk_full(err: BaseException) -> bool:
    """Whether ``err`` (or what caused it) says the disk is full."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _DISK_FULL_ERRNOS:
            return True
        if any(text in str(seen).lower() for text in _DISK_FULL_TEXTS):
            return True
        seen = seen.__cause__ or getattr(seen, "orig", None)
        if seen is err:
            break
    return False


def free_bytes(path: Path) -> int:
    """What an unprivileged writer may still allocate there (root-only blocks not counted)."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


class DiskGuard:
    """The reserve of one data dir (see the module docstring); ``reserve`` None turns it off."""

    def __init__(self, data_dir: Path, reserve: int | None = -1) -> None:
        self.data_dir = Path(data_dir)
        if reserve == -1:  # the default: a share of the file system, at most 200 MiB
            st = os.statvfs(self.data_dir)
            reserve = min(
                DEFAULT_RESERVE, int(st.f_blocks * st.f_frsize * DEFAULT_RESERVE_FRACTION)
            )
        self.reserve = reserve or None
        self.file_size = min((self.reserve or 0) // 2, MAX_RESERVE_FILE)
        self.path = self.data_dir / RESERVE_FILE
        self._lock = threading.Lock()
        self.released = False  # the reserve file was given to the store (launches refused)
        self.arm()

    def free(self) -> int:
        return free_bytes(self.data_dir)

    def full(self) -> str | None:
        """Why new work is refused now (the 507's message), or None."""
        if self.reserve is None:
            return None
        free = self.free()
        if free >= self.reserve:
            return None
        return (
            f"disk full: the service's data dir {self.data_dir} has {show_size(free)} free, "
            f"below its reserve of {show_size(self.reserve)}, so no new jobs are accepted; "
            "reads and cancels still work. An admin frees space there (finished jobs' work dirs "
            "go after --keep-work) or grows the file system; then submit again"
        )

    def state(self) -> str:
        """For ``/health`` (which answers anyone: no paths): "ok" or how full it is."""
        if self.reserve is None or (free := self.free()) >= self.reserve:
            return "ok"
        return f"full: {show_size(free)} free, below the reserve of {show_size(self.reserve)}"

    def launch_refusal(self) -> str | None:
        """Why no task may start now, or None: once the disk filled so far that the reserve
        file had to go (or under 1 MiB is left), nothing starts until the reserve is back, so
        a task that fills the disk cannot do it again on its retry while the store needs the
        last space to record its end. Such a launch fails (a retry spent), saying "disk full"."""
        if self.reserve is None:
            return None
        free = self.free()
        if free >= self.reserve or (not self.released and free >= MIB):
            return None
        return (
            f"disk full: the service's data dir has {show_size(free)} free, below its reserve "
            f"of {show_size(self.reserve)}, and the store needs what is left; no task starts "
            "until an admin frees space there"
        )

    def check_submission(self) -> None:
        why = self.full()
        if why is not None:
            raise DiskFull(why)

    def make_room(self) -> None:
        """Before a store write: give the reserve file's space to the store once it is needed."""
        if not self.file_size or self.free() >= self.file_size or not self.path.exists():
            return  # (one statvfs in the common case: a store write pays about 10 us for it)
        with self._lock, contextlib.suppress(FileNotFoundError):
            self.path.unlink()
            self.released = True
            log.warning(
                "the data dir %s is full: released the %s reserve file so the store can write",
                self.data_dir,
                show_size(self.file_size),
            )

    def arm(self) -> None:
        """Make the reserve file when there is room for it and the reserve besides."""
        if not self.file_size or self.path.exists():
            return
        if self.free() < (self.reserve or 0) + self.file_size:
            return
        with self._lock:
            if _write_filled(self.path, self.file_size):
                self.released = False

    def tend(self) -> None:
        """The housekeeping tick: release or remake the reserve file as the space says."""
        self.make_room()
        self.arm()


def _write_filled(path: Path, size: int) -> bool:
    """A file of ``size`` real bytes (zeros written, not a sparse hole: a hole frees nothing);
    one that cannot be completed is removed rather than left half-made."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            block = bytes(MIB)
            left = size
            while left > 0:
                left -= os.write(fd, block[: min(left, MIB)])
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        log.warning("cannot make the disk reserve file %s: %s", path, err)
        return False
    return True
