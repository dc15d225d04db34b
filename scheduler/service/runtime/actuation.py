"""Launches and stops, off the scheduling pass.

The scheduler loop decides and commits; the ``Actuator``'s workers start and stop tasks. A stop
can take the whole grace period (a task that ignores SIGTERM), a launch can be slow (an image
pull, a busy machine), and neither may hold up everyone else's scheduling. Actions on one job
run in the order they were asked for (its stop waits for its launch), actions on different jobs
run side by side.

While a job's tasks are being stopped its GPUs are *draining* (``runs.Reservations``). A job
being cancelled stays RUNNING in the store (reason "stopping") until its tasks are gone, so a
kill -9 meanwhile leaves a job the next start re-adopts and cancels again. Workers touch none
of the loop's records: they report by message (``runs.Inbox``).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from labhive.scheduler.executors.base import Executor, TaskLaunch
from labhive.scheduler.service.runtime.plan import StopOrder
from labhive.scheduler.service.runtime.runs import Inbox, Launch, Stopped

log = logging.getLogger("labhive.service.actuation")


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


# ---- the workers' actions: each reports by message only ---------------------------------


def launch_tasks(executor: Executor, inbox: Inbox, launch: Launch, tasks: list[TaskLaunch]) -> None:
    """(A worker.) Start the tasks; the report (handles, or the failure) goes in ``launch``,
    which the next pass collects."""
    try:
        launch.handles = list(executor.launch(tasks))
    except Exception as err:  # LaunchError, or any executor failure: the attempt failed
        log.warning("job %s failed to launch: %s", launch.job_id, err)
        launch.error = str(err)
    inbox.post(launch)


def stop_tasks(
    executor: Executor, inbox: Inbox, order: StopOrder, grace_s: float, closing: threading.Event
) -> None:
    """(A worker.) Stop the order's tasks, retrying while the executor fails (the GPUs stay
    reserved meanwhile), then tell the loop they are gone. Runs after the job's earlier
    launches, whose handles it takes from their reports."""
    delay = 0.5
    handles = order.handles()
    while True:
        try:
            executor.stop(handles, grace_s)
            break
        except Exception as err:
            if closing.is_set():
                return  # the next start re-adopts the job and stops it again
            log.warning("stopping job %s failed (%r); retrying in %.1f s", order.job_id, err, delay)
            closing.wait(delay)
            delay = min(delay * 2, 10.0)
    inbox.post(Stopped(order.job_id, order.token))
