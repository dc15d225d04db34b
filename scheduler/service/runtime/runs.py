"""The running attempts, owned by the loop thread: task keys and generations, drains and the
starts held back for their GPUs, and the messages the actuator's workers send about them.

Only the loop thread reads or writes a ``Running`` record. A worker that launched tasks or
finished stopping them says so with a message (``Launch``, ``Stopped``) on the ``Inbox``, which
the next pass drains; a stop chained after a launch on the same job finds the launched handles
in that launch's own message (``StopOrder.launches``), never in the loop's record.

While a job's tasks are being stopped its GPUs are *draining*: still reserved, as HiveD's
preempting groups hold cells while their victims die. ``Reservations`` keeps them, and holds
back every start the policy decided onto them (or for the draining job itself) until the stop
has completed; only then does the store record the victim's end and the start, in that order,
so no GPU is ever used by two jobs' processes at once.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, TypeVar

from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import Start
from labhive.scheduler.core.states import TERMINAL
from labhive.scheduler.executors.base import TaskExit, TaskHandle, TaskKey
from labhive.scheduler.service.policy_port import ServiceEvent, service_id, task_key

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Settle:
    """How an attempt ends, recorded once its tasks are gone (``record.commit``)."""

    job_id: int
    state: str  # where the job goes: WAITING again, or a terminal state
    reason: str  # the event's short reason ("cancelled", "requeued", "failed" ...)
    why: str | None = None  # the longer text users read
    spend_retry: bool = False
    exit_code: int | None = None

    @property
    def ends(self) -> bool:
        """Whether the job is over (not waiting again)."""
        return self.state in TERMINAL


@dataclass(eq=False)
class Launch:
    """A launch handed to a worker, and the worker's report of it (its one message): the
    handles it started, or why it failed. The loop keeps it on the run until it is collected,
    so a stop ordered meanwhile stops what it started."""

    job_id: int
    attempt: int
    keys: tuple[TaskKey, ...]  # the tasks' keys, for a failure's exits
    handles: list[TaskHandle] = field(default_factory=list)  # written by the worker only
    error: str | None = None  # written by the worker only

    def exits(self) -> list[TaskExit]:
        """A failed launch ends each of its tasks with 127, the failure as the reason."""
        return [TaskExit(key, 127, self.error or "") for key in self.keys]


@dataclass(frozen=True, slots=True)
class Stopped:
    """A worker's message: the stop with this drain token has completed."""

    job_id: int
    token: int


@dataclass
class Running:
    """What the loop keeps in memory about a running attempt."""

    attempt: int
    handles: dict[TaskKey, TaskHandle] = field(default_factory=dict)
    task_ids: dict[TaskKey, int] = field(default_factory=dict)
    codes: dict[tuple[str, int], int | None] = field(default_factory=dict)
    #: What the executor knows beyond a code ("killed: over its memory limit of 256 MiB").
    notes: dict[tuple[str, int], str] = field(default_factory=dict)
    lost: bool = False
    gpus: set[tuple[str, int]] = field(default_factory=set)  # (node, GPU) the attempt holds
    deadline: float | None = None  # clock() at which its time limit stops it
    #: The newest generation recorded per task, those stopped alone included.
    generations: dict[tuple[str, int], int] = field(default_factory=dict)
    #: The job's retry budget as the store had it when the attempt was recorded (only an
    #: attempt's end spends a retry, so it holds until this attempt settles).
    retries: int = 0
    retries_used: int = 0
    #: Launches handed to workers whose report the loop has not collected yet.
    launching: list[Launch] = field(default_factory=list)


@dataclass
class Drain:
    """A job whose tasks are being stopped, and what happens once they are gone."""

    job_id: int
    run: Running  # the loop's record of the attempt (its handles, task ids, GPUs)
    gpus: frozenset[tuple[str, int]]  # (node, GPU index) it still holds
    settle: Settle
    event: ServiceEvent | None  # what the policy learns then (None: it already let go of the job)
    token: int  # tells this drain's completion from an earlier one's


@dataclass
class PartDrain:
    """Some tasks of a running job being stopped (HiveD's per-task preemption); the job keeps
    running, these tasks' GPUs stay reserved until their processes are gone."""

    job_id: int
    attempt: int
    keys: frozenset[TaskKey]  # the stopped runs' TaskKeys
    task_ids: tuple[int, ...]
    gpus: frozenset[tuple[str, int]]
    why: str


@dataclass
class Reservations:
    """Draining jobs (whole, or some of their tasks) and the starts that wait for their GPUs."""

    draining: dict[int, Drain] = field(default_factory=dict)
    parts: dict[int, PartDrain] = field(default_factory=dict)  # by drain token
    held: list[Start[int]] = field(default_factory=list)  # in the policy's order

    def draining_jobs(self) -> set[int]:
        return set(self.draining) | {p.job_id for p in self.parts.values()}

    def blocks(self, start: Start[int]) -> bool:
        """Whether ``start`` must wait: its job is draining or has an earlier start held back,
        or one of its GPUs is still held by a draining job."""
        job_id = start.job_id
        if job_id in self.draining_jobs() or any(h.job_id == job_id for h in self.held):
            return True
        busy = self.busy()
        return any((p.node, g) in busy for p in start.tasks for g in p.gpus)

    def blockers(self, start: Start[int]) -> list[int]:
        """The draining jobs holding GPUs ``start`` was given."""
        gpus = {(p.node, g) for p in start.tasks for g in p.gpus}
        drains: list[Drain | PartDrain] = [*self.draining.values(), *self.parts.values()]
        return sorted({d.job_id for d in drains if d.gpus & gpus})

    def busy(self) -> set[tuple[str, int]]:
        drains: list[Drain | PartDrain] = [*self.draining.values(), *self.parts.values()]
        return {gpu for d in drains for gpu in d.gpus}

    def hold(self, start: Start[int]) -> None:
        self.held.append(start)

    def drop(self, job_id: int) -> None:
        """Forget the held starts of a job the policy displaced or that was cancelled."""
        self.held = [h for h in self.held if h.job_id != job_id]

    def release(self) -> list[Start[int]]:
        """The held starts nothing blocks any more, in order; the others stay held."""
        ready: list[Start[int]] = []
        waiting: list[Start[int]] = []
        busy = self.busy()
        draining = self.draining_jobs()
        for start in self.held:
            job_id = start.job_id
            gpus = {(p.node, g) for p in start.tasks for g in p.gpus}
            blocked = job_id in draining or gpus & busy
            if blocked or any(w.job_id == job_id for w in waiting):
                waiting.append(start)
            else:
                ready.append(start)
        self.held = waiting
        return ready

    def clear(self) -> None:
        self.draining.clear()
        self.parts.clear()
        self.held.clear()


#: What workers tell the loop.
Message = Launch | Stopped


class Inbox:
    """The workers' messages to the loop thread (a deque: appends and pops are atomic), and
    the wake-up that makes the loop read them."""

    def __init__(self, wake: threading.Event) -> None:
        self._queue: deque[Message] = deque()
        self._wake = wake

    def post(self, message: Message) -> None:
        self._queue.append(message)
        self._wake.set()

    def drain(self) -> list[Message]:
        return drain(self._queue)


@dataclass
class Runs:
    """Every attempt the loop knows of: running, draining, held back; and the jobs' specs."""

    running: dict[int, Running] = field(default_factory=dict)
    specs: dict[int, JobSpec] = field(default_factory=dict)
    recheck: set[int] = field(default_factory=set)  # re-adopted attempts already decided
    reserved: Reservations = field(default_factory=Reservations)
    tokens: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    #: Addresses that arrived before their launch's handles, kept until they can be merged.
    early_addresses: dict[TaskKey, str] = field(default_factory=dict)

    def run_of(self, job_id: int) -> Running | None:
        """The job's attempt, running or draining."""
        run = self.running.get(job_id)
        if run is None and job_id in self.reserved.draining:
            run = self.reserved.draining[job_id].run
        return run

    def draining_run(self, job_id: int) -> Running | None:
        drain = self.reserved.draining.get(job_id)
        return drain.run if drain is not None else None

    def forget(self, job_id: int) -> None:
        """A job the store ended: nothing runs or waits for it any more."""
        self.specs.pop(job_id, None)
        self.running.pop(job_id, None)

    def collect_launched(self, launched: list[Launch]) -> list[tuple[int, dict[str, Any]]]:
        """The workers' launch reports: their handles join the run; returns (task id, info)
        to record. A failed launch's exits settle it; one of an ended attempt is dropped."""
        out = []
        for msg in launched:
            run = self.run_of(msg.job_id)
            if run is not None and msg in run.launching:
                run.launching.remove(msg)
            if msg.error is not None or run is None or run.attempt != msg.attempt:
                continue
            for h in msg.handles:
                run.handles[h.key] = h
                if h.key in run.task_ids:
                    out.append((run.task_ids[h.key], h.info))
        return out

    def collect_addresses(self, learnt: dict[TaskKey, str]) -> list[tuple[int, dict[str, Any]]]:
        """Addresses learnt since the launch (a pod's IP) go into the tasks' handles (and the
        store's: the returned (task id, info)). One that arrives before its launch's handles
        is kept for a later pass; one of an attempt that has ended is dropped."""
        out = []
        learnt = {**self.early_addresses, **learnt}
        self.early_addresses = {}
        for key, address in learnt.items():
            run = self.running.get(service_id(key.job_id))
            if run is None or run.attempt != key.attempt:
                continue
            handle = run.handles.get(key)
            if handle is None:
                if key in run.task_ids:  # launched, its handles not collected yet
                    self.early_addresses[key] = address
                continue
            if handle.info.get("address") != address:
                run.handles[key] = handle = TaskHandle(key, {**handle.info, "address": address})
                out.append((run.task_ids[key], handle.info))
        return out

    def clear(self) -> None:
        self.specs.clear()
        self.running.clear()
        self.recheck.clear()
        self.reserved.clear()


def current_key(run: Running, key: TaskKey) -> TaskKey:
    """The key of the newest generation of ``key``'s task the attempt recorded (``key`` itself
    when there is none)."""
    same = [k for k in run.task_ids if (k.role, k.index) == (key.role, key.index)]
    return max(same, key=lambda k: k.generation, default=key)


def next_key(run: Running, job_id: int, role: str, index: int) -> TaskKey:
    """The key a (re)start of this task records: one generation past its newest."""
    newest = current_key(run, task_key(job_id, run.attempt, role, index, 0)).generation
    newest = max(newest, run.generations.get((role, index), 0))
    return task_key(job_id, run.attempt, role, index, newest + 1)


def drain(queue: deque[T]) -> list[T]:
    out = []
    while queue:
        out.append(queue.popleft())
    return out
