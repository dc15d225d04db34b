"""Run a job's tasks as real processes on this machine.

Each task gets a directory ``DATA_DIR/jobs/<job_id>/<attempt>/<role>-<index>/`` holding
its ``stdout`` and ``stderr``, the ``launch.json`` it was started from and, once it ended, the
``exit.json`` its supervisor wrote (see ``supervise.py``), all the service's own, and the task's
working directory ``work/``, its user's own (see ``workdir.py`` for who may read what). The
command runs as the launch's uid/gid when the service is root. The supervisor is the leader of a new
session and process group that the task's command and its children share, so one ``killpg``
reaches all of them, and the service can die without taking the tasks with it.

Everything needed to find a task again lives in ``TaskHandle.info`` (pid, start time, paths), so
a new executor, in a new process, can ``adopt`` the tasks of a dead one: a task whose pid still
names a process with the recorded start time is re-attached; any other is settled from its
``exit.json``, or reported with an unknown exit code for the service to requeue.

Stopped tasks are settled by ``stop`` itself: they never show up in ``poll``, because the service
that stopped them already knows why they ended.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from labhive.scheduler.core.sizes import MIB
from labhive.scheduler.executors import (
    container,
    limits,
    notice_file,
    output,
    sandbox_mounts,
    workdir,
)
from labhive.scheduler.executors.base import (
    LaunchError,
    Stream,
    TaskExit,
    TaskHandle,
    TaskKey,
    TaskLaunch,
)
from labhive.scheduler.executors.env import (
    LOOPBACK,
    free_port,
    process_env,
    rendezvous_env,
    task_vars,
)
from labhive.scheduler.executors.gpu_share_env import gpu_share_record
from labhive.scheduler.executors.local_procs import (
    _kill_tree,
    _killpg,
    _process,
    _signal_tree,
    _start_ticks,
    supervisor_running,
)
from labhive.scheduler.executors.local_records import (
    DISK_FULL_EXIT_CODE,
    HANDLE_FILE,
    STRACE_LOG,
    _describe,
    _disk_full_at_launch,
    _disk_full_evidence,
    _exit_code,
    _not_started,
    _read_exit,
    _retire,
    read_log_range,
    recorded_info,
    set_aside_task_dir,
    strace_observations,
    task_dir,
)
from labhive.scheduler.executors.supervise import (
    EXIT_FILE,
    EXIT_SLOT,
    LAUNCH_FILE,
    reserve_exit_slot,
    write_json_atomic,
)
from labhive.scheduler.executors.supervise import command as supervise_command

# Names other modules import from here; their homes are local_procs.py and local_records.py.
__all__ = [
    "DEFAULT_OUTPUT_CAP",
    "DEFAULT_QUOTA_INTERVAL_S",
    "DEFAULT_WORK_QUOTA",
    "DISK_FULL_EXIT_CODE",
    "HANDLE_FILE",
    "PODMAN_VARS",
    "STRACE_LOG",
    "LocalExecutor",
    "podman_process_env",
    "read_log_range",
    "recorded_info",
    "set_aside_task_dir",
    "strace_observations",
    "supervisor_running",
    "task_dir",
    "user_cwd",
    "user_shell",
]

#: Each of a task's stdout and stderr keeps this much; the rest is dropped (output.py).
DEFAULT_OUTPUT_CAP = output.DEFAULT_CAP
#: What a task's work dir may hold before its supervisor stops it (quota.py).
DEFAULT_WORK_QUOTA = 10 * 1024 * MIB
#: Seconds between two measurements of a task's work dir.
DEFAULT_QUOTA_INTERVAL_S = 5.0


def user_shell() -> str:
    """The shell a task's command runs in: the user's, else bash, else sh."""
    for candidate in (os.environ.get("SHELL"), "/bin/bash", "/bin/sh"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise LaunchError("no shell found to run the command in: set SHELL to one")


#: What podman itself needs of the service's environment besides the kept variables and its
#: identity (rootless podman keeps its state under the runtime dir and HOME); the container
#: gets none of them: only the task's variables, by name (``container.prepare``).
PODMAN_VARS = ("XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "TMPDIR")


def podman_process_env(task: dict[str, str]) -> dict[str, str]:
    """``podman run``'s environment: the allow-list as the service's own user (``env.py``),
    what podman needs, and the task's variables (podman reads their values by name)."""
    env = process_env(task)
    env.update({k: os.environ[k] for k in PODMAN_VARS if k in os.environ})
    return env


@dataclass
class _Task:
    handle: TaskHandle
    popen: subprocess.Popen[bytes] | None  # None for a task adopted from another process

    @property
    def info(self) -> dict[str, Any]:
        return self.handle.info


class LocalExecutor:
    """Tasks as process groups on this machine (see the module docstring)."""

    name = "local"
    partial_stops = True  # task directories and container names carry the generation

    def __init__(
        self,
        data_dir: Path,
        grace_s: float = 10.0,
        *,
        output_cap: int | None = DEFAULT_OUTPUT_CAP,
        output_cap_kills: bool = False,
        work_quota: int | None = DEFAULT_WORK_QUOTA,
        quota_interval_s: float = DEFAULT_QUOTA_INTERVAL_S,
        disk_check: Callable[[], str | None] | None = None,
        vc_disk: dict[str, tuple[int | None, int | None]] | None = None,
        shell: str | None = None,
        limit_support: limits.LimitSupport | None = None,
        pids_max: int | None = None,
        pids_service_max: int | None = None,
        task_slots: int | None = None,
        task_paths: Sequence[Path] = (),
    ):
        self.data_dir = Path(data_dir).resolve()  # the supervisor runs elsewhere
        #: Host directories a task must still reach when its /tmp is private (``sandbox_mounts``).
        self.task_paths = tuple(Path(p) for p in task_paths)
        #: Disk limits (docs/local-executor.md, "Disk"): None turns one off.
        self.output_cap = output_cap
        self.output_cap_kills = output_cap_kills
        self.work_quota = work_quota
        self.quota_interval_s = quota_interval_s
        #: Why no task may start now (the data dir full to the service's last reserve, see
        #: service/diskspace.py), or None.
        self.disk_check = disk_check
        #: Per VC (the cluster config's ``disk:``): (output cap, work quota), each None for the
        #: values above and 0 for off.
        self.vc_disk = vc_disk or {}
        workdir.secure_dir(self.data_dir)  # 0711: tasks pass through to their own dirs only
        self.grace_s = grace_s
        self.shell = shell
        self.limit_support = limit_support or limits.detect()
        # pids: per task and for all this service's tasks; by default from pid_max and the
        # tasks this node may run at once (limits.pids_budget; default: one per CPU)
        budget = limits.host_pids_budget(task_slots or os.cpu_count() or 1)
        self.pids = limits.PidsBudget(pids_max or budget.task, pids_service_max or budget.service)
        self._scope = limits.scope_name(self.data_dir)  # cgroups of this data dir's tasks
        self._tasks: dict[TaskKey, _Task] = {}
        self._containers: container.Support | None = None  # detected at the first image

    # ---- launch ---------------------------------------------------------------------------

    def launch(self, tasks: Sequence[TaskLaunch]) -> list[TaskHandle]:
        """Start the gang; if any task cannot start, stop those that did and raise."""
        self._check_room()
        started: list[TaskHandle] = []
        try:
            rendezvous = self._fallback_rendezvous(tasks)
            for launch in tasks:
                started.append(self._launch_one(launch, rendezvous.get(launch.key, {})))
        except Exception as err:
            self.stop(started, grace_s=0)
            failed = tasks[len(started)].key
            why = _disk_full_at_launch(err) or err
            raise LaunchError(f"task {failed.role}-{failed.index} could not start: {why}") from err
        return started

    def _check_room(self) -> None:
        """Refuse to start anything on a disk full to the service's last reserve: a task that
        filled it once (and failed for it) would fill it again on its retry, and then the
        service could not even record that."""
        why = self.disk_check() if self.disk_check is not None else None
        if why is not None:
            raise LaunchError(why)

    @staticmethod
    def _fallback_rendezvous(tasks: Sequence[TaskLaunch]) -> dict[TaskKey, dict[str, str]]:
        """Rendezvous variables for a gang whose launch env lacks them (one port per attempt)."""
        if len(tasks) < 2 or all("MASTER_ADDR" in t.env for t in tasks):
            return {}
        members = [(t.key.role, t.key.index, t.node) for t in tasks]
        port = free_port()
        return {t.key: rendezvous_env(members, (t.key.role, t.key.index), port) for t in tasks}

    def _launch_one(self, launch: TaskLaunch, extra_env: dict[str, str]) -> TaskHandle:
        if launch.key in self._tasks:
            raise LaunchError(f"task {launch.key} is already running")
        work = task_dir(self.data_dir, launch.key)
        if work.exists():
            _retire(work)
        owner = workdir.run_as(launch.uid, launch.gid)
        cwd = workdir.prepare_task_dir(self.data_dir, work, owner)
        task_env = task_vars(launch, extra_env)  # an allow-list: see env.py
        if not launch.image:  # a container sees another file system (docs/researcher.md)
            task_env[notice_file.ENV] = str(notice_file.notice_path(work))
        run_as = owner.record()
        if launch.image:  # podman runs as the service; the container as the task's user
            argv, enforced = self._container_argv(launch, work, cwd, owner, task_env)
            enforced["sandbox"] = sandbox_mounts.container(launch.memory_max_mb * limits.MIB)
            env = {**podman_process_env(task_env), **self._podman_env()}
            run_as = {**workdir.run_as(None, None).record(), "container_user": run_as}
        else:
            # the service's $HOME is not theirs to use
            home = str(cwd) if owner.switch else None
            env = process_env(task_env, home, launch.user or str(owner.uid))
            argv = self._argv(launch, work, owner)
            enforced = limits.apply(
                self.limit_support, launch.key, launch.cpu_max, launch.memory_max_mb,
                gpus=launch.gpus, scope=self._scope, virtual=launch.virtual, pids=self.pids,
            )  # fmt: skip
            enforced["sandbox"] = sandbox_mounts.plan(
                owner, launch.memory_max_mb * limits.MIB, [self.data_dir, *self.task_paths],
                limits.task_cgroup_name(launch.key, self._scope),
            )  # fmt: skip
        enforced |= gpu_share_record(launch.env)  # a GPU share: whether anything enforces it
        launch_doc: dict[str, Any] = {"argv": argv, "limits": enforced, "cwd": str(cwd)}
        launch_doc.update(run_as=run_as, user_cwd=user_cwd(launch))
        launch_doc |= self._disk_limits(work, cwd, launch.vc)
        write_json_atomic(work / LAUNCH_FILE, launch_doc)
        reserve_exit_slot(work / EXIT_SLOT)  # before the task can fill the disk
        try:
            popen = _spawn_supervisor(work, env)
        except BaseException:
            limits.release(enforced)
            if "container" in enforced:
                container.release_v1_parent(enforced["container"]["name"])
            raise
        info = {
            "pid": popen.pid,
            "pgid": popen.pid,
            "create_time": psutil.Process(popen.pid).create_time(),
            "start_ticks": _start_ticks(popen.pid),
            "workdir": str(work),
            "cwd": str(cwd),
            "address": LOOPBACK,  # where the task's servers are reached (a notebook server's)
            "run_as": owner.record(),
            "stdout": str(work / "stdout"),
            "stderr": str(work / "stderr"),
            "exit_file": str(work / EXIT_FILE),
            "exit_slot": str(work / EXIT_SLOT),
            "limits": enforced,
            "observe": launch.observe,
        }
        write_json_atomic(work / HANDLE_FILE, info)
        handle = TaskHandle(launch.key, info)
        self._tasks[launch.key] = _Task(handle, popen)
        return handle

    def _disk_limits(self, work: Path, cwd: Path, vc: str | None) -> dict[str, Any]:
        """The supervisor's share of the launch file: the output cap and the work-dir quota
        (what it measures: the work dir and the strace log, both the task's to fill), the
        task's VC's where its config sets them."""
        vc_cap, vc_quota = self.vc_disk.get(vc or "", (None, None))
        cap = self.output_cap if vc_cap is None else vc_cap or None
        quota_bytes = self.work_quota if vc_quota is None else vc_quota or None
        quota = {
            "bytes": quota_bytes,
            "interval_s": self.quota_interval_s,
            "paths": [str(cwd), str(work / STRACE_LOG)],
        }
        output = {"cap_bytes": cap, "kill": self.output_cap_kills}
        return {"output": output, "quota": quota}

    def _argv(
        self, launch: TaskLaunch, work: Path, owner: workdir.RunAs, argv: list[str] | None = None
    ) -> list[str]:
        """The task's command line, under strace when it is observed (a container's: podman's
        ``run`` is traced, which follows conmon, runc and the container's processes)."""
        argv = argv or [self.shell or user_shell(), "-c", launch.command]
        if launch.observe is None:
            return argv
        if launch.observe != "strace":
            raise LaunchError(f"unknown observation {launch.observe!r}: the choice is 'strace'")
        strace = shutil.which("strace")
        if strace is None:
            raise LaunchError("strace is not installed here: install it (apt-get install strace)")
        # strace runs as the user: its log is theirs, in the service's directory (no symlink
        # swap possible), named relative to the work dir (the absolute path may not be
        # traversable for them)
        workdir.private_file(work / STRACE_LOG, owner)
        log = f"../{STRACE_LOG}"
        return [strace, "-f", "-tt", "-T", "-y", "-o", log, "--", *argv]

    # ---- containers (a job with an image; see container.py) --------------------------------

    def _container_support(self) -> container.Support:
        if self._containers is None:
            self._containers = container.detect()
        return self._containers

    def _podman_env(self) -> dict[str, str]:
        conf = container.write_conf(self.data_dir, self._container_support())
        return container.environment(conf)

    def _container_argv(
        self,
        launch: TaskLaunch,
        work: Path,
        cwd: Path,
        owner: workdir.RunAs,
        task_env: dict[str, str],
    ) -> tuple[list[str], dict[str, Any]]:
        """``podman run`` for the task, its user's work dir bound in as the container's."""
        pull = os.environ.get("LABHIVE_IMAGE_PULL") == "1"
        support = self._container_support()
        user = (owner.uid, owner.gid)
        argv, record = container.prepare(
            support, launch, cwd, user, task_env, pull, scope=self._scope, pids_max=self.pids.task
        )
        try:  # strace (when observed) runs as the service, around podman
            return self._argv(launch, work, workdir.run_as(None, None), argv), record
        except BaseException:
            container.release_v1_parent(record["container"]["name"])
            raise

    def _has_podman(self) -> bool:
        return self._container_support().podman is not None

    def _settle_container(self, info: dict[str, Any], exit_code: int, how: str) -> str:
        """The container's own account of its end (OOM kill), then remove it."""
        record = info["limits"]
        if not self._has_podman():
            return how
        podman, env = self._container_support().podman or "", self._podman_env()
        state = container.inspect(podman, record["container"]["name"], env)
        reason = container.describe(how, container.oom_killed(state, record, exit_code), record)
        container.remove(podman, record, env)
        return reason

    def _orphan_container(self, key: TaskKey, record: dict[str, Any]) -> TaskExit | None:
        """The supervisor died without an exit.json: podman may still know how the task ended."""
        if not self._has_podman():
            return None
        podman, env = self._container_support().podman or "", self._podman_env()
        state = container.inspect(podman, record["container"]["name"], env)
        done = state is not None and not state.get("Running") and "ExitCode" in state
        container.remove(podman, record, env)
        if not done:
            return None
        assert state is not None
        code = int(state["ExitCode"])
        oom = container.oom_killed(state, record, code)
        how = container.describe(f"exit code {code}", oom, record)
        return TaskExit(key, code, f"{how} (from podman: its supervisor left no record)")

    def _remove_container(self, record: dict[str, Any]) -> None:
        if self._has_podman():
            container.remove(self._container_support().podman or "", record, self._podman_env())

    def _adopt_by_label(self, key: TaskKey) -> TaskExit | None:
        """A task the service has no record of, whose container is still known to podman."""
        support = self._container_support()
        if support.podman is None:
            return None
        env = self._podman_env()
        name = container.find(support.podman, key, env, scope=self._scope)
        state = None if name is None else container.inspect(support.podman, name, env)
        if name is None or state is None:
            return None
        if state.get("Running"):
            container.remove(support.podman, {"container": {"name": name}}, env)
            return TaskExit(key, None, f"container {name} ran with no record: stopped it")
        code = int(state.get("ExitCode", -1))
        container.remove(support.podman, {"container": {"name": name}}, env)
        return TaskExit(key, code, f"exit code {code} (container {name}, found by its labels)")

    # ---- poll and adopt -------------------------------------------------------------------

    def poll(self) -> list[TaskExit]:
        """Tasks that ended since the last poll (never blocks)."""
        ended = []
        for key, task in list(self._tasks.items()):
            if not self._ended(task):
                continue
            if self._tasks.pop(key, None) is None:
                continue  # a stop (in the service's worker thread) took it meanwhile
            ended.append(self._settle(task))
        return ended

    def adopt(self, handles: Sequence[TaskHandle]) -> list[TaskExit]:
        """Re-attach tasks of a previous executor; settle at once those that already ended."""
        ended = []
        for handle in handles:
            if handle.key in self._tasks:
                continue
            info = self._info(handle)
            if info is None:
                found = self._adopt_by_label(handle.key) if self._has_podman() else None
                ended.append(
                    found or TaskExit(handle.key, None, "no record that this task was launched")
                )
                continue
            task = _Task(TaskHandle(handle.key, info), None)
            if self._ended(task):
                ended.append(self._settle(task))
            else:
                self._tasks[handle.key] = task
        return ended

    def _ended(self, task: _Task) -> bool:
        if task.popen is not None:
            return task.popen.poll() is not None
        return _process(task.info) is None  # gone, or a zombie nobody reaps

    def _settle(self, task: _Task) -> TaskExit:
        """The task's exit as its supervisor recorded it, or an unknown one if none was."""
        key = task.handle.key
        record = _read_exit(task.info)
        if record is None:
            _killpg(task.info, signal.SIGKILL)  # the supervisor died: leave nothing behind
            if "container" in task.info.get("limits", {}):
                found = self._orphan_container(key, task.info["limits"])
                if found is not None:
                    return found
            full = _disk_full_evidence(task.info)
            if full is not None:  # a failure, not a lost task: a rerun would fill it again
                limits.release(task.info.get("limits", {}))
                return TaskExit(key, DISK_FULL_EXIT_CODE, full)
            how = _wait_status(task)
            reason = f"the task's supervisor ended ({how}) without recording an exit status"
            limits.release(task.info.get("limits", {}))
            return TaskExit(key, None, reason)
        reason = _not_started(task.info, record) or _describe(record, task.info.get("limits", {}))
        limits.release(task.info.get("limits", {}))
        if "container" in task.info.get("limits", {}):
            reason = self._settle_container(task.info, int(record["exit_code"]), reason)
        return TaskExit(key, _exit_code(record), reason)

    # ---- stop -----------------------------------------------------------------------------

    def notify(self, handles: Sequence[TaskHandle], notice: dict[str, Any] | None) -> None:
        """Write (None: remove) the tasks' stop notice files (``notice_file``)."""
        for handle in handles:
            info = self._info(handle)
            if info is not None and info.get("workdir"):
                run_as = info.get("run_as") or {}
                notice_file.write_notice(Path(info["workdir"]), notice, run_as)

    def stop(self, handles: Sequence[TaskHandle], grace_s: float | None = None) -> None:
        """TERM every process of the tasks, KILL what is left after the grace period."""
        grace = self.grace_s if grace_s is None else grace_s
        tasks = []
        for handle in handles:
            info = self._info(handle)
            if info is not None:
                task = self._tasks.pop(handle.key, None)
                tasks.append(task or _Task(TaskHandle(handle.key, info), None))
        live = [t for t in tasks if not self._ended(t)]
        for task in live:
            _signal_tree(task.info, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while live and time.monotonic() < deadline:
            time.sleep(0.02)
            live = [t for t in live if not self._ended(t)]
        for task in live:
            _kill_tree(task.info)
        for task in tasks:
            self._reap(task)
            limits.release(task.info.get("limits", {}))
            if "container" in task.info.get("limits", {}):
                self._remove_container(task.info["limits"])

    def _reap(self, task: _Task, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self._ended(task) and time.monotonic() < deadline:
            time.sleep(0.01)

    # ---- logs and observations ------------------------------------------------------------

    def read_log(self, handle: TaskHandle, stream: Stream, offset: int, limit: int) -> bytes:
        """Up to ``limit`` bytes from ``offset``; empty when the task wrote nothing there yet."""
        info = self._info(handle)
        return b"" if info is None else read_log_range(info, stream, offset, limit)

    def observations(self, handle: TaskHandle) -> list[str]:
        return strace_observations(self._info(handle))

    def _info(self, handle: TaskHandle) -> dict[str, Any] | None:
        """The task's info: as tracked, as recorded, or, for a handle the service never got to
        record (it died right after the launch), from the copy in the task's directory."""
        task = self._tasks.get(handle.key)
        if task is not None:
            return task.info
        if "pid" in handle.info:
            return handle.info
        return recorded_info(self.data_dir, handle.key)


def _wait_status(task: _Task) -> str:
    if task.popen is None or task.popen.returncode is None:
        return "how is unknown: it was not this process's child"
    rc = task.popen.returncode
    return f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit code {rc}"


def user_cwd(launch: TaskLaunch) -> str | None:
    """The directory the supervisor enters as the user (``supervise.enter_user_cwd``). Not for
    a container (only its work dir is mounted) nor under strace (its log is named relative
    to the work dir): those run in the work dir, as before (docs/local-executor.md)."""
    return None if launch.image or launch.observe else launch.cwd


def _spawn_supervisor(work: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The supervisor leads a new session, so the task outlives the service and one killpg
    reaches all of it; it reads its instructions from the working directory."""
    stdout, stderr = workdir.private_file(work / "stdout"), workdir.private_file(work / "stderr")
    with stdout.open("wb") as out, stderr.open("wb") as err:
        return subprocess.Popen(
            supervise_command(work),
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
