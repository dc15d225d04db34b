"""What the ETA tracker reads and writes: the jobs a forecast starts from, the ended runs the
duration model learns from, and ``job_etas`` (each waiting job's first estimate and, once it
started, that estimate's error).

``service/eta.py`` decides what to forecast and how to score it; the SQL is here, with typed
rows.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection

from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.store.tables import job_etas, jobs


class ForecastRow(NamedTuple):
    """An active job as the forecast takes it from the store."""

    id: int
    user: str
    submitted_at: float
    started_at: float | None


class PastRow(NamedTuple):
    """An ended job the duration model may learn from."""

    id: int
    user: str
    vc: str
    gpus: int
    spec: dict[str, Any]
    state: str
    reason: str
    started_at: float
    finished_at: float | None


class EtaRow(NamedTuple):
    """A waiting job's first estimate: one row of ``job_etas``.

    One type for the row to store and the row read back: a new estimate leaves the score
    fields (when the job started, the error, whether the shown range held it) None, and
    ``score`` fills them in once the job starts."""

    job_id: int
    vc: str
    predicted_at: float
    eta: float
    eta_low: float
    eta_high: float
    started_at: float | None = None
    error_s: float | None = None
    in_range: bool | None = None


_FORECAST = (jobs.c.id, jobs.c.user, jobs.c.submitted_at, jobs.c.started_at)


def running_for_forecast(conn: Connection) -> dict[int, ForecastRow]:
    """The running jobs, by id."""
    query = select(*_FORECAST).where(jobs.c.state == lc.RUNNING)
    return {r.id: ForecastRow(*r) for r in conn.execute(query)}


def waiting_for_forecast(conn: Connection, limit: int | None) -> list[ForecastRow]:
    """The first ``limit`` waiting jobs (all when None) in queue order: priority, then id."""
    query = select(*_FORECAST).where(jobs.c.state == lc.WAITING)
    query = query.order_by(jobs.c.priority.desc(), jobs.c.id)
    if limit is not None:
        query = query.limit(limit)
    return [ForecastRow(*r) for r in conn.execute(query)]


def ended_runs(conn: Connection, limit: int) -> list[PastRow]:
    """The newest ``limit`` jobs that succeeded or failed after they started, newest first."""
    c = jobs.c
    query = (
        select(c.id, c.user, c.vc, c.gpus, c.spec, c.state, c.reason, c.started_at, c.finished_at)
        .where(c.state.in_((lc.SUCCEEDED, lc.FAILED)), c.started_at.is_not(None))
        .order_by(c.id.desc())
        .limit(limit)
    )
    return [PastRow(*r) for r in conn.execute(query)]


def scored(conn: Connection, limit: int) -> list[EtaRow]:
    """The newest ``limit`` estimates of jobs that started, newest start first."""
    query = (
        select(job_etas)
        .where(job_etas.c.started_at.is_not(None))
        .order_by(job_etas.c.started_at.desc())
        .limit(limit)
    )
    return [EtaRow(*r) for r in conn.execute(query)]


def still_waiting(conn: Connection, limit: int) -> list[EtaRow]:
    """The newest ``limit`` estimates of jobs still waiting, newest estimate first."""
    query = (
        select(job_etas)
        .join(jobs, jobs.c.id == job_etas.c.job_id)
        .where(job_etas.c.started_at.is_(None), jobs.c.state == lc.WAITING)
        .order_by(job_etas.c.predicted_at.desc())
        .limit(limit)
    )
    return [EtaRow(*r) for r in conn.execute(query)]


def estimated(conn: Connection, job_ids: list[int]) -> set[int]:
    """Which of ``job_ids`` have a first estimate already."""
    query = select(job_etas.c.job_id).where(job_etas.c.job_id.in_(job_ids))
    return set(conn.execute(query).scalars())


def started_unscored(conn: Connection) -> list[tuple[EtaRow, float]]:
    """Estimates of jobs that started and are not scored yet, with when each started."""
    query = (
        select(job_etas, jobs.c.started_at.label("began"))
        .join(jobs, jobs.c.id == job_etas.c.job_id)
        .where(job_etas.c.error_s.is_(None), jobs.c.started_at.is_not(None))
    )
    return [(EtaRow(*r[:-1]), r[-1]) for r in conn.execute(query)]


def add(conn: Connection, new: list[EtaRow]) -> None:
    """Store first estimates (their score fields None until ``score``)."""
    if new:
        conn.execute(insert(job_etas), [n._asdict() for n in new])


def score(conn: Connection, job_id: int, began: float, error_s: float, in_range: bool) -> None:
    """Job ``job_id``'s estimate met its start: ``began``, the error, and whether it fell in
    the shown range."""
    conn.execute(
        update(job_etas)
        .where(job_etas.c.job_id == job_id)
        .values(started_at=began, error_s=error_s, in_range=in_range)
    )


def every_eta(conn: Connection) -> list[EtaRow]:
    """Every stored estimate."""
    return [EtaRow(*r) for r in conn.execute(select(job_etas))]
