"""What the monitoring reads and writes: the jobs' downsampled GPU history
(``job_gpu_history``), and the job counts, event rows and running jobs ``/metrics`` shows.

``service/monitoring.py`` decides what to sample, when to compact and how to render; the SQL is
here, with typed rows (``HistoryPoint`` and ``JobEvent`` are ``observe``'s own types).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy import delete, func, insert, select
from sqlalchemy.engine import Connection

from labhive.scheduler.observe.history import HistoryPoint
from labhive.scheduler.observe.tally import JobEvent
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.store.tables import events, job_gpu_history, jobs, tasks

#: The measured columns of a history point (the rest say where and when).
HISTORY_FIELDS = ("gpu_util", "mem_copy_util", "fb_used_mib", "power_w", "temperature_c")


class GpuPoint(NamedTuple):
    """One stored history point of one GPU a job held."""

    node: str
    gpu: int
    uuid: str | None
    point: HistoryPoint


class RunningJob(NamedTuple):
    """A running job as the metrics label it."""

    id: int
    vc: str
    user: str


class RunningHandle(NamedTuple):
    """A running task's executor handle (its pid, for the GPU processes' owners)."""

    job_id: int
    handle: dict[str, Any] | None


def _one_gpu(job_id: int, node: str, gpu: int) -> Any:
    h = job_gpu_history.c
    return (h.job_id == job_id) & (h.node == node) & (h.gpu == gpu)


def _values(job_id: int, node: str, gpu: int, p: HistoryPoint, uuid: str | None) -> dict[str, Any]:
    return {"job_id": job_id, "node": node, "gpu": gpu, "uuid": uuid, "t0": p.t0, "t1": p.t1,
            "n": p.n, **{f: getattr(p, f) for f in HISTORY_FIELDS}}  # fmt: skip


def _point(r: Any) -> HistoryPoint:
    return HistoryPoint(r["t0"], r["t1"], r["n"], **{f: r[f] for f in HISTORY_FIELDS})


def add_point(
    conn: Connection, job_id: int, node: str, gpu: int, p: HistoryPoint, uuid: str | None
) -> None:
    """One more point of the GPU ``(node, gpu)`` job ``job_id`` holds."""
    conn.execute(insert(job_gpu_history).values(_values(job_id, node, gpu, p, uuid)))


def point_count(conn: Connection, job_id: int, node: str, gpu: int) -> int:
    """How many points the job's history of that GPU holds."""
    query = select(func.count()).select_from(job_gpu_history).where(_one_gpu(job_id, node, gpu))
    return int(conn.execute(query).scalar_one())


def points(conn: Connection, job_id: int, node: str, gpu: int) -> list[HistoryPoint]:
    """The job's history of that GPU, as stored (in the order it was written)."""
    query = select(job_gpu_history).where(_one_gpu(job_id, node, gpu))
    return [_point(r) for r in conn.execute(query).mappings()]


def replace_points(
    conn: Connection,
    job_id: int,
    node: str,
    gpu: int,
    kept: list[HistoryPoint],
    uuid: str | None,
) -> None:
    """The job's history of that GPU becomes ``kept`` (a compaction's result)."""
    conn.execute(delete(job_gpu_history).where(_one_gpu(job_id, node, gpu)))
    for p in kept:
        add_point(conn, job_id, node, gpu, p, uuid)


def job_history(conn: Connection, job_id: int) -> list[GpuPoint]:
    """Every point of every GPU the job held, by node, GPU and time."""
    h = job_gpu_history.c
    query = select(job_gpu_history).where(h.job_id == job_id).order_by(h.node, h.gpu, h.t0)
    return [
        GpuPoint(r["node"], r["gpu"], r["uuid"], _point(r)) for r in conn.execute(query).mappings()
    ]


def events_after(conn: Connection, cursor: int) -> list[JobEvent]:
    """The event rows after ``cursor`` (an event id), each with its job's VC, oldest first."""
    query = (
        select(
            events.c.id,
            events.c.job_id,
            jobs.c.vc,
            events.c.time,
            events.c.from_state,
            events.c.to_state,
            events.c.reason,
        )
        .join(jobs, jobs.c.id == events.c.job_id)
        .where(events.c.id > cursor)
        .order_by(events.c.id)
    )
    return [JobEvent(*r) for r in conn.execute(query).all()]


def job_counts(conn: Connection) -> dict[tuple[str, str], int]:
    """(VC, state) -> how many jobs."""
    query = select(jobs.c.vc, jobs.c.state, func.count()).group_by(jobs.c.vc, jobs.c.state)
    return {(vc, state): int(n) for vc, state, n in conn.execute(query).all()}


def running_jobs(conn: Connection) -> list[RunningJob]:
    """The running jobs, with their VC and user."""
    query = select(jobs.c.id, jobs.c.vc, jobs.c.user).where(jobs.c.state == lc.RUNNING)
    return [RunningJob(*r) for r in conn.execute(query)]


def running_handles(conn: Connection) -> list[RunningHandle]:
    """The running tasks' handles, with their jobs."""
    query = select(tasks.c.job_id, tasks.c.handle).where(tasks.c.state == lc.RUNNING)
    return [RunningHandle(*r) for r in conn.execute(query).all()]
