"""Pending stops: the notice a running job gets before anything stops it.

A notice is (reason, deadline, kind). Where it comes from:

- a time limit: ``stop_notice_s`` before the limit (``time_limit_notice``, in the loop's pass);
  the service itself stops the job at the limit;
- culling (``hub_extension/gpu_culler.py``) and admins: ``POST /jobs/{id}/stop-notice`` with
  ``in_s`` > 0 announces; the caller stops it later (``in_s`` = 0, after checking again) or
  withdraws it (``/stop-notice/withdraw``). The service never stops a job on an announcement
  alone: the culler must see it still idle at the deadline, so a kernel that became busy during
  the notice is not killed for a stale reading;
- any stop the loop begins (preemption, a drain, a cancel): the grace period is the notice,
  written before SIGTERM (``drain_notice``).

Where it shows: the job's ``stopping`` field (``GET /jobs/{id}``: what the kernel extension
polls), the job's events (``stop-notice``), and ``$LABHIVE_NOTICE_FILE`` in each task's
directory (executors that can write one: the local executor).

Notices are kept in memory: after a restart a time limit's is made again, the culler posts its
announcement again on its next round, and a drain in progress is re-run with its notice.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from labhive.scheduler.core.time_limits import limit_reached, show_duration

#: Notice kinds, as the job's ``stopping.kind`` says them.
CULL, TIME_LIMIT, ANNOUNCED, STOPPING = "culled", "time-limit", "announced", "stopping"
#: Seconds of notice before a time limit (``labhive serve --stop-notice``).
DEFAULT_NOTICE_S = 60.0


@dataclass(frozen=True, slots=True)
class StopNotice:
    reason: str
    deadline: float
    attempt: int
    kind: str = ANNOUNCED

    def doc(self) -> dict[str, Any]:
        """As the notice file and the REST field carry it."""
        iso = datetime.fromtimestamp(self.deadline, UTC).isoformat(timespec="seconds")
        return {"reason": self.reason, "deadline": self.deadline, "deadline_iso": iso,
                "kind": self.kind}  # fmt: skip

    def event_text(self, now: float) -> str:
        left = max(0.0, self.deadline - now)
        return (
            f"{self.reason}; stops in {show_duration(round(left))} ({self.doc()['deadline_iso']})"
        )


def time_limit_notice(
    limit_deadline: float | None, limit: float | None, notice_s: float, attempt: int, now: float
) -> StopNotice | None:
    """The notice of a time limit, once ``now`` is within ``notice_s`` of it (pure)."""
    if limit_deadline is None or limit is None or now < limit_deadline - notice_s:
        return None
    return StopNotice(limit_reached(limit), limit_deadline, attempt, TIME_LIMIT)


def drain_notice(why: str, grace_s: float, attempt: int, now: float) -> StopNotice:
    """A stop that begins now: SIGTERM now, SIGKILL after the grace period (the deadline)."""
    return StopNotice(why, now + grace_s, attempt, STOPPING)


class Notices:
    """The pending notice per running job, and the culling counters for ``/metrics``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_job: dict[int, StopNotice] = {}
        self.culled_jobs = 0
        self.culled_gpu_hours = 0.0
        self.drains: dict[str, threading.Timer] = {}  # nodes to take down after their notice

    def get(self, job_id: int, attempt: int | None = None) -> StopNotice | None:
        with self._lock:
            notice = self._by_job.get(job_id)
        if notice is None or (attempt is not None and notice.attempt != attempt):
            return None
        return notice

    def put(self, job_id: int, notice: StopNotice) -> bool:
        """Keep the notice unless one as early is pending already; whether it was kept."""
        with self._lock:
            old = self._by_job.get(job_id)
            if (
                old is not None
                and old.attempt == notice.attempt
                and old.deadline <= notice.deadline
            ):
                return False
            self._by_job[job_id] = notice
            return True

    def drop(self, job_id: int) -> StopNotice | None:
        with self._lock:
            return self._by_job.pop(job_id, None)

    def keep_only(self, job_ids: set[int]) -> None:
        """Forget the notices of jobs that no longer run."""
        with self._lock:
            for gone in set(self._by_job) - job_ids:
                del self._by_job[gone]

    def culled(self, gpus: float, idle_s: float) -> None:
        with self._lock:
            self.culled_jobs += 1
            self.culled_gpu_hours += gpus * idle_s / 3600

    def render(self) -> str:
        """The culling counters in Prometheus' text format (they restart at 0 with the service,
        which ``rate()`` and ``increase()`` handle)."""
        with self._lock:
            jobs, hours = self.culled_jobs, self.culled_gpu_hours
        return (
            "# HELP labhive_culled_jobs_total Idle GPU servers stopped by the culler.\n"
            "# TYPE labhive_culled_jobs_total counter\n"
            f"labhive_culled_jobs_total {jobs}\n"
            "# HELP labhive_reclaimed_gpu_hours_total GPU-hours culled servers had held idle "
            "(kernels idle, GPU at 0 %) when they were stopped and their GPUs given back.\n"
            "# TYPE labhive_reclaimed_gpu_hours_total counter\n"
            f"labhive_reclaimed_gpu_hours_total {hours:.6f}\n"
        )


def announce(
    store: Any, executor: Any, job_id: int, handles: list[Any], notice: StopNotice, now: float
) -> None:
    """The notice as a job event (``stop-notice``) and in the tasks' notice files."""
    from labhive.scheduler.service import lifecycle as lc
    from labhive.scheduler.service.store import transitions as tx

    with store.write() as conn:
        job = {"id": job_id, "state": lc.RUNNING, "attempt": notice.attempt}
        tx.note(conn, job, "stop-notice", notice.event_text(now), now)
    write_files(executor, handles, notice.doc())


def write_files(executor: Any, handles: list[Any], doc: dict[str, Any] | None) -> None:
    """Tell the executor to write (None: remove) the tasks' notice files, where it can."""
    from labhive.scheduler.executors.capabilities import Notices

    if isinstance(executor, Notices) and handles:
        executor.notify(handles, doc)


DRAIN = "drain"


def drain_with_notice(svc: Any, node: str, reason: str, by: str, notice_s: float) -> int:
    """``labhive node down NODE --notice 60s``: every job with a task on ``node`` gets a notice
    now; the node is taken down (its jobs stopped with the grace period) ``notice_s`` later.
    Returns how many jobs were told. A ``node up`` meanwhile calls it off (``cancel_drain``).
    The mark is stored only at the deadline: a service that restarts during the notice forgets
    the drain (the admin asks again), rather than applying it without the notice."""
    from labhive.scheduler.executors.base import TaskHandle
    from labhive.scheduler.service.policy_port import task_key
    from labhive.scheduler.service.store import queries

    loop = svc.loop
    now = loop.clock()
    with svc.store.read() as conn:
        rows = queries.running_tasks_on(conn, node)
        by_job: dict[tuple[int, int], list[Any]] = {}
        for t in rows:
            key = task_key(t["job_id"], t["attempt"], t["role"], t["idx"], t["generation"])
            by_job.setdefault((t["job_id"], t["attempt"]), []).append(
                TaskHandle(key, t["handle"] or {})
            )
    why = f"node {node} is being taken down ({by}: {reason or 'no reason given'})"
    for (job_id, attempt), handles in by_job.items():
        notice = StopNotice(why, now + notice_s, attempt, DRAIN)
        if loop.notices.put(job_id, notice):
            announce(svc.store, svc.executor, job_id, [h for h in handles if h.info], notice, now)
    cancel_drain(loop, node)
    timer = threading.Timer(notice_s, loop.take_down, (node, reason, by))
    timer.daemon = True
    loop.notices.drains[node] = timer
    timer.start()
    return len(by_job)


def cancel_drain(loop: Any, node: str) -> bool:
    """Call off a drain still in its notice; whether there was one."""
    timer = loop.notices.drains.pop(node, None)
    if timer is None:
        return False
    timer.cancel()
    return True
