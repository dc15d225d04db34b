"""The loop's transactions: the pass's one write transaction, the reads a rebuild starts from,
node marks.

The SQL itself is the store's (``store/transitions.py`` for the lifecycle's moves,
``store/queries.py`` and ``store/marks.py`` for the reads), with typed rows (``JobRow``,
``TaskRow``, ``MarkRow``); this module opens the transactions the loop needs and groups the
store's statements in them, so the pass still commits once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from labhive.scheduler.core.model import Cancel, Downgrade, JobView, Start
from labhive.scheduler.core.time_limits import deadline
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.journal import table as journal
from labhive.scheduler.service.policy_port import ServiceEvent
from labhive.scheduler.service.runtime.plan import Plan
from labhive.scheduler.service.runtime.runs import Running, Runs, next_key
from labhive.scheduler.service.store import Store, marks, queries
from labhive.scheduler.service.store import transitions as tx
from labhive.scheduler.service.store.marks import MarkRow
from labhive.scheduler.service.store.queries import JobRow, TaskRow

log = logging.getLogger("labhive.service.loop")


@dataclass(frozen=True)
class Stored:
    """What a rebuild starts from: the active jobs, their current attempts' tasks, the marks."""

    active: list[JobRow]
    tasks: list[TaskRow]
    marks: list[MarkRow]


#: The policy's view of a job, read under the loop's lock (for whys and late downgrades).
Views = Callable[[int], JobView[int] | None]


def job(conn: Connection, job_id: int) -> JobRow | None:
    return queries.job(conn, job_id)


def read_job(store: Store, job_id: int) -> JobRow | None:
    with store.read() as conn:
        return job(conn, job_id)


def read_stored(store: Store) -> Stored:
    with store.read() as conn:
        active = queries.active_jobs(conn)
        running = [j for j in active if j["state"] == lc.RUNNING]
        rows = tx.attempt_tasks(conn, running)
        found = marks.node_marks_of(conn)
    return Stored(active, rows, found)


def mark_down(store: Store, node: str, reason: str, by: str, t: float) -> None:
    with store.write() as conn:
        marks.mark_down(conn, node, reason, by, t)


def unmark(store: Store, node: str) -> None:
    with store.write() as conn:
        marks.unmark(conn, node)


def fail_jobs(store: Store, failed: list[tuple[int, str]], t: float) -> None:
    """Jobs that cannot run (a stored spec no longer valid): FAILED, reason "rejected"."""
    with store.write() as conn:
        for job_id, why in failed:
            row = job(conn, job_id)
            if row is None or row["state"] not in lc.ACTIVE:
                continue
            if row["state"] == lc.RUNNING:
                tx.end_attempt(conn, row, lc.FAILED, "rejected", why, t)
            else:
                tx.transition(conn, row, lc.FAILED, "rejected", why, t, finished_at=t)


def requeue(store: Store, job_id: int, why: str, t: float) -> None:
    """A running job's attempt ends and it waits again (the service stops its tasks)."""
    with store.write() as conn:
        row = job(conn, job_id)
        if row is not None and row["state"] == lc.RUNNING:
            tx.end_attempt(conn, row, lc.WAITING, "requeued", why, t)


def transient(err: BaseException) -> bool:
    """Whether a store error is the database's (down, connection lost: retry the pass) rather
    than one row's (a value it cannot hold: fail that job)."""
    if isinstance(err, OperationalError | InterfaceError | DisconnectionError | PoolTimeout):
        return True
    return bool(getattr(err, "connection_invalidated", False))


# ---- the pass's transaction ------------------------------------------------------------------


def commit(store: Store, plan: Plan, runs: Runs, views: Views, t: float) -> list[ServiceEvent]:
    """Everything the pass decided, in one transaction. Returns the ``Cancel``s for jobs the
    store ended while the policy still holds them (waiting, or placed by this very pass): the
    next pass removes them, so their cells go to someone else."""
    stale: list[int] = []
    with store.write() as conn:
        _record_tasks(conn, plan, t)
        stale += _record_ends(conn, plan, t)
        stale += _record_decisions(conn, plan, runs, views, t)
        journal.write(conn, t, plan.journal, plan.fresh_policy)  # acknowledged with the pass
        try:
            with conn.begin_nested():
                _record_whys(conn, plan.new_jobs, views)
        except Exception as err:  # a why is a courtesy: it never fails the pass
            if transient(err):
                raise
            log.warning("could not record why new jobs wait (%s)", type(err).__name__)
    return [Cancel(job_id, t) for job_id in stale]


def _record_tasks(conn: Connection, plan: Plan, t: float) -> None:
    """Handles learnt, tasks ended or stopped alone, jobs now stopping, why starts wait."""
    for task_id, info in plan.handles:
        tx.record_handle(conn, task_id, info)
    for task_id, code in plan.ended_tasks:
        tx.task_ended(conn, task_id, code, t)
    for part in plan.tasks_stopped:
        row = job(conn, part.job_id)
        if row is not None and (row["state"], row["attempt"]) == (lc.RUNNING, part.attempt):
            tx.tasks_stopped(conn, row, part.task_ids, part.why, t)
    for job_id, why in plan.stopping:
        row = job(conn, job_id)
        if row is not None and row["state"] == lc.RUNNING:
            tx.transition(conn, row, lc.RUNNING, "stopping", why, t)
    for job_id, why in plan.held_whys:
        tx.set_waiting_why(conn, job_id, why)


def _record_ends(conn: Connection, plan: Plan, t: float) -> list[int]:
    """Settled attempts, cancelled waiting jobs, rejected jobs; the stale ones."""
    stale: list[int] = []
    for end in plan.settled:
        row = job(conn, end.job_id)
        if row is None or row["state"] != lc.RUNNING:
            continue
        if row["cancel_requested"] and end.state == lc.WAITING:
            end = replace(end, state=lc.STOPPED, reason="cancelled")
            stale.append(end.job_id)  # the policy was told Requeue
        tx.end_attempt(
            conn, row, end.state, end.reason, end.why, t,
            spend_retry=end.spend_retry, exit_code=end.exit_code,
        )  # fmt: skip
    for job_id in plan.cancelled_waiting:
        row = job(conn, job_id)
        if row is not None and row["state"] == lc.WAITING:
            tx.stop_waiting(conn, row, "cancelled", t)
    for job_id, message in plan.rejected:
        row = job(conn, job_id)
        if row is not None and row["state"] in lc.ACTIVE:
            if row["state"] == lc.RUNNING:
                tx.end_attempt(conn, row, lc.FAILED, "rejected", message, t)
            else:
                tx.transition(conn, row, lc.FAILED, "rejected", message, t, finished_at=t)
    return stale


def _record_decisions(
    conn: Connection, plan: Plan, runs: Runs, views: Views, t: float
) -> list[int]:
    """Starts and downgrades, in the policy's order (a victim's end, recorded before, comes
    before the start on its GPUs); ``plan.starts`` becomes the starts that stand."""
    stale: list[int] = []
    pending: dict[int, list[Start[int]]] = {}
    released = {id(d) for d in plan.released}  # held starts recorded in this pass
    for d in plan.decisions:
        row = job(conn, d.job_id)
        if row is None:
            continue
        if isinstance(d, Start) and row["state"] in lc.ACTIVE:
            held = id(d) in released
            if _record_start_alone(conn, row, d, runs, views, t, held):
                pending.setdefault(row["id"], []).append(d)
            else:
                stale.append(row["id"])  # FAILED in the store: free its cells
        elif isinstance(d, Start):
            stale.append(row["id"])  # ended in the store: never started
        elif isinstance(d, Downgrade) and row["state"] == lc.RUNNING:
            _record_downgrade(conn, row, d, t)
    plan.starts = [d for starts in pending.values() for d in starts]
    return stale


def _record_downgrade(conn: Connection, row: JobRow, d: Downgrade[int], t: float) -> None:
    """Some tasks only (partial stops): the job stays guaranteed, the note names the tasks now
    opportunistic."""
    names = ", ".join(f"{p.role}-{p.index}" for p in d.tasks)
    if not d.tasks:
        tx.set_opportunistic(conn, row["id"])
    else:
        keys = [(p.role, p.index) for p in d.tasks]
        tx.tasks_downgraded(conn, row, keys, d.by)
    why = f"downgraded by job {d.by}: {d.reason}"
    tx.note(conn, row, "downgraded", f"{names}: {why}" if names else why, t)


def _record_start_alone(
    conn: Connection,
    row: JobRow,
    d: Start[int],
    runs: Runs,
    views: Views,
    t: float,
    held: bool = False,
) -> bool:
    """Record one start in its own savepoint: a job whose start the store cannot hold (a
    role name it cannot encode or that is too long, stored before intake refused such
    names) fails alone, with a reason, instead of failing the pass for every job. A
    database that is down is not the job's fault: that error fails the pass (retried)."""
    try:
        with conn.begin_nested():
            _record_start(conn, row, d, runs, t)
            if held:
                _record_late_downgrades(conn, row, d, views)
        return True
    except Exception as err:
        if transient(err):
            raise
        kind = type(err).__name__
    log.warning("job %s: its start could not be recorded (%s)", row["id"], kind)
    why = (
        f"its start could not be recorded in the job store ({kind}): a task "
        "role or name it cannot hold (a lone surrogate, a NUL, over 128 characters); "
        "rename it and submit again"
    )
    if row["state"] == lc.RUNNING:
        tx.end_attempt(conn, row, lc.FAILED, "unstorable", why, t)
    else:
        tx.transition(conn, row, lc.FAILED, "unstorable", why, t, finished_at=t)
    runs.forget(row["id"])
    return False


def _record_start(conn: Connection, row: JobRow, d: Start[int], runs: Runs, t: float) -> None:
    job_id = row["id"]
    run = runs.running.get(job_id)
    if run is None:
        run = runs.running[job_id] = Running(
            row["attempt"], retries=row["retries"], retries_used=row["retries_used"]
        )
    # A task started again within its attempt is its next generation (a new row).
    keys = [next_key(run, job_id, p.role, p.index) for p in d.tasks]
    generations = [k.generation for k in keys]
    run.generations.update(((k.role, k.index), k.generation) for k in keys)
    _, ids = tx.start(conn, row, d.tasks, d.opportunistic, t, generations)
    if row["state"] == lc.WAITING:  # not when an incremental job grows
        spec = runs.specs.get(job_id)
        run.deadline = deadline(spec.time_limit if spec is not None else None, t)
    for p, key, task_id in zip(d.tasks, keys, ids, strict=True):
        run.task_ids[key] = task_id
        run.gpus.update((p.node, g) for g in p.gpus)


def _record_late_downgrades(conn: Connection, row: JobRow, d: Start[int], views: Views) -> None:
    """A start held back for draining GPUs is recorded passes after the policy decided it:
    a task of it the policy downgraded meanwhile is marked now (its Downgrade, recorded
    then, found no row), so a restart adopts it outside its VC's cells."""
    view = views(row["id"])
    placed = {(p.role, p.index) for p in d.tasks}
    by_task = {(r, i): by for r, i, by in (view.downgraded if view else ()) if (r, i) in placed}
    for by in set(by_task.values()):
        tx.tasks_downgraded(conn, row, [at for at, b in by_task.items() if b == by], by)


def _record_whys(conn: Connection, job_ids: list[int], views: Views) -> None:
    """The why-text of freshly queued jobs goes on the job and on its 'submitted' event."""
    whys = []
    for job_id in job_ids:
        view = views(job_id)
        if view is not None and view.state == lc.WAITING and view.why:
            whys.append({"jid": job_id, "w": view.why})
    tx.set_whys(conn, whys)
