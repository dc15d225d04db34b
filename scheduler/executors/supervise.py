"""The small supervisor that stands between the local executor and a task's command.

Run as ``python -m labhive.scheduler.executors.supervise WORKDIR``. It exists so that a task's
end is recorded even when nobody is listening: the job service may be killed -9 while the task
runs, and its successor must still learn the real exit code. So the supervisor, not the service,
waits for the command and writes ``exit.json`` (atomically) in the task's working directory.

It also makes the task behave like a container's PID 1:
- it is a child subreaper, so every process the command forks stays its descendant even after
  ``setsid`` or double-forking, and nothing escapes cleanup;
- when the command ends, whatever it left behind is killed at once (a container's processes die
  with its PID 1);
- it survives the SIGTERM the executor sends to the task's process group, so it can still record
  how the command ended; only the executor's SIGKILL after the grace period stops it.

Limits and identity are applied to the command alone (between fork and exec): the supervisor's
own memory never counts against the task, and the supervisor keeps the service's identity (it
must write ``exit.json`` where the task cannot) while the command joins its cgroups, enters its
working directory and then becomes its user (no supplementary groups, its gid, its uid) before
exec. The launch parameters come from ``launch.json``, written by the executor.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import psutil

from labhive.scheduler.executors import sandbox_mounts
from labhive.scheduler.executors.base import NOT_STARTED
from labhive.scheduler.executors.workdir import become

LAUNCH_FILE = "launch.json"
EXIT_FILE = "exit.json"
_PR_SET_CHILD_SUBREAPER = 36
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _start(launch: dict[str, Any]) -> int:
    """Fork the command with the task's limits and identity; return its pid."""
    pid = os.fork()
    if pid == 0:
        _exec_command(launch)
    return pid


def _exec_command(launch: dict[str, Any]) -> NoReturn:
    """In the forked child: default signal handling, the limits, the private mounts (see
    ``sandbox_mounts``), the working directory, the user, umask 077, then the command."""
    try:
        for sig in _FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        limits = launch.get("limits", {})
        for name, value in limits.get("rlimits", {}).items():
            resource.setrlimit(getattr(resource, name), (value, value))
        for cgroup in filter(None, [limits.get("cgroup"), *limits.get("cgroups", ())]):
            Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))
        sandbox = limits.get("sandbox") or {}
        sandbox_mounts.enter(sandbox)  # as root, in the cgroups: the tmpfs is charged there
        if launch.get("cwd"):  # after the mounts: a work dir under /tmp is the one bound back
            os.chdir(launch["cwd"])  # as the service: the user may not traverse the path to it
        identity = launch.get("run_as") or {}
        if identity.get("separated"):
            become(int(identity["uid"]), int(identity["gid"]))
        if launch.get("user_cwd"):  # chosen by the user: entered as them, never as root
            enter_user_cwd(launch["user_cwd"])
        os.umask(sandbox_mounts.TASK_UMASK)
        os.environ.update(sandbox_mounts.task_env(sandbox))
        argv = launch["argv"]
        os.execvp(argv[0], argv)
    except BaseException as err:  # report why, then die like a shell that cannot exec
        with contextlib.suppress(OSError):
            os.write(2, f"labhive: cannot start the task: {err}\n".encode())
    os._exit(127)


class CwdRefused(OSError):
    """The job's working directory is not one its user may enter and read."""


#: How the task's stderr starts when the command never ran (``_exec_command`` writes it;
#: ``local.py`` makes that first line the attempt's reason).
CANNOT_START = f"labhive: {NOT_STARTED}"


def enter_user_cwd(path: str) -> None:
    """chdir to the job's ``cwd`` with the task's own identity (already dropped): the kernel's
    permission checks are then the user's, so a job cannot make the service look into a
    directory its user could not (the check is the chdir and an access() as the real uid)."""
    try:
        os.chdir(path)
        if not os.access(".", os.R_OK | os.X_OK):
            raise PermissionError(13, "Permission denied (cannot list it)")
    except OSError as err:
        why = err.strerror or str(err)
        if any(Path(path).is_relative_to(p) for p in sandbox_mounts.PRIVATE_PATHS):
            why += " (a task's /tmp and /dev/shm are its own, private: not the host's)"
        raise CwdRefused(
            f"cannot run in {path} as uid {os.getuid()}: {why}; submit from a directory this "
            "user can read, or choose one with --cwd (--no-cwd: a fresh work dir)"
        ) from None


def _wait_for(pid: int) -> int:
    """Reap children (orphans land here too) until ``pid`` ends; return its wait status."""
    while True:
        done, status = os.waitpid(-1, 0)
        if done == pid:
            return status


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def kill_leftovers(timeout_s: float = 5.0) -> int:
    """SIGKILL every remaining descendant; return how many were found."""
    me = psutil.Process()
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = me.children(recursive=True)  # zombies too: reaped here, not left to init
        if not left:
            break
        for proc in filter(is_running, left):
            seen.add(proc.pid)
            with contextlib.suppress(psutil.Error):
                proc.kill()
        _reap()
        time.sleep(0.005)
    return len(seen)


def is_running(proc: psutil.Process) -> bool:
    """Alive, and not a zombie waiting to be reaped."""
    try:
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def exit_record(status: int, leftovers: int) -> dict[str, Any]:
    """Shell conventions: a command killed by signal N ended with 128 + N."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return {
            "exit_code": 128 + sig,
            "signal": sig,
            "signal_name": signal.Signals(sig).name,
            "ended_at": time.time(),
            "leftovers_killed": leftovers,
        }
    return {
        "exit_code": os.waitstatus_to_exitcode(status),
        "signal": None,
        "signal_name": None,
        "ended_at": time.time(),
        "leftovers_killed": leftovers,
    }


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Readers see the whole file or none of it, whenever this process is killed."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(fd, 0o600)  # the service's records: never readable by a task's uid
        out.write(json.dumps(data))
    os.replace(tmp, path)


def main(workdir: str) -> int:
    for sig in _FORWARDED:
        signal.signal(sig, lambda *_: None)
    _become_subreaper()
    work = Path(workdir)
    launch = json.loads((work / LAUNCH_FILE).read_text())
    pid = _start(launch)
    status = _wait_for(pid)
    leftovers = kill_leftovers()
    record = exit_record(status, leftovers)
    write_json_atomic(work / EXIT_FILE, record)
    return int(record["exit_code"]) & 0xFF


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
