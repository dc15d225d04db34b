"""A task's own /tmp and /dev/shm, and a /proc that shows it only its own user's processes.

On a shared machine /tmp and /dev/shm are world-writable and outlive every task: a file a task
leaves there stays (with its memory: 65 MB in /dev/shm outlived an OOM-killed job), /dev/shm is
sized to all of RAM, and with the usual umask 022 another user reads what was written there.
And /proc shows every process's command line, the service's and other users' tasks' included.

So the supervisor's child (``supervise._exec_command``), still root, before it becomes the
task's user, puts the command in a mount namespace of its own:

- every mount made private first (``mount --make-rprivate /``), so nothing done here reaches
  the host and nothing the host mounts later reaches in;
- one tmpfs, ``size=`` the task's memory limit, whose two directories, 0700 and owned by the
  task's uid/gid, are bind-mounted on /tmp and /dev/shm: both together hold at most the
  memory limit, also where only an rlimit (which tmpfs escapes) holds the task's memory. Its
  pages are charged to the memory cgroup of the process that writes them (the task's), so
  with a memory cgroup they count against the task's limit as well;
- the service's data directory bound back in at its own path when it lies under /tmp or
  /dev/shm (a task reaches its work dir by absolute path, with the same modes as before);
- a new procfs on /proc with ``hidepid=invisible``: the task sees its own uid's processes only
  (others' /proc/PID do not exist for it, nor does the service's);
- ``TMPDIR=/tmp``; and for every task, here or not, umask 077.

Nothing else is remounted: /dev (GPU device nodes), the work dir, the Python installation and
the rest of the file system are the host's. Not a pid namespace: the task's pids stay the
host's, so stop, kill and adoption work unchanged. The tmpfs goes when the namespace does,
that is when the task's last process exits (the supervisor kills every one when the command
ends), and nothing of it is left anywhere.

Only root can do this (CAP_SYS_ADMIN), and only for a task that runs as its own user: a task
running as the service's own identity could undo it and reads the service's files anyway. So
``plan`` decides per launch, after ``probe`` tried once whether this machine allows it (a
container without CAP_SYS_ADMIN does not), and its record, ``limits["sandbox"]`` in the launch
and the task's handle, says what is applied or why not ("private /tmp: not enforced: ...").
Where the record says enforced and the child then cannot set it up, the task does not start:
a record never claims what was not done. Containers have their own /tmp, /dev/shm (their ipc
namespace's, sized as here: ``container.prepare`` asks podman for it) and /proc (their own pid
namespace), and umask 077 (podman's ``--umask``): ``container`` records that.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from labhive.scheduler.executors.workdir import RunAs

#: New files 0600, new directories 0700: a task's files are its user's alone unless it says
#: otherwise (chmod), wherever it writes them.
TASK_UMASK = 0o077
PRIVATE_PATHS = ("/tmp", "/dev/shm")
#: Inside the tmpfs: one directory per private path (bind-mounted there).
_TMPFS_DIRS = {"/tmp": "tmp", "/dev/shm": "shm"}
PROC_OPTIONS = "hidepid=invisible"
BY_NAMESPACE = "mount namespace"
_PAGE = 4096

_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x2, 0x4, 0x8
_MS_BIND, _MS_REC, _MS_PRIVATE = 0x1000, 0x4000, 0x40000


def container(memory_bytes: int) -> dict[str, Any]:
    """What a container task gets (``container.prepare`` asks podman for it): its own file
    system's /tmp, its own /dev/shm sized as a bare task's private tmpfs, its own pid
    namespace, umask 077."""
    return {
        "enforced": True,
        "by": "container",
        "private": ["/tmp (the container's own file system)", "/dev/shm (its own tmpfs)"],
        "bytes": _pages(memory_bytes),
        "counts": "against the task's memory limit too (the container's memory cgroup)",
        "proc": "the container's own pid namespace: no other process is visible",
        "umask": f"{TASK_UMASK:04o}",
    }


def _pages(size: int) -> int:
    return max(_PAGE, -(-size // _PAGE) * _PAGE)


def plan(owner: RunAs, memory_bytes: int, keep: Path | Sequence[Path], name: str) -> dict[str, Any]:
    """The record of what a bare task's child will set up: also its instructions.

    ``keep`` is the service's data directory, or it and the other host directories its tasks
    must reach (``labhive serve --task-path``: ``labhive up``'s notebook homes and launch
    files), each bound back in where it lies under a private path; ``name`` a name unique to
    the task (its tmpfs's source, so it can be found in mountinfo).
    """
    kept = [keep] if isinstance(keep, Path) else list(keep)
    if os.geteuid() != 0:
        return _not_enforced(f"the service runs as uid {os.geteuid()}, not root")
    if not owner.switch:
        return _not_enforced(
            f"the task runs as the service's own uid {owner.uid} (users are not separated)"
        )
    for i, path in enumerate(kept):  # bound back, it would be the host's /tmp again
        if str(path.resolve()) in PRIVATE_PATHS:
            what = "the data directory" if i == 0 else "a --task-path"
            return _not_enforced(f"{what} is {path} itself: give the service another")
    why = probe()
    if why:
        return _not_enforced(f"this machine refuses a mount namespace: {why}")
    size = _pages(memory_bytes)
    return {
        "enforced": True,
        "by": BY_NAMESPACE,
        "private": list(PRIVATE_PATHS),
        "bytes": size,
        "counts": "against the task's memory limit too where a memory cgroup holds it",
        "owner": [owner.uid, owner.gid],
        "mode": "0700",
        "source": f"labhive-{name}",
        "keep": _outermost([p for p in kept if _under_private(p)]),
        "proc": PROC_OPTIONS,
        "umask": f"{TASK_UMASK:04o}",
    }


def _not_enforced(why: str) -> dict[str, Any]:
    return {
        "enforced": False,
        "why": f"private /tmp: not enforced: {why}",
        "umask": f"{TASK_UMASK:04o}",
    }


def _outermost(paths: list[Path]) -> list[str]:
    """Each directory once, none inside another kept one (binding the outer brings it)."""
    resolved = sorted({p.resolve() for p in paths}, key=lambda p: len(p.parts))
    out: list[Path] = []
    for path in resolved:
        if not any(path.is_relative_to(o) for o in out):
            out.append(path)
    return [str(p) for p in out]


def _under_private(path: Path) -> bool:
    resolved = path.resolve()
    return any(resolved.is_relative_to(p) for p in PRIVATE_PATHS)


# ---- in the supervisor's forked child, as root, before it becomes the task's user -----------


def enter(record: dict[str, Any]) -> None:
    """Set up what ``record`` (from ``plan``) says, in a new mount namespace of this process;
    raise OSError when the kernel refuses any of it (the task must then not start)."""
    if not _ours(record):
        return
    uid, gid = (int(n) for n in record["owner"])
    _unshare(_CLONE_NEWNS)
    _mount("none", "/", None, _MS_REC | _MS_PRIVATE)
    # opened in the new namespace (a bind's source must be one of its mounts), before the
    # tmpfs covers it
    keep = [os.open(p, os.O_PATH | os.O_DIRECTORY) for p in record.get("keep", ())]
    try:
        _private_tmpfs(str(record["source"]), int(record["bytes"]), uid, gid)
        for path, fd in zip(record.get("keep", ()), keep, strict=True):
            _bind_back(fd, path)
        _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, PROC_OPTIONS)
    finally:
        for fd in keep:
            os.close(fd)


def task_env(record: dict[str, Any]) -> dict[str, str]:
    """Variables the command gets: TMPDIR names the private /tmp (the service's own TMPDIR,
    if it has one, lies elsewhere and is shared)."""
    return {"TMPDIR": "/tmp"} if _ours(record) else {}


def _ours(record: dict[str, Any]) -> bool:
    """Whether the child is to set the mounts up (not: not enforced, or done by a container)."""
    return bool(record.get("enforced")) and record.get("by") == BY_NAMESPACE


def _private_tmpfs(source: str, size: int, uid: int, gid: int) -> None:
    """One tmpfs over /tmp, its ``tmp`` and ``shm`` directories bound on /tmp and /dev/shm (the
    bind over /tmp hides the tmpfs's root; the task, without CAP_SYS_ADMIN, cannot unmount)."""
    _mount(source, "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={size},mode=0700")
    for name in _TMPFS_DIRS.values():
        inner = f"/tmp/{name}"
        os.mkdir(inner, 0o700)
        os.chown(inner, uid, gid)
        os.chmod(inner, 0o700)
    for target, name in sorted(_TMPFS_DIRS.items(), key=lambda kv: kv[0] == "/tmp"):
        _mount(f"/tmp/{name}", target, None, _MS_BIND)  # /dev/shm first: /tmp covers the rest


def _bind_back(fd: int, path: str) -> None:
    """The host's directory ``path`` (opened before the tmpfs covered it) at its own path: its
    parents made root's, 0711, as passable and as unlistable as the data directory's."""
    target = Path(path)
    for parent in reversed([target, *target.parents]):
        if not parent.exists():
            os.mkdir(parent, 0o711)
            os.chmod(parent, 0o711)
    _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _unshare(flags: int) -> None:
    if _libc().unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNS): {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    ok = _libc().mount(
        source.encode(),
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    if ok != 0:
        err = ctypes.get_errno()
        what = fstype or "bind"
        raise OSError(err, f"mount {what} on {target}: {os.strerror(err)}")


# ---- can this machine do it? -----------------------------------------------------------------


@functools.cache
def probe() -> str:
    """Empty when a child of this process can unshare its mounts, mount a tmpfs and a procfs
    with hidepid; else why not. Tried once per process, in a throwaway process (unshare is
    refused to a multi-threaded one, as the service is), whose namespace goes with it."""
    if os.geteuid() != 0:
        return f"uid {os.geteuid()} is not root"
    code = "from labhive.scheduler.executors import sandbox_mounts as s; s._probe_here()"
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"the probe did not run: {err}"
    if done.returncode == 0:
        return ""
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[-1] if lines else f"the probe ended with exit code {done.returncode}"


def _probe_here() -> None:
    """The probe's body: ``enter`` itself, for nobody's uid, in this (fresh) process."""
    record = {"enforced": True, "by": BY_NAMESPACE, "bytes": _PAGE, "owner": [65534, 65534]}
    try:
        enter({**record, "source": "labhive-probe", "keep": []})
    except OSError as err:
        with contextlib.suppress(OSError):
            os.write(2, f"{err.strerror}\n".encode())
        os._exit(1)
