"""``JobService``: the one facade the REST handlers call (as jupyter-scheduler's
``BaseScheduler`` is for its handlers).

It owns the transactions: each method opens one read or write transaction on the store, asks
the named queries (``store/queries.py``, ``lifecycle.py``) inside it and returns typed rows, so a
handler never holds a connection, never composes SQL and cannot forget the ownership check
that every job page shares. What a handler renders (``JobOut``, the queue's entries) stays in
``api/``; what the loop decides stays in ``runtime/``: this module only joins the two.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection
from starlette.concurrency import run_in_threadpool

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.executors.base import TaskHandle
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.auth import Forbidden, Identity
from labhive.scheduler.service.context import Service
from labhive.scheduler.service.eta import Accuracy, stored_accuracy
from labhive.scheduler.service.policy_port import task_key
from labhive.scheduler.service.routing import NotFound
from labhive.scheduler.service.store import queries as q
from labhive.scheduler.service.store import transitions as tx


@dataclasses.dataclass(frozen=True)
class TaskFile:
    """One file a task's observers wrote (an strace log, a sample file)."""

    task: str
    attempt: int
    kind: str
    path: str
    size: int


@dataclasses.dataclass(frozen=True)
class LogRead:
    """A chunk of one task's log, with what the answer says about it."""

    job: q.JobRow
    attempt: int
    tasks: list[str]
    task: q.TaskRow | None
    data: bytes


class JobService:
    """What the handlers may ask of the service, each question in its own transaction."""

    def __init__(self, svc: Service) -> None:
        self.svc = svc

    # ---- reads --------------------------------------------------------------------------

    def jobs(self, want: q.JobFilter) -> list[q.JobRow]:
        with self.svc.store.read() as conn:
            return q.job_list(conn, want)

    def job(self, job_id: int, me: Identity) -> tuple[q.JobRow, list[q.TaskRow]]:
        """The job (if ``me`` may see it) and its current attempt's tasks, read together."""
        with self.svc.store.read() as conn:
            row = owned(conn, job_id, me)
            return row, q.attempt_tasks(conn, job_id, row["attempt"])

    def owned(self, job_id: int, me: Identity) -> q.JobRow:
        """The job if ``me`` may see it (else the one 404)."""
        with self.svc.store.read() as conn:
            return owned(conn, job_id, me)

    def events(self, job_id: int, me: Identity) -> list[q.EventRow]:
        with self.svc.store.read() as conn:
            owned(conn, job_id, me)
            return q.job_events(conn, job_id)

    def log(
        self, job_id: int, me: Identity, task: str | None, attempt: int | None, **read: Any
    ) -> LogRead:
        """A chunk of a task's log (``read``: stream, offset, limit); the first task when
        ``task`` is not named, the latest attempt when ``attempt`` is not."""
        with self.svc.store.read() as conn:
            row = owned(conn, job_id, me)
            at = attempt or q.last_attempt(conn, job_id) or row["attempt"]
            task_rows = q.attempt_tasks(conn, job_id, at)
        names = list(dict.fromkeys(f"{t['role']}-{t['idx']}" for t in task_rows))
        chosen = task_rows[0] if task_rows and task is None else None
        if task is not None:
            chosen = next((t for t in task_rows if f"{t['role']}-{t['idx']}" == task), None)
            if chosen is None:
                raise NotFound(f"job {job_id} attempt {at} has no task {task!r}; tasks: {names}")
        data = b""
        if chosen is not None and chosen["handle"]:
            key = task_key(job_id, at, chosen["role"], chosen["idx"], chosen["generation"])
            handle = TaskHandle(key, chosen["handle"])
            data = self.svc.executor.read_log(handle, read["stream"], read["offset"], read["limit"])
        return LogRead(row, at, names, chosen, data)

    def observations(self, job_id: int, me: Identity) -> list[TaskFile]:
        with self.svc.store.read() as conn:
            owned(conn, job_id, me)
            task_rows = q.job_tasks(conn, job_id)
        out = []
        for t in task_rows:
            if not t["handle"]:
                continue
            key = task_key(job_id, t["attempt"], t["role"], t["idx"], t["generation"])
            for path in self.svc.executor.observations(TaskHandle(key, t["handle"])):
                p = Path(path)
                size = p.stat().st_size if p.exists() else 0
                kind = "strace" if "strace" in p.name else p.suffix.lstrip(".") or "file"
                name = f"{t['role']}-{t['idx']}"
                out.append(TaskFile(name, t["attempt"], kind, path, size))
        return out

    def suggestions(self, job_id: int, me: Identity) -> list[Any]:
        """What would start this waiting job soon: changes tried against the live state."""
        row = self.owned(job_id, me)
        if row["state"] != lc.WAITING:
            raise UserError(f"job {job_id} is {row['state']}, not waiting: nothing to suggest")
        loop = self.svc.loop
        if loop.eta is None:
            raise UserError("this service runs without ETAs (LABHIVE_ETA=off): no suggestions")
        everyone = me.admin or "*" in me.vcs
        vcs = [v for v in loop.cluster().vcs if everyone or v in me.vcs]
        return loop.eta.suggest(job_id, vcs)

    def ping(self) -> None:
        """Raise unless the store answers a query (``/health``)."""
        with self.svc.store.read() as conn:
            q.ping(conn)

    def active_job_ids(self, owner_id: int | None) -> set[int]:
        """The ids of the account's waiting and running jobs."""
        with self.svc.store.read() as conn:
            return q.active_job_ids(conn, owner_id)

    def running(self, job_id: int, admin: bool) -> tuple[q.JobRow, list[TaskHandle]]:
        """A running job a stop notice is for, with its running tasks' handles (admins)."""
        if not admin:
            raise Forbidden("only admins (and the culler) give stop notices; cancel your own job")
        with self.svc.store.read() as conn:
            row = q.job(conn, job_id)
            if row is None:
                raise NotFound(f"no job {job_id}")
            task_rows = q.attempt_tasks(conn, job_id, row["attempt"])
        if row["state"] != lc.RUNNING:
            raise UserError(f"job {job_id} is {row['state']}, not running: nothing to stop")
        handles = [
            TaskHandle(
                task_key(job_id, t["attempt"], t["role"], t["idx"], t["generation"]), t["handle"]
            )
            for t in task_rows
            if t["state"] == lc.RUNNING and t["handle"]
        ]
        return row, handles

    def cancel_now(self, job_id: int) -> None:
        """Record the cancel of a job already checked, and tell the loop (no waiting)."""
        with self.svc.store.write() as conn:
            tx.request_cancel(conn, job_id)
        self.svc.loop.cancel(job_id)

    def note(self, row: q.JobRow, kind: str, why: str) -> None:
        """An event on the job's record (what happened to it that is no state change)."""
        with self.svc.store.write() as conn:
            tx.note(conn, row, kind, why, self.svc.loop.clock())

    def eta_accuracy(self) -> list[Accuracy]:
        """How close the ETAs given at submit came to the real starts, per VC."""
        return stored_accuracy(self.svc.store)

    def queue_page(
        self, want: q.QueueFilter, others_of: bool
    ) -> tuple[list[q.QueueRow], int, dict[str, int], list[q.RunningCount]]:
        """A page of the queue's rows and their total; with ``others_of``, also the caller's
        waiting jobs per VC and others' running ones (to count others' without their rows)."""
        with self.svc.store.read() as conn:
            rows, total = q.queue_page(conn, want)
            if not others_of:
                return rows, total, {}, []
            mine = q.waiting_by_vc(conn, want.owner_id)
            return rows, total, mine, q.others_running(conn, want.owner_id, want.vc)

    # ---- writes -------------------------------------------------------------------------

    async def cancel(self, job_id: int, me: Identity, wait: float) -> tuple[q.JobRow, list[Any]]:
        """Ask the loop to cancel the job, then wait (up to ``wait`` s) for it to end without
        holding a request thread: the store is read in the thread pool, the waiting is on the
        event loop. The job and its tasks as last read."""

        def request() -> None:
            with self.svc.store.write() as conn:
                owned(conn, job_id, me)
                tx.request_cancel(conn, job_id)

        def look() -> tuple[q.JobRow, list[q.TaskRow]]:
            with self.svc.store.read() as conn:
                row = q.job(conn, job_id)
                assert row is not None
                return row, q.attempt_tasks(conn, job_id, row["attempt"])

        await run_in_threadpool(request)
        self.svc.loop.cancel(job_id)
        deadline = time.monotonic() + wait
        while True:
            row, task_rows = await run_in_threadpool(look)
            left = deadline - time.monotonic()
            if row["state"] in lc.TERMINAL or left <= 0:
                return row, task_rows
            await self.svc.loop.next_change(min(left, 0.2))


def owned(conn: Connection, job_id: int, me: Identity) -> q.JobRow:
    """The job ``job_id`` if ``me`` may see it, else one 404 whether it is someone else's or
    does not exist: a 403 for another user's job told anyone which ids exist (and so how
    busy others are, and when they submit). Admins see every job."""
    row = q.job(conn, job_id)
    if row is None or not me.owns(row["owner_id"]):
        raise NotFound(not_found(job_id, me))
    return row


def not_found(job_id: int, me: Identity) -> str:
    """The one answer for a job that is missing or not the caller's."""
    if me.admin:
        return f"no job {job_id}"
    return f"no job {job_id} of yours: you see only your own jobs (others' in the queue)"
