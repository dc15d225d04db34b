"""Where a task runs, who owns what there, and how a task becomes its user.

The layout under the service's data directory (every mode set explicitly, whatever the umask)::

    DATA_DIR/                      0711 service   traversable, not listable
      jobs/                        0711 service
        <job>/<attempt>/           0711 service
          <role>-<index>/          0711 service   the task directory (``local.task_dir``)
            launch.json handle.json exit.json     0600 service: the executor's records
            exit.slot              0600 service   exit.json's preallocated stand-in (disk full)
            stdout stderr          0600 service   the supervisor relays the task's output
                                                  into them through pipes, capped (output.py)
            strace.log             0600 task uid  strace (running as the user) writes it
            work/                  0700 task uid  the task's working directory and $HOME,
                                                  removed after --keep-work (service/retention.py)
      disk.reserve                 0600 service   space kept for the store (service/diskspace.py)

A task can reach its own ``work/`` by absolute path (every directory above it lets anyone
through, none lets anyone list it), can write its own output and strace log, and can read
nothing else: the records, the database, the tokens and every other task's directory are the
service's own, 0600/0700. The service reads ``stdout``/``stderr`` to serve them through the API,
which checks ownership. Nothing the service (root) later opens or writes lies in a directory the
user owns, so a user cannot redirect it with a symlink.

Containers (``executors/container.py``) bind-mount the same ``work/`` directory made by
``prepare_task_dir`` and run as the same ``RunAs``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: Anyone may pass through (to reach their own work dir), nobody but the owner may list.
TRAVERSE_ONLY = 0o711
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
WORK_DIR = "work"


@dataclass(frozen=True, slots=True)
class RunAs:
    """The OS identity a task's command runs as; ``switch`` says whether it differs from the
    service's own (only root can switch; otherwise the task runs as the service)."""

    uid: int
    gid: int
    switch: bool
    why: str = ""

    def record(self) -> dict[str, object]:
        out: dict[str, object] = {"uid": self.uid, "gid": self.gid, "separated": self.switch}
        if self.why:
            out["why"] = self.why
        return out


def run_as(uid: int | None, gid: int | None) -> RunAs:
    """Who a task with this launch identity runs as, from this process's point of view.

    Root switches to the task's uid/gid (refusing uid 0: no user command runs as root); anyone
    else runs tasks as itself and the record says that users are then not separated.
    """
    me, my_gid = os.geteuid(), os.getegid()
    if uid is None:
        return RunAs(me, my_gid, False, "the launch names no user identity")
    if uid == 0 or gid == 0:
        raise PermissionError("a task may not run as root (uid or gid 0): give its user another")
    if me != 0:
        if uid == me:
            return RunAs(me, my_gid, False)
        why = f"the service runs as uid {me}, not root, so it cannot switch to uid {uid}"
        return RunAs(me, my_gid, False, why)
    return RunAs(uid, uid if gid is None else gid, True)


def secure_dir(path: Path, mode: int = TRAVERSE_ONLY) -> Path:
    """Create ``path`` (and missing parents) with exactly ``mode``, owned by this process."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)
    return path


def private_file(path: Path, owner: RunAs | None = None) -> Path:
    """Create (or truncate) ``path`` as an empty 0600 file, owned by ``owner`` when given."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, PRIVATE_FILE)
    try:
        os.fchmod(fd, PRIVATE_FILE)
        if owner is not None and owner.switch:
            os.fchown(fd, owner.uid, owner.gid)
    finally:
        os.close(fd)
    return path


def prepare_task_dir(data_dir: Path, task: Path, owner: RunAs) -> Path:
    """Make the task directory (and the 0711 chain down to it from ``data_dir``) and its
    ``work/`` directory, 0700 and owned by the task's uid/gid; return ``work/``."""
    chain = [task, *task.parents]
    below = chain[: chain.index(data_dir)] if data_dir in chain else [task]
    for directory in reversed(below):
        secure_dir(directory)
    work = task / WORK_DIR
    work.mkdir(mode=PRIVATE_DIR)
    os.chmod(work, PRIVATE_DIR)
    if owner.switch:
        os.chown(work, owner.uid, owner.gid)
    return work


def become(uid: int, gid: int) -> None:
    """In a forked child, before exec: drop every group, then the gid, then the uid (in this
    order: after setuid the process could no longer change its groups)."""
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid or os.getgid() != gid:
        raise PermissionError(f"could not become uid {uid} gid {gid}")
