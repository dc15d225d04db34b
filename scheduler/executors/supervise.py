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

Disk use (see docs/local-executor.md, "Disk"): the command's stdout and stderr are pipes the
supervisor relays into the log files, capped (``output.py``); a watcher measures the task's work
dir and stops the task over its quota (``quota.py``), and the exit record says why. When the
record cannot be written because the file system is full, it goes into ``exit.slot``, a file the
executor created at its full size before the task started, so the end is still known (and
counted as a failure that says "disk full", not as a lost task that would run again).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

from labhive.scheduler.executors import sandbox_mounts
from labhive.scheduler.executors.descendants import descendants, kill
from labhive.scheduler.executors.not_started import NOT_STARTED
from labhive.scheduler.executors.output import DISK_FULL_ERRNOS, Pipes, Relay
from labhive.scheduler.executors.quota import QuotaWatcher
from labhive.scheduler.executors.workdir import become

LAUNCH_FILE = "launch.json"
EXIT_FILE = "exit.json"
#: The exit record's reserved place: spaces (JSON's whitespace) until the record is written
#: over its start, so writing it needs no new blocks on a full file system.
EXIT_SLOT = "exit.slot"
EXIT_SLOT_SIZE = 4096
#: How long the relays may take to drain the pipes once every descendant is gone.
_DRAIN_S = 2.0
_PR_SET_CHILD_SUBREAPER = 36
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _start(launch: dict[str, Any], pipes: Pipes) -> int:
    """Fork the command with the task's limits and identity, its output into ``pipes``;
    return its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            pipes.in_child()
        except BaseException:
            os._exit(127)
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
    me = os.getpid()
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = descendants(me)  # zombies too: reaped here, not left to init
        if not left:
            break
        for proc in left:
            if not proc.zombie:
                seen.add(proc.pid)
                kill(proc)
        _reap()
        time.sleep(0.005)
    return len(seen)


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
    """Readers see the whole file or none of it, whenever this process is killed; a write that
    fails (disk full) leaves no temporary file behind."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            os.fchmod(fd, 0o600)  # the service's records: never readable by a task's uid
            out.write(json.dumps(data))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def reserve_exit_slot(path: Path) -> None:
    """Create the exit slot at its full size, filled with real bytes (spaces), so writing the
    record over it later allocates nothing (done by the executor before the task starts)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, b" " * EXIT_SLOT_SIZE)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_exit_slot(path: Path, record: dict[str, Any]) -> None:
    """The record over the slot's first bytes (the rest stays spaces, which JSON ignores)."""
    data = json.dumps(record).encode()
    if len(data) > EXIT_SLOT_SIZE:  # keep what the settle needs
        keep = ("exit_code", "signal", "signal_name", "ended_at", "disk_full", "stopped")
        data = json.dumps({k: record.get(k) for k in keep}).encode()[:EXIT_SLOT_SIZE]
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    try:
        os.pwrite(fd, data, 0)
    finally:
        os.close(fd)


def write_exit(work: Path, record: dict[str, Any]) -> None:
    """``exit.json``, or, when the file system has no room for it, the slot, saying so."""
    try:
        write_json_atomic(work / EXIT_FILE, record)
    except OSError as err:
        if err.errno not in DISK_FULL_ERRNOS:
            raise
        record["disk_full"] = True
        write_exit_slot(work / EXIT_SLOT, record)


class _Stopper:
    """Stops the command for a limit of the supervisor's (disk quota, output cap): the first
    reason is kept for the exit record. Runs in the watcher's or a relay's thread, so it only
    signals; the main thread alone reaps (a reap here could take the command's own status)."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._lock = threading.Lock()

    def stop(self, reason: str) -> None:
        with self._lock:
            if self.reason is not None:
                return
            self.reason = reason
        me = os.getpid()
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            left = [p for p in descendants(me) if not p.zombie]
            if not left:
                return
            for proc in left:
                kill(proc)
            time.sleep(0.01)


def _watch_quota(launch: dict[str, Any], stop: _Stopper) -> QuotaWatcher | None:
    quota = launch.get("quota") or {}
    if not quota.get("bytes"):
        return None
    paths = [Path(p) for p in quota.get("paths", [])]
    watcher = QuotaWatcher(paths, int(quota["bytes"]), float(quota["interval_s"]), stop.stop)
    watcher.start()
    return watcher


def _outcome(record: dict[str, Any], stop: _Stopper, relays: list[Relay]) -> dict[str, Any]:
    """What the supervisor adds to the exit record: why it stopped the task, its output."""
    if stop.reason is not None:
        record["stopped"] = stop.reason
    record["output"] = {r.stream: r.summary() for r in relays}
    if any(r.disk_full for r in relays):
        record["output_lost"] = "the data dir's file system was full: output was dropped"
    return record


def main(workdir: str) -> int:
    for sig in _FORWARDED:
        signal.signal(sig, lambda *_: None)
    _become_subreaper()
    work = Path(workdir)
    launch = json.loads((work / LAUNCH_FILE).read_text())
    pipes = Pipes()
    pid = _start(launch, pipes)
    stop = _Stopper()
    out = launch.get("output") or {}
    relays = pipes.in_parent(out.get("cap_bytes"), bool(out.get("kill")), stop.stop)
    watcher = _watch_quota(launch, stop)
    status = _wait_for(pid)
    if watcher is not None:
        watcher.finish()
    leftovers = kill_leftovers()
    for relay in relays:
        relay.join(_DRAIN_S)
    record = _outcome(exit_record(status, leftovers), stop, relays)
    write_exit(work, record)
    return int(record["exit_code"]) & 0xFF


#: How a supervisor starts: ``python -I -S`` (isolated, and no ``site``: no ``.pth`` files, no
#: editable-install finder, ~0.03 CPU s of each task's start on a class's two cores) with the
#: only import root it needs, LabHive's, put first on ``sys.path`` (it imports nothing else
#: outside the standard library).
_BOOT = (
    "import sys; i = sys.argv.index('--'); sys.path[:0] = sys.argv[1:i]; "
    "from labhive.scheduler.executors.supervise import main; sys.exit(main(sys.argv[i + 1]))"
)


def command(work: Path) -> list[str]:
    """The command line that supervises the task prepared in ``work`` (``launch.json``)."""
    # the folder that holds ``labhive/`` (labhive/scheduler/executors/supervise.py, three up),
    # found from this file rather than by importing the top package (tests/test_layers.py)
    root = str(Path(__file__).absolute().parents[3])
    return [sys.executable, "-I", "-S", "-c", _BOOT, root, "--", str(work)]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
