"""What the local executor's tests share: launching one task, waiting for exits, and finding
every process of a job wherever it went (by the job id in its environment)."""

from __future__ import annotations

import time

import psutil

from labhive.scheduler.executors.base import TaskExit, TaskHandle, TaskKey, TaskLaunch
from labhive.scheduler.executors.local import LocalExecutor


def task(job: str, command: str, index: int = 0, role: str = "worker", **kw) -> TaskLaunch:
    return TaskLaunch(TaskKey(job, 0, role, index), job, command, "node0", (index,), **kw)


def launch_one(ex: LocalExecutor, job: str, command: str, **kw) -> TaskHandle:
    (handle,) = ex.launch([task(job, command, **kw)])
    return handle


def wait_exits(ex: LocalExecutor, n: int, timeout_s: float = 30.0) -> dict[TaskKey, TaskExit]:
    exits: dict[TaskKey, TaskExit] = {}
    deadline = time.monotonic() + timeout_s
    while len(exits) < n and time.monotonic() < deadline:
        exits.update((e.key, e) for e in ex.poll())
        time.sleep(0.02)
    assert len(exits) == n, f"only {len(exits)} of {n} tasks ended within {timeout_s}s"
    return exits


def processes_of(job_id: str) -> list[psutil.Process]:
    """Every live process on the machine that carries the job's id in its environment."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("LABHIVE_JOB_ID") == job_id and proc.status() != "zombie":
                found.append(proc)
        except psutil.Error:
            continue
    return found


def processes_under(root: object) -> list[psutil.Process]:
    """Every live process whose working directory lies under ``root`` (a service's data dir):
    a task's processes, whatever process group or session they moved to."""
    prefix = str(root)
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.cwd().startswith(prefix) and proc.status() != "zombie":
                found.append(proc)
        except psutil.Error:
            continue
    return found
