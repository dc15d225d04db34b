"""A job's pages: the list, one job, its cancel, events, logs, observations, GPUs, suggestions.

Submission (``POST /jobs``) stays in ``app.py`` beside the intake it feeds.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

from fastapi import FastAPI, Query

from labhive.scheduler.core.gpu_share import MILLI, share_of_doc
from labhive.scheduler.executors.gpu_share_env import NOT_ENFORCED
from labhive.scheduler.service import json_body
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service import schemas as s
from labhive.scheduler.service.api.deps import Jobs, route
from labhive.scheduler.service.eta import eta_fields
from labhive.scheduler.service.monitoring import JobGpusOut
from labhive.scheduler.service.responses import encodable
from labhive.scheduler.service.routing import MAX_INT, JobId, Who
from labhive.scheduler.service.store import queries as q

if TYPE_CHECKING:
    from labhive.scheduler.service.loop import SchedulerLoop

MAX_LOG_CHUNK = 1 << 20
#: How long ``POST /jobs/{id}/cancel`` waits for the job to end unless told (the OpenAPI
#: document shows it as the default of ``wait``).
CANCEL_WAIT_S = 5.0

StateName = Literal["WAITING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED"]


def list_jobs(
    me: Who,
    jobs: Jobs,
    state: Annotated[StateName | None, Query()] = None,
    vc: str | None = None,
    user: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
) -> s.JobList:
    want = q.JobFilter(
        owner_only=not me.admin,
        owner_id=me.id,
        user=user,
        state=state,
        vc=vc,
        limit=limit,
        offset=offset,
    )
    rows = jobs.jobs(want)
    loop, sharing = jobs.svc.loop, jobs.svc.gpu_sharing_note
    return s.JobList(jobs=[job_out(r, loop, sharing=sharing) for r in rows])


def get_job(job_id: JobId, me: Who, jobs: Jobs) -> s.JobOut:
    row, task_rows = jobs.job(job_id, me)
    return job_out(row, jobs.svc.loop, task_rows, with_spec=True, sharing=jobs.svc.gpu_sharing_note)


async def cancel(
    job_id: JobId,
    me: Who,
    jobs: Jobs,
    wait: Annotated[float, Query(ge=0, le=60)] = CANCEL_WAIT_S,
) -> s.JobOut:
    """Waits (up to ``wait`` s) for the job to end without holding a request thread: the
    store is read in the thread pool, the waiting is on the event loop."""
    row, task_rows = await jobs.cancel(job_id, me, wait)
    return job_out(row, jobs.svc.loop, task_rows, with_spec=True, sharing=jobs.svc.gpu_sharing_note)


def job_events(job_id: JobId, me: Who, jobs: Jobs) -> s.EventList:
    rows = jobs.events(job_id, me)
    fields = s.EventOut.model_fields
    out = [s.EventOut(**{k: v for k, v in q.columns(r).items() if k in fields}) for r in rows]
    return s.EventList(job_id=job_id, events=out)


def job_logs(
    job_id: JobId,
    me: Who,
    jobs: Jobs,
    task: str | None = None,
    stream: Literal["stdout", "stderr"] = "stdout",
    offset: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_LOG_CHUNK)] = 65536,
    attempt: Annotated[int | None, Query(ge=1, le=MAX_INT)] = None,
) -> s.LogChunk:
    got = jobs.log(job_id, me, task, attempt, stream=stream, offset=offset, limit=limit)
    chosen, row, data = got.task, got.job, got.data
    ended = chosen is not None and chosen["state"] != lc.RUNNING
    complete = (ended or row["state"] in lc.TERMINAL) and len(data) < limit
    return s.LogChunk(
        job_id=job_id,
        attempt=got.attempt,
        task=f"{chosen['role']}-{chosen['idx']}" if chosen else None,
        stream=stream,
        offset=offset,
        next_offset=offset + len(data),
        data=data.decode("utf-8", errors="replace"),
        complete=complete or (chosen is None and row["state"] in lc.TERMINAL),
        tasks=got.tasks,
    )


def job_observations(job_id: JobId, me: Who, jobs: Jobs) -> s.ObservationList:
    out = [s.Observation(**dataclasses.asdict(f)) for f in jobs.observations(job_id, me)]
    return s.ObservationList(job_id=job_id, observations=out)


def job_gpus(job_id: JobId, me: Who, jobs: Jobs) -> JobGpusOut:
    """The job's GPU history (downsampled) and its GPUs' latest readings."""
    jobs.owned(job_id, me)
    assert jobs.svc.monitoring is not None
    return jobs.svc.monitoring.job_gpus(job_id)


def job_suggest(job_id: JobId, me: Who, jobs: Jobs) -> dict[str, Any]:
    """What would start this waiting job soon: changes tried against the live state."""
    found = jobs.suggestions(job_id, me)
    return {"job_id": job_id, "suggestions": [dataclasses.asdict(x) for x in found]}


def register(app: FastAPI) -> None:
    """Add the job pages (all but the submission)."""
    route(app, "GET", "/jobs", list_jobs, response_model=s.JobList)
    route(app, "GET", "/jobs/{job_id}", get_job, response_model=s.JobOut)
    route(app, "POST", "/jobs/{job_id}/cancel", cancel, response_model=s.JobOut)
    route(app, "GET", "/jobs/{job_id}/events", job_events, response_model=s.EventList)
    route(app, "GET", "/jobs/{job_id}/logs", job_logs, response_model=s.LogChunk)
    route(
        app,
        "GET",
        "/jobs/{job_id}/observations",
        job_observations,
        response_model=s.ObservationList,
    )
    route(app, "GET", "/jobs/{job_id}/gpus", job_gpus, response_model=JobGpusOut)
    route(app, "GET", "/jobs/{job_id}/suggest", job_suggest)


def _showable(row: q.JobRow) -> q.JobRow:
    """``row`` with a spec its answer can hold: one stored before bodies were bounded may nest
    hundreds of levels deep, and building the answer recursed past Python's limit (a 500 on
    every later read of the job)."""
    if json_body.deeper_than(row["spec"], json_body.MAX_DEPTH):
        unshown = f"not shown: this spec nests more than {json_body.MAX_DEPTH} levels deep"
        row = {**row, "spec": {"name": row["name"], "labhive": unshown}}
    return cast(q.JobRow, encodable(row))


def job_out(
    row: q.JobRow,
    loop: SchedulerLoop | None = None,
    task_rows: list[q.TaskRow] | None = None,
    with_spec: bool = False,
    sharing: str = NOT_ENFORCED,
) -> s.JobOut:
    """A job's answer: its row, its tasks, and what the loop says of it now (its place in
    the queue, its ETA, a stop announced)."""
    if with_spec:  # names in a spec stored before intake checked them may not encode
        row, task_rows = _showable(row), encodable(task_rows)
    shown = s.JobOut.model_fields.keys() - {"tasks", "spec"}
    out = s.JobOut(
        **{k: v for k, v in q.columns(row).items() if k in shown},
        tasks=[
            s.TaskOut(
                role=t["role"],
                index=t["idx"],
                node=t["node"],
                address=(t.get("handle") or {}).get("address"),
                gpus=list(t["gpus"]),
                state=t["state"],
                exit_code=t["exit_code"],
                attempt=t["attempt"],
                limits=(t.get("handle") or {}).get("limits"),
                run_as=(t.get("handle") or {}).get("run_as"),
            )
            for t in task_rows or ()
        ],
        spec=row["spec"] if with_spec else None,
    )
    share = share_of_doc(row["spec"])
    if share:  # a GPU share: its fraction, and what (if anything) enforces it
        out.gpus, out.gpu_sharing = share / MILLI, sharing
    if loop is not None and row["state"] == lc.RUNNING:
        notice = loop.notices.get(row["id"], row["attempt"])
        if notice is not None:
            out.stopping = s.StopNoticeOut(**notice.doc())
    if loop is not None and row["state"] == lc.WAITING:
        view = loop.view(row["id"])
        if view is not None and view.state == lc.WAITING:
            out.queue_position = view.queue_position
            out.queue_length = view.queue_length
            out.why = view.why or out.why
        for field, value in eta_fields(loop.estimates.get(row["id"])).items():
            setattr(out, field, value)
    return out
