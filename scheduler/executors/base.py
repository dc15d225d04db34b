"""The interface between the job service and whatever runs tasks (local processes, pods).

The service decides (through the scheduling policy) which tasks run where and records it in the
store; an executor only carries that out and reports what happened. Everything an executor needs
to find a task again after the service restarts is in ``TaskHandle.info``, which the service
stores in the same transaction as the task's RUNNING state, so a kill -9 at any moment leaves
enough behind to re-adopt or settle every task.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from labhive.scheduler.core.jobs import GuaranteeAndLimit
from labhive.scheduler.executors.not_started import NOT_STARTED as NOT_STARTED  # re-exported

Stream = Literal["stdout", "stderr"]


class LaunchError(RuntimeError):
    """A task could not be started; the executor has already stopped its gang-mates."""


@dataclass(frozen=True, slots=True)
class TaskKey:
    """Names one run of one task: its attempt, and within the attempt its generation (a task
    stopped alone, HiveD's per-task preemption, runs again as the next generation), so an exit
    of an old process never counts against its restart."""

    job_id: str
    attempt: int
    role: str
    index: int
    generation: int = 1


@dataclass(frozen=True, slots=True)
class TaskLaunch(GuaranteeAndLimit):
    """Everything needed to start one task where the scheduler placed it."""

    key: TaskKey
    job_name: str
    command: str  # run through the user's shell
    node: str
    gpus: tuple[int, ...]  # GPU indices on the node (virtual slots on a virtual cluster)
    gpu_uuids: tuple[str, ...] = ()  # real devices, when the node has NVIDIA GPUs
    virtual: bool = False
    cpu: float = 1.0  # the guarantee: what placement counted (Slurm's, Kubernetes' request)
    memory_mb: int = 1024
    env: dict[str, str] = field(default_factory=dict)  # job-level env, rendezvous included
    image: str | None = None
    user: str | None = None
    #: The OS identity the task runs as (its LabHive user's); None: the service's own.
    uid: int | None = None
    gid: int | None = None
    observe: str | None = None  # "strace" to run the task under strace
    vc: str | None = None  # the job's virtual cluster (labels pods for per-VC views)
    #: What the cgroup enforces (Kubernetes' limits); None: the guarantee (``cpu_max``).
    cpu_limit: float | None = None
    memory_limit_mb: int | None = None
    #: The directory the command starts in, entered as the task's user (None: its work dir).
    cwd: str | None = None
    #: The most seconds the attempt may run (the job's ``time_limit``, its VC's default):
    #: the loop stops it there; an executor whose backend enforces limits of its own (Slurm's
    #: ``--time``) passes it on so the backend knows it too.
    time_limit: float | None = None


@dataclass(frozen=True, slots=True)
class TaskHandle:
    """A started task, and what the executor needs to find it again after a restart."""

    key: TaskKey
    info: dict[str, Any]  # JSON-serialisable: pid and start time, pod name, log paths, limits


@dataclass(frozen=True, slots=True)
class TaskExit:
    """A task that ended: its exit code, or None when it vanished without one."""

    key: TaskKey
    exit_code: int | None
    reason: str = ""
    requeue: bool = False  # the task was lost through no fault of its own (evicted, node lost)
    #: The backend stopped it at a time limit (Slurm's TIMEOUT): the job ends FAILED at its
    #: limit, as the loop ends a job past its own deadline, retries unspent.
    timed_out: bool = False
    time_limit: float | None = None  # that limit's seconds, when the backend says


class Executor(Protocol):
    """Thread use: the service's scheduling loop calls ``poll`` and ``adopt``; its worker
    threads call ``launch`` and ``stop`` (a stop may wait out a whole grace period), one job
    at a time per worker, so calls for different jobs overlap and ``poll`` must tolerate a
    task that a concurrent ``stop`` removes."""

    name: str
    #: Whether it can stop some tasks of a running job and start them again as their next
    #: generation (each generation its own directory, name and exit); the loop stops whole
    #: jobs for an executor that cannot.
    partial_stops: bool

    def launch(self, tasks: Sequence[TaskLaunch]) -> list[TaskHandle]:
        """Start all the tasks (one call per gang) or none: raise ``LaunchError`` otherwise."""

    def stop(self, handles: Sequence[TaskHandle], grace_s: float) -> None:
        """Terminate the tasks (TERM, then KILL after ``grace_s``); return once they are gone."""

    def poll(self) -> list[TaskExit]:
        """Tasks that ended since the last poll."""

    def adopt(self, handles: Sequence[TaskHandle]) -> list[TaskExit]:
        """Take over tasks recorded before a restart; return those that already ended."""

    def read_log(self, handle: TaskHandle, stream: Stream, offset: int, limit: int) -> bytes:
        """Up to ``limit`` bytes of the task's output from ``offset`` (no whole-file reads)."""

    def observations(self, handle: TaskHandle) -> list[str]:
        """Paths of observation files (strace logs) the task produced."""
