"""The job lifecycle's writes: each legal move (``lifecycle.py``'s rules) as SQL.

A transition only applies when the job is still in the state the caller saw (a conditional
UPDATE), so two writers can never both move one job, and every change writes its event row in
the same transaction. The functions take an open write connection: the caller (``JobService``,
the intake, the loop's ``record`` pass) owns the transaction and groups them in it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import bindparam, delete, insert, select, text, update
from sqlalchemy.engine import Connection

from labhive.scheduler.core.gpu_share import share_of_doc
from labhive.scheduler.core.model import TaskPlacement
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.lifecycle import (
    ACTIVE,
    RUNNING,
    STOPPED,
    TERMINAL,
    WAITING,
    IllegalTransition,
    NewJob,
    StaleState,
    check_transition,
)
from labhive.scheduler.service.store import queries
from labhive.scheduler.service.store.queries import JobRow, TaskRow
from labhive.scheduler.service.store.tables import allocations, events, jobs, tasks

# Built once: SQLAlchemy then reuses the compiled statements (submission is the hot path).
_INSERT_JOBS = insert(jobs).returning(jobs.c.id, sort_by_parameter_order=True)
_INSERT_EVENT = insert(events)
# PostgreSQL: the whole batch, its ids and first events in one statement (arrays in, one plan
# kept across batches, one round trip). A multi-row INSERT ... RETURNING (the other path) is
# parsed and planned afresh for every batch size and took about 2.7x as long. The columns and
# constants here are ``lifecycle.job_values``'s; tests/test_service_intake.py compares the two
# paths.
_SUBMIT_PG = text(
    """
WITH new AS MATERIALIZED (
  SELECT nextval(pg_get_serial_sequence('jobs', 'id')) AS id, r.*
  FROM unnest(CAST(:names AS text[]), CAST(:users AS text[]), CAST(:vcs AS text[]),
              CAST(:priorities AS integer[]), CAST(:retries AS integer[]),
              CAST(:task_counts AS integer[]), CAST(:gpus AS integer[]), CAST(:specs AS json[]),
              CAST(:owner_ids AS integer[]))
       WITH ORDINALITY AS r(name, "user", vc, priority, retries, task_count, gpus, spec,
                            owner_id, n)
), stored AS (
  INSERT INTO jobs (id, name, "user", vc, priority, state, attempt, retries, retries_used,
                    task_count, gpus, opportunistic, cancel_requested, spec, reason,
                    submitted_at, updated_at, owner_id)
  SELECT id, name, "user", vc, priority, 'WAITING', 1, retries, 0, task_count, gpus,
         false, false, spec, 'submitted', :t, :t, owner_id FROM new
), first_events AS (
  INSERT INTO events (job_id, time, from_state, to_state, attempt, reason)
  SELECT id, :t, NULL, 'WAITING', 1, 'submitted' FROM new
)
SELECT id FROM new ORDER BY n
"""
)


def submit(conn: Connection, job: NewJob, t: float) -> int:
    """Store a new job, WAITING, with its first event; returns its id."""
    return submit_many(conn, [job], t)[0]


def submit_many(conn: Connection, new: Sequence[NewJob], t: float) -> list[int]:
    """Store new jobs in one go (group commit); ids in the order given."""
    if conn.dialect.name == "postgresql":
        return [int(i) for i in conn.execute(_SUBMIT_PG, _pg_arrays(new, t)).scalars()]
    ids = [int(i) for i in conn.execute(_INSERT_JOBS, [lc.job_values(j, t) for j in new]).scalars()]
    conn.execute(
        _INSERT_EVENT,
        [
            {"job_id": i, "time": t, "from_state": None, "to_state": WAITING, "attempt": 1,
             "reason": "submitted", "why": None}
            for i in ids
        ],
    )  # fmt: skip
    return ids


def _pg_arrays(new: Sequence[NewJob], t: float) -> dict[str, Any]:
    return {
        "names": [j.name for j in new],
        "users": [j.user for j in new],
        "vcs": [j.vc for j in new],
        "priorities": [j.priority for j in new],
        "retries": [j.retries for j in new],
        "task_counts": [j.task_count for j in new],
        "gpus": [j.gpus for j in new],
        "specs": [json.dumps(j.spec) for j in new],
        "owner_ids": [j.owner_id for j in new],
        "t": t,
    }


def _event(
    conn: Connection,
    job_id: int,
    t: float,
    from_state: str | None,
    to_state: str,
    attempt: int,
    reason: str,
    why: str | None,
) -> None:
    conn.execute(
        _INSERT_EVENT,
        {
            "job_id": job_id,
            "time": t,
            "from_state": from_state,
            "to_state": to_state,
            "attempt": attempt,
            "reason": reason,
            "why": why,
        },
    )


def transition(
    conn: Connection,
    job: Mapping[str, Any],
    target: str,
    reason: str,
    why: str | None,
    t: float,
    **changes: Any,
) -> JobRow:
    """Move ``job`` (a row as the caller read it) to ``target``, or raise if it moved meanwhile."""
    check_transition(job["state"], target)
    values = {"state": target, "reason": reason, "why": why, "updated_at": t, **changes}
    result = conn.execute(
        update(jobs)
        .where(jobs.c.id == job["id"], jobs.c.state == job["state"])
        .where(jobs.c.attempt == job["attempt"])
        .values(**values)
    )
    if result.rowcount != 1:
        raise StaleState(f"job {job['id']} changed under this transition to {target}")
    attempt = values.get("attempt", job["attempt"])
    _event(conn, job["id"], t, job["state"], target, attempt, reason, why)
    return cast(JobRow, {**job, **values})


def start(
    conn: Connection,
    job: Mapping[str, Any],
    placements: Sequence[TaskPlacement],
    opportunistic: bool,
    t: float,
    generations: Sequence[int] = (),
) -> tuple[JobRow, list[int]]:
    """RUNNING with these tasks; their GPUs are allocated in the same transaction.

    A second call for a RUNNING job adds tasks (an incremental job growing), or starts again
    tasks it stopped alone: those are new rows, of the ``generations`` given (1 by default)."""
    reason = "started opportunistically" if opportunistic else "started"
    if job["state"] == RUNNING:
        reason = "more tasks started"
    where = ", ".join(f"{p.role}-{p.index}@{p.node}:{list(p.gpus)}" for p in placements)
    changes: dict[str, Any] = {"opportunistic": opportunistic, "exit_code": None}
    if job["state"] == WAITING:
        changes["started_at"] = t
    row = transition(conn, job, RUNNING, reason, where, t, **changes)
    ids = []
    # The allocations table's key (node, GPU) refuses a GPU allocated twice: whole GPUs only.
    # A GPU share's task holds its GPU with other sharers (``hived/shares.py``), so it has no
    # row there; the scheduler's share book keeps a GPU's shares at most one GPU.
    shared = share_of_doc(job.get("spec")) > 0
    for i, p in enumerate(placements):
        task_id = conn.execute(
            insert(tasks)
            .values(
                job_id=job["id"],
                attempt=job["attempt"],
                role=p.role,
                idx=p.index,
                generation=generations[i] if i < len(generations) else 1,
                node=p.node,
                gpus=list(p.gpus),
                cells=list(p.cells),
                state=RUNNING,
                started_at=t,
            )
            .returning(tasks.c.id)
        ).scalar_one()
        ids.append(int(task_id))
        if shared:
            continue  # sharers hold their GPU together: the scheduler keeps it at <= 1
        for gpu in p.gpus:
            conn.execute(
                insert(allocations).values(node=p.node, gpu=gpu, job_id=job["id"], task_id=task_id)
            )
    return row, ids


def record_handle(conn: Connection, task_id: int, info: Mapping[str, Any]) -> None:
    conn.execute(update(tasks).where(tasks.c.id == task_id).values(handle=dict(info)))


def task_ended(conn: Connection, task_id: int, exit_code: int | None, t: float) -> None:
    """One task exited: its GPUs are no longer its. The policy frees them in this pass
    (``TasksEnded``) or keeps them with its attempt until the attempt's end (no one else is
    placed there meanwhile)."""
    conn.execute(
        update(tasks)
        .where(tasks.c.id == task_id, tasks.c.state == RUNNING)
        .values(state="ENDED", exit_code=exit_code, ended_at=t)
    )
    conn.execute(delete(allocations).where(allocations.c.task_id == task_id))


def tasks_stopped(
    conn: Connection, job: Mapping[str, Any], task_ids: Sequence[int], why: str, t: float
) -> None:
    """Some tasks of a running job were stopped alone (HiveD's per-task preemption, a node
    down): their rows end STOPPED (they run again as a new generation), their GPUs are
    released, and the job, still RUNNING, says why."""
    conn.execute(
        update(tasks)
        .where(tasks.c.id.in_(list(task_ids)), tasks.c.state == RUNNING)
        .values(state=STOPPED, ended_at=t)
    )
    conn.execute(delete(allocations).where(allocations.c.task_id.in_(list(task_ids))))
    transition(conn, job, RUNNING, "tasks stopped", why, t)


def end_attempt(
    conn: Connection,
    job: Mapping[str, Any],
    target: str,
    reason: str,
    why: str | None,
    t: float,
    *,
    spend_retry: bool = False,
    exit_code: int | None = None,
) -> JobRow:
    """Close the running attempt: tasks ended, GPUs released, job moved to ``target``.

    ``target`` WAITING starts a new attempt (attempt + 1), spending a retry only when asked."""
    conn.execute(
        update(tasks)
        .where(tasks.c.job_id == job["id"], tasks.c.state == RUNNING)
        .values(state="ENDED", ended_at=t)
    )
    conn.execute(delete(allocations).where(allocations.c.job_id == job["id"]))
    changes: dict[str, Any] = {"exit_code": exit_code}
    if target == WAITING:
        changes.update(attempt=job["attempt"] + 1, opportunistic=False, started_at=None)
        if spend_retry:
            changes["retries_used"] = job["retries_used"] + 1
    else:
        changes["finished_at"] = t
    return transition(conn, job, target, reason, why, t, **changes)


def stop_waiting(conn: Connection, job: Mapping[str, Any], reason: str, t: float) -> JobRow:
    """A WAITING job ends without running (cancelled)."""
    return transition(conn, job, STOPPED, reason, None, t, finished_at=t)


def tasks_downgraded(
    conn: Connection, job: Mapping[str, Any], keys: Sequence[tuple[str, int]], by: str
) -> None:
    """Some running tasks of the job now run opportunistic (lazy preemption by job ``by``):
    recorded on their rows, so a restart adopts them so."""
    for role, idx in keys:
        conn.execute(
            update(tasks)
            .where(
                tasks.c.job_id == job["id"],
                tasks.c.attempt == job["attempt"],
                tasks.c.role == role,
                tasks.c.idx == idx,
                tasks.c.state == RUNNING,
            )
            .values(downgraded_by=by)
        )


def note(conn: Connection, job: Mapping[str, Any], reason: str, why: str | None, t: float) -> None:
    """An event that changes no state (a downgrade to opportunistic, a new why)."""
    _event(conn, job["id"], t, job["state"], job["state"], job["attempt"], reason, why)


_SET_WHY = update(jobs).where(jobs.c.id == bindparam("jid")).values(why=bindparam("w"))
_SET_SUBMIT_WHY = (
    update(events)
    .where(events.c.job_id == bindparam("jid"), events.c.reason == "submitted")
    .values(why=bindparam("w"))
)


# PostgreSQL: one statement per table for the whole pass (arrays in, one plan), where an
# executemany runs one UPDATE per job on the server.
_SET_WHYS_PG = text(
    "UPDATE jobs SET why = v.w FROM unnest(CAST(:ids AS integer[]), CAST(:ws AS text[]))"
    " AS v(jid, w) WHERE jobs.id = v.jid"
)
_SET_SUBMIT_WHYS_PG = text(
    "UPDATE events SET why = v.w FROM unnest(CAST(:ids AS integer[]), CAST(:ws AS text[]))"
    " AS v(jid, w) WHERE events.job_id = v.jid AND events.reason = 'submitted'"
)


def set_whys(conn: Connection, whys: Sequence[Mapping[str, Any]]) -> None:
    """Record why new jobs wait ({"jid": id, "w": text} each) on the job and its first event."""
    if not whys:
        return
    if conn.dialect.name == "postgresql":
        arrays = {"ids": [w["jid"] for w in whys], "ws": [w["w"] for w in whys]}
        conn.execute(_SET_WHYS_PG, arrays)
        conn.execute(_SET_SUBMIT_WHYS_PG, arrays)
        return
    conn.execute(_SET_WHY, list(whys))
    conn.execute(_SET_SUBMIT_WHY, list(whys))


def request_cancel(conn: Connection, job_id: int) -> JobRow:
    """Mark the job for the scheduler loop to stop; refuses jobs that already ended."""
    job = queries.job(conn, job_id)
    if job is None:
        raise KeyError(job_id)
    if job["state"] in TERMINAL:
        raise IllegalTransition(f"job {job_id} already ended ({job['state']}); nothing to cancel")
    conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id, jobs.c.state.in_(ACTIVE))
        .values(cancel_requested=True)
    )
    return cast(JobRow, {**job, "cancel_requested": True})


def attempt_tasks(conn: Connection, running: Iterable[Mapping[str, Any]]) -> list[TaskRow]:
    """Every task (running or ended) of these jobs' current attempts."""
    attempts = {job["id"]: job["attempt"] for job in running}
    if not attempts:
        return []
    query = select(tasks).where(tasks.c.job_id.in_(list(attempts))).order_by(tasks.c.id)
    rows = [cast(TaskRow, dict(r)) for r in conn.execute(query).mappings()]
    return [r for r in rows if r["attempt"] == attempts[r["job_id"]]]


def set_waiting_why(conn: Connection, job_id: int, why: str) -> None:
    """Why a waiting job's start is held (the loop's held starts); a job that left WAITING
    meanwhile keeps its own why."""
    conn.execute(update(jobs).where(jobs.c.id == job_id, jobs.c.state == WAITING).values(why=why))


def set_opportunistic(conn: Connection, job_id: int) -> None:
    """The whole job now runs opportunistic (a lazy preemption's downgrade of every task)."""
    conn.execute(update(jobs).where(jobs.c.id == job_id).values(opportunistic=True))
