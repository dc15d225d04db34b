"""Launches and stops, off the scheduling pass.

The scheduler loop decides and commits; the ``Actuator``'s workers start and stop tasks. A stop
can take the whole grace period (a task that ignores SIGTERM), a launch can be slow (an image
pull, a busy machine), and neither may hold up everyone else's scheduling. Actions on one job
run in the order they were asked for (its stop waits for its launch), actions on different jobs
run side by side.

While a job's tasks are being stopped its GPUs are *draining*: still reserved, as HiveD's
preempting groups hold cells while their victims die. ``Reservations`` keeps them, and holds
back every start the policy decided onto them (or for the draining job itself) until the stop
has completed; only then does the store record the victim's end and the start, in that order,
so no GPU is ever used by two jobs' processes at once. A job being cancelled stays RUNNING in
the store (reason "stopping") until its tasks are gone, so a kill -9 meanwhile leaves a job the
next start re-adopts and cancels again.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from labhive.scheduler.model import Start
from labhive.scheduler.service.policy_port import ServiceEvent
from labhive.scheduler.states import TERMINAL

log = logging.getLogger("labhive.service.actuation")


@dataclass(frozen=True, slots=True)
class Settle:
    """How an attempt ends, recorded once its tasks are gone (``SchedulerLoop._commit``)."""

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


@dataclass
class Drain:
    """A job whose tasks are being stopped, and what happens once they are gone."""

    job_id: int
    run: Any  # the loop's record of the attempt (its handles, task ids, GPUs)
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
    keys: frozenset[Any]  # the stopped runs' TaskKeys
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


class Actuator:
    """Runs actions in worker threads: in order per job, in parallel across jobs.

    ``workers`` bounds how many jobs are launched or stopped at once; a stop may take the whole
    grace period, so it is generous (32 jobs ignoring SIGTERM still leave nothing blocked but
    the 33rd job's launch, for at most one grace period)."""

    def __init__(self, workers: int = 32) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="labhive-act")
        self._lock = threading.Condition()
        self._queues: dict[int, deque[Callable[[], None]]] = {}
        self._closed = False

    def submit(self, job_id: int, action: Callable[[], None]) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the actuator is closed")
            queue = self._queues.get(job_id)
            if queue is not None:  # a worker is on this job: it runs this one next
                queue.append(action)
                return
            self._queues[job_id] = deque([action])
        self._pool.submit(self._work_on, job_id)

    def _work_on(self, job_id: int) -> None:
        while True:
            with self._lock:
                queue = self._queues[job_id]
                if not queue:
                    del self._queues[job_id]
                    self._lock.notify_all()
                    return
                action = queue[0]
            try:
                action()
            except Exception:  # actions report their own failures; this is a last resort
                log.exception("an action on job %s failed", job_id)
            with self._lock:
                queue.popleft()

    def busy(self) -> int:
        """How many jobs have actions queued or running."""
        with self._lock:
            return len(self._queues)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no action is queued or running; False if ``timeout`` passed first."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._queues, timeout)

    def close(self, wait: bool = True) -> None:
        """No new actions; with ``wait`` finish those queued, else drop them (a restart
        re-adopts or requeues what they would have done)."""
        with self._lock:
            self._closed = True
            if not wait:
                for queue in self._queues.values():
                    while len(queue) > 1:
                        queue.pop()
        self._pool.shutdown(wait=wait, cancel_futures=not wait)
