"""A job's pages: the list, one job, its cancel, events, logs, observations, GPUs, suggestions.

Submission (``POST /jobs``) stays in ``app.py`` beside the intake it feeds.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

from fastapi import FastAPI, Query
from sqlalchemy.engine import Connection
from starlette.concurrency import run_in_threadpool

from labhive.scheduler.errors import UserError
from labhive.scheduler.executors.base import TaskHandle
from labhive.scheduler.executors.gpu_share_env import NOT_ENFORCED
from labhive.scheduler.gpu_share import MILLI, share_of_doc
from labhive.scheduler.service import json_body
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service import queries as q
from labhive.scheduler.service import schemas as s
from labhive.scheduler.service.auth import Identity
from labhive.scheduler.service.eta import eta_fields
from labhive.scheduler.service.monitoring import JobGpusOut
from labhive.scheduler.service.policy_port import task_key
from labhive.scheduler.service.responses import encodable
from labhive.scheduler.service.routing import MAX_INT, JobId, NotFound, Who, endpoints

if TYPE_CHECKING:
    from labhive.scheduler.service.context import Service
    from labhive.scheduler.service.loop import SchedulerLoop

MAX_LOG_CHUNK = 1 << 20


def register(app: FastAPI, svc: Service) -> None:
    """Add the job pages (all but the submission)."""
    get, post = endpoints(app)

    @get("/jobs", response_model=s.JobList)
    def list_jobs(
        me: Who,
        state: Annotated[
            Literal["WAITING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED"] | None, Query()
        ] = None,
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
        with svc.store.read() as conn:
            rows = q.job_list(conn, want)
        return s.JobList(jobs=[_job_out(r, svc.loop, sharing=svc.gpu_sharing_note) for r in rows])

    @get("/jobs/{job_id}", response_model=s.JobOut)
    def get_job(job_id: JobId, me: Who) -> s.JobOut:
        with svc.store.read() as conn:
            row = _owned(conn, job_id, me)
            task_rows = q.attempt_tasks(conn, job_id, row["attempt"])
        return _job_out(row, svc.loop, task_rows, with_spec=True, sharing=svc.gpu_sharing_note)

    @post("/jobs/{job_id}/cancel", response_model=s.JobOut)
    async def cancel(
        job_id: JobId, me: Who, wait: Annotated[float, Query(ge=0, le=60)] = svc.cancel_wait_s
    ) -> s.JobOut:
        """Waits (up to ``wait`` s) for the job to end without holding a request thread: the
        store is read in the thread pool, the waiting is on the event loop."""

        def request() -> None:
            with svc.store.write() as conn:
                _owned(conn, job_id, me)
                lc.request_cancel(conn, job_id)

        def look() -> tuple[bool, s.JobOut]:
            with svc.store.read() as conn:
                row = q.job(conn, job_id)
                assert row is not None
                task_rows = q.attempt_tasks(conn, job_id, row["attempt"])
            out = _job_out(row, svc.loop, task_rows, with_spec=True, sharing=svc.gpu_sharing_note)
            return row["state"] in lc.TERMINAL, out

        await run_in_threadpool(request)
        svc.loop.cancel(job_id)
        deadline = time.monotonic() + wait
        while True:
            done, answer = await run_in_threadpool(look)
            left = deadline - time.monotonic()
            if done or left <= 0:
                return answer
            await svc.loop.next_change(min(left, 0.2))

    @get("/jobs/{job_id}/events", response_model=s.EventList)
    def job_events(job_id: JobId, me: Who) -> s.EventList:
        with svc.store.read() as conn:
            _owned(conn, job_id, me)
            rows = q.job_events(conn, job_id)
        fields = s.EventOut.model_fields
        out = [s.EventOut(**{k: v for k, v in q.columns(r).items() if k in fields}) for r in rows]
        return s.EventList(job_id=job_id, events=out)

    @get("/jobs/{job_id}/logs", response_model=s.LogChunk)
    def job_logs(
        job_id: JobId,
        me: Who,
        task: str | None = None,
        stream: Literal["stdout", "stderr"] = "stdout",
        offset: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_LOG_CHUNK)] = 65536,
        attempt: Annotated[int | None, Query(ge=1, le=MAX_INT)] = None,
    ) -> s.LogChunk:
        with svc.store.read() as conn:
            row = _owned(conn, job_id, me)
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
            data = svc.executor.read_log(TaskHandle(key, chosen["handle"]), stream, offset, limit)
        ended = chosen is not None and chosen["state"] != lc.RUNNING
        complete = (ended or row["state"] in lc.TERMINAL) and len(data) < limit
        return s.LogChunk(
            job_id=job_id,
            attempt=at,
            task=f"{chosen['role']}-{chosen['idx']}" if chosen else None,
            stream=stream,
            offset=offset,
            next_offset=offset + len(data),
            data=data.decode("utf-8", errors="replace"),
            complete=complete or (chosen is None and row["state"] in lc.TERMINAL),
            tasks=names,
        )

    @get("/jobs/{job_id}/observations", response_model=s.ObservationList)
    def job_observations(job_id: JobId, me: Who) -> s.ObservationList:
        with svc.store.read() as conn:
            _owned(conn, job_id, me)
            task_rows = q.job_tasks(conn, job_id)
        out = []
        for t in task_rows:
            if not t["handle"]:
                continue
            key = task_key(job_id, t["attempt"], t["role"], t["idx"], t["generation"])
            for path in svc.executor.observations(TaskHandle(key, t["handle"])):
                p = Path(path)
                size = p.stat().st_size if p.exists() else 0
                kind = "strace" if "strace" in p.name else p.suffix.lstrip(".") or "file"
                name = f"{t['role']}-{t['idx']}"
                out.append(
                    s.Observation(task=name, attempt=t["attempt"], kind=kind, path=path, size=size)
                )
        return s.ObservationList(job_id=job_id, observations=out)

    @get("/jobs/{job_id}/gpus", response_model=JobGpusOut)
    def job_gpus(job_id: JobId, me: Who) -> JobGpusOut:
        """The job's GPU history (downsampled) and its GPUs' latest readings."""
        with svc.store.read() as conn:
            _owned(conn, job_id, me)
        assert svc.monitoring is not None
        return svc.monitoring.job_gpus(job_id)

    @get("/jobs/{job_id}/suggest")
    def job_suggest(job_id: JobId, me: Who) -> dict[str, Any]:
        """What would start this waiting job soon: changes tried against the live state."""
        with svc.store.read() as conn:
            row = _owned(conn, job_id, me)
        if row["state"] != lc.WAITING:
            raise UserError(f"job {job_id} is {row['state']}, not waiting: nothing to suggest")
        if svc.loop.eta is None:
            raise UserError("this service runs without ETAs (LABHIVE_ETA=off): no suggestions")
        everyone = me.admin or "*" in me.vcs
        vcs = [v for v in svc.loop.cluster().vcs if everyone or v in me.vcs]
        found = svc.loop.eta.suggest(job_id, vcs)
        return {"job_id": job_id, "suggestions": [dataclasses.asdict(x) for x in found]}


def _owned(conn: Connection, job_id: int, me: Identity) -> q.JobRow:
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


def _showable(row: q.JobRow) -> q.JobRow:
    """``row`` with a spec its answer can hold: one stored before bodies were bounded may nest
    hundreds of levels deep, and building the answer recursed past Python's limit (a 500 on
    every later read of the job)."""
    if json_body.deeper_than(row["spec"], json_body.MAX_DEPTH):
        unshown = f"not shown: this spec nests more than {json_body.MAX_DEPTH} levels deep"
        row = {**row, "spec": {"name": row["name"], "labhive": unshown}}
    return cast(q.JobRow, encodable(row))


def _job_out(
    row: q.JobRow,
    loop: SchedulerLoop | None = None,
    task_rows: list[q.TaskRow] | None = None,
    with_spec: bool = False,
    sharing: str = NOT_ENFORCED,
) -> s.JobOut:
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
