"""``POST /jobs/{id}/stop-notice`` and ``/stop-notice/withdraw``: announce, withdraw or carry out
a stop with notice (admins: the GPU culler runs with the LabHive admin scope).

An announcement shows on the job (``stopping``), in its events and in its tasks' notice files;
the service does not stop the job for it: the caller stops it later (``in_s`` 0), after checking
again, or withdraws it. See service/notices.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI

from labhive.scheduler.errors import UserError
from labhive.scheduler.executors.base import TaskHandle
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service import notices as nt
from labhive.scheduler.service import queries as q
from labhive.scheduler.service import schemas as s
from labhive.scheduler.service.api.jobs import job_out as _job_out
from labhive.scheduler.service.auth import Forbidden
from labhive.scheduler.service.policy_port import task_key
from labhive.scheduler.service.routing import JobId, NotFound, Who, endpoints

if TYPE_CHECKING:
    from labhive.scheduler.service.context import Service


def register(app: FastAPI, svc: Service) -> None:
    _, post = endpoints(app)

    def running(job_id: int, admin: bool) -> tuple[q.JobRow, list[TaskHandle]]:
        if not admin:
            raise Forbidden("only admins (and the culler) give stop notices; cancel your own job")
        with svc.store.read() as conn:
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

    @post("/jobs/{job_id}/stop-notice", response_model=s.JobOut)
    def stop_notice(job_id: JobId, body: s.StopNoticeRequest, me: Who) -> s.JobOut:
        """Announce a stop ``in_s`` from now, or (``in_s`` 0) stop the job now."""
        row, handles = running(job_id, me.admin)
        now = svc.loop.clock()
        if body.in_s == 0:
            if body.culled:
                svc.loop.cull(job_id, body.reason, body.gpu_idle_s)
            else:
                with svc.store.write() as conn:
                    lc.request_cancel(conn, job_id)
                svc.loop.cancel(job_id)
            return _job_out(row, svc.loop, sharing=svc.gpu_sharing_note)
        kind = nt.CULL if body.culled else nt.ANNOUNCED
        notice = nt.StopNotice(body.reason, now + body.in_s, row["attempt"], kind)
        if svc.loop.notices.put(job_id, notice):
            nt.announce(svc.store, svc.executor, job_id, handles, notice, now)
        return _job_out(row, svc.loop, sharing=svc.gpu_sharing_note)

    @post("/jobs/{job_id}/stop-notice/withdraw", response_model=s.JobOut)
    def withdraw(job_id: JobId, me: Who) -> s.JobOut:
        """The announced stop is off (the server became busy again): the notice disappears."""
        row, handles = running(job_id, me.admin)
        notice = svc.loop.notices.get(job_id, row["attempt"])
        if notice is None or notice.kind not in (nt.CULL, nt.ANNOUNCED):
            return _job_out(
                row, svc.loop, sharing=svc.gpu_sharing_note
            )  # nothing announced (a time limit is not withdrawn)
        svc.loop.notices.drop(job_id)
        with svc.store.write() as conn:
            why = f"withdrawn: {notice.reason}"
            lc.note(conn, row, "stop-notice-withdrawn", why, svc.loop.clock())
        nt.write_files(svc.executor, handles, None)
        return _job_out(row, svc.loop, sharing=svc.gpu_sharing_note)
