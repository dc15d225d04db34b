"""The store's named read queries for the REST API, with typed rows.

The routers ask for "a job", "a user's jobs", "the tasks of an attempt" by name instead of
composing SQL inline, so each query is written (and indexed, and reviewed) once. A row is a
``TypedDict`` of its table's columns: the handlers keep reading ``row["state"]``, and the type
checker knows which keys exist and what they hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, TypedDict, cast

from sqlalchemy import case, func, or_, select
from sqlalchemy.engine import Connection

from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.store.tables import events, jobs, tasks


class JobRow(TypedDict):
    """One row of ``jobs``."""

    id: int
    name: str
    user: str
    vc: str
    priority: int
    state: str
    attempt: int
    retries: int
    retries_used: int
    task_count: int
    gpus: int
    opportunistic: bool
    cancel_requested: bool
    spec: dict[str, Any]
    reason: str
    why: str | None
    exit_code: int | None
    submitted_at: float
    started_at: float | None
    finished_at: float | None
    updated_at: float
    owner_id: int | None


class TaskRow(TypedDict):
    """One row of ``tasks``: one task of one attempt, with what the executor needs to find it."""

    id: int
    job_id: int
    attempt: int
    role: str
    idx: int
    generation: int
    node: str
    gpus: list[int]
    cells: list[str]  # leaf cell ids, as the cluster config addresses them
    state: str
    exit_code: int | None
    handle: dict[str, Any] | None
    started_at: float
    ended_at: float | None
    #: The job whose priority downgraded this task alone to opportunistic (lazy preemption).
    downgraded_by: str | None


class EventRow(TypedDict):
    """One row of ``events``: a state transition of a job."""

    id: int
    job_id: int
    time: float
    from_state: str | None
    to_state: str
    attempt: int
    reason: str
    why: str | None


class QueueRow(TypedDict):
    """What the queue shows of an active job beside the loop's view of it."""

    id: int
    user: str
    owner_id: int | None
    name: str
    gpus: int
    task_count: int


def columns(row: JobRow | TaskRow | EventRow | QueueRow) -> dict[str, Any]:
    """A row as a plain mapping of column to value, to copy into a response model."""
    return cast(dict[str, Any], row)


@dataclass(frozen=True)
class JobFilter:
    """Which jobs ``GET /jobs`` lists: newest first, one page of them.

    ``owner_only`` restricts the list to ``owner_id``'s jobs (a user sees only their own);
    ``user`` filters by the owner's name (an admin's choice)."""

    owner_only: bool = False
    owner_id: int | None = None
    user: str | None = None
    state: str | None = None
    vc: str | None = None
    limit: int = 100
    offset: int = 0


def ping(conn: Connection) -> None:
    """The cheapest round trip to the database (``/health`` asks it whether it answers)."""
    conn.execute(select(1))


def job(conn: Connection, job_id: int) -> JobRow | None:
    """The job ``job_id``, or None when there is no such job."""
    row = conn.execute(select(jobs).where(jobs.c.id == job_id)).mappings().first()
    return cast(JobRow, dict(row)) if row else None


def job_list(conn: Connection, want: JobFilter) -> list[JobRow]:
    """One page of the jobs ``want`` selects, newest first."""
    query = select(jobs).order_by(jobs.c.id.desc()).limit(want.limit).offset(want.offset)
    if want.owner_only:
        query = query.where(jobs.c.owner_id == want.owner_id)
    elif want.user:
        query = query.where(jobs.c.user == want.user)
    if want.state:
        query = query.where(jobs.c.state == want.state)
    if want.vc:
        query = query.where(jobs.c.vc == want.vc)
    return [cast(JobRow, dict(r)) for r in conn.execute(query).mappings()]


def attempt_tasks(conn: Connection, job_id: int, attempt: int) -> list[TaskRow]:
    """The tasks of one attempt of a job, by role and index, a task's newest run first (a
    task stopped on its own and started again has a row per generation)."""
    query = (
        select(tasks)
        .where(tasks.c.job_id == job_id, tasks.c.attempt == attempt)
        .order_by(tasks.c.role, tasks.c.idx, tasks.c.generation.desc())
    )
    return [cast(TaskRow, dict(r)) for r in conn.execute(query).mappings()]


def job_tasks(conn: Connection, job_id: int) -> list[TaskRow]:
    """Every task of every attempt of a job, in the order they were stored."""
    query = select(tasks).where(tasks.c.job_id == job_id).order_by(tasks.c.id)
    return [cast(TaskRow, dict(r)) for r in conn.execute(query).mappings()]


def last_attempt(conn: Connection, job_id: int) -> int | None:
    """The newest attempt that ran tasks (a requeued job's logs are its last run's)."""
    last: int | None = conn.execute(
        select(func.max(tasks.c.attempt)).where(tasks.c.job_id == job_id)
    ).scalar()
    return last


def job_events(conn: Connection, job_id: int) -> list[EventRow]:
    """A job's state transitions, oldest first."""
    query = select(events).where(events.c.job_id == job_id).order_by(events.c.id)
    return [cast(EventRow, dict(r)) for r in conn.execute(query).mappings()]


@dataclass(frozen=True)
class QueueFilter:
    """Which active jobs a page of ``GET /queue`` lists: ``owner_id``'s (every owner's when
    None: an admin's view), in VC ``vc`` (every VC when None)."""

    owner_id: int | None
    vc: str | None = None
    limit: int = 100
    offset: int = 0


def _queue_where(want: QueueFilter) -> list[Any]:
    where: list[Any] = [jobs.c.state.in_(lc.ACTIVE)]
    if want.owner_id is not None:
        where.append(jobs.c.owner_id == want.owner_id)
    if want.vc:
        where.append(jobs.c.vc == want.vc)
    return where


def queue_page(conn: Connection, want: QueueFilter) -> tuple[list[QueueRow], int]:
    """One page of the active jobs ``want`` selects and how many there are in all: running
    first, then waiting by priority and submission (HiveD's queue order; the loop's view gives
    each its position in its VC). The page is cut here, in SQL: the queue's cost follows the
    page, not the 10,000 jobs behind it."""
    where = _queue_where(want)
    total = conn.execute(select(func.count()).select_from(jobs).where(*where)).scalar_one()
    query = (
        select(jobs.c.id, jobs.c.user, jobs.c.owner_id, jobs.c.name, jobs.c.gpus, jobs.c.task_count)
        .where(*where)
        .order_by(case((jobs.c.state == lc.RUNNING, 0), else_=1), jobs.c.priority.desc(), jobs.c.id)
        .limit(want.limit)
        .offset(want.offset)
    )
    rows = [cast(QueueRow, dict(r)) for r in conn.execute(query).mappings()]
    return rows, int(total)


class RunningCount(TypedDict):
    """Other users' running jobs in one VC: how many, and the GPUs they hold."""

    vc: str
    jobs: int
    gpus: int


def others_running(conn: Connection, owner_id: int | None, vc: str | None) -> list[RunningCount]:
    """Per VC, the running jobs not ``owner_id``'s (what a user may know of others': how many,
    and their GPUs, never whose). Running jobs are few (the cluster's size bounds them), and
    the state index finds them without reading the waiting ones."""
    where = [
        jobs.c.state == lc.RUNNING,
        or_(jobs.c.owner_id.is_(None), jobs.c.owner_id != owner_id),
    ]
    if vc:
        where.append(jobs.c.vc == vc)
    query = (
        select(
            jobs.c.vc,
            func.count().label("jobs"),
            func.coalesce(func.sum(jobs.c.gpus), 0).label("gpus"),
        )
        .where(*where)
        .group_by(jobs.c.vc)
    )
    return [cast(RunningCount, dict(r)) for r in conn.execute(query).mappings()]


def waiting_by_vc(conn: Connection, owner_id: int | None) -> dict[str, int]:
    """How many of ``owner_id``'s jobs wait in each VC (the owner index finds them)."""
    query = (
        select(jobs.c.vc, func.count())
        .where(jobs.c.owner_id == owner_id, jobs.c.state == lc.WAITING)
        .group_by(jobs.c.vc)
    )
    return {vc: int(n) for vc, n in conn.execute(query).all()}


def active_job_ids(conn: Connection, owner_id: int | None) -> set[int]:
    """The ids of ``owner_id``'s waiting and running jobs."""
    query = select(jobs.c.id).where(jobs.c.owner_id == owner_id, jobs.c.state.in_(lc.ACTIVE))
    return set(conn.execute(query).scalars())


def active_jobs(conn: Connection) -> list[JobRow]:
    """Every waiting and running job, oldest first (what a rebuild of the policy starts from)."""
    query = select(jobs).where(jobs.c.state.in_(lc.ACTIVE)).order_by(jobs.c.id)
    return [cast(JobRow, dict(r)) for r in conn.execute(query).mappings()]


def waiting_count(conn: Connection, user: str, vc: str) -> int:
    """How many of ``user``'s jobs wait in ``vc`` (the intake's cap on waiting jobs)."""
    query = select(func.count()).where(
        jobs.c.user == user, jobs.c.vc == vc, jobs.c.state == lc.WAITING
    )
    return int(conn.execute(query).scalar_one())


def job_vc(conn: Connection, job_id: int) -> str | None:
    """The VC of job ``job_id`` (None: no such job)."""
    vc: str | None = conn.execute(select(jobs.c.vc).where(jobs.c.id == job_id)).scalar()
    return vc


def job_states(conn: Connection, job_ids: list[int]) -> dict[int, str]:
    """job id -> state, for the jobs of ``job_ids`` that exist (asked 500 at a time: a list
    of bound parameters has a limit on some databases)."""
    out: dict[int, str] = {}
    for chunk in range(0, len(job_ids), 500):
        part = job_ids[chunk : chunk + 500]
        rows = conn.execute(select(jobs.c.id, jobs.c.state).where(jobs.c.id.in_(part)))
        out.update({row.id: row.state for row in rows})
    return out


def running_tasks_on(conn: Connection, node: str) -> list[TaskRow]:
    """The running tasks placed on ``node`` (a drain's notice goes to their jobs)."""
    query = select(tasks).where(tasks.c.node == node, tasks.c.state == lc.RUNNING)
    return [cast(TaskRow, dict(r)) for r in conn.execute(query).mappings()]


class EndedTask(NamedTuple):
    """A task that ended, with what the executor needs to find what it left (its handle)."""

    id: int
    handle: dict[str, Any] | None


def tasks_ended_between(conn: Connection, after: float, until: float) -> list[EndedTask]:
    """The tasks that ended in (``after``, ``until``] (the work dirs' retention sweeps them)."""
    query = select(tasks.c.id, tasks.c.handle).where(
        tasks.c.state != lc.RUNNING,
        tasks.c.ended_at.is_not(None),
        tasks.c.ended_at > after,
        tasks.c.ended_at <= until,
    )
    return [EndedTask(r.id, r.handle) for r in conn.execute(query)]
