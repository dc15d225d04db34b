"""``POST /jobs/{id}/stop-notice`` and ``/stop-notice/withdraw``: announce, withdraw or carry out
a stop with notice (admins: the GPU culler runs with the LabHive admin scope).

An announcement shows on the job (``stopping``), in its events and in its tasks' notice files;
the service does not stop the job for it: the caller stops it later (``in_s`` 0), after checking
again, or withdraws it. See service/notices.py.
"""

from __future__ import annotations

from fastapi import FastAPI

from labhive.scheduler.service import notices as nt
from labhive.scheduler.service import schemas as s
from labhive.scheduler.service.api.deps import Jobs, route
from labhive.scheduler.service.api.jobs import job_out
from labhive.scheduler.service.routing import JobId, Who


def stop_notice(job_id: JobId, body: s.StopNoticeRequest, me: Who, jobs: Jobs) -> s.JobOut:
    """Announce a stop ``in_s`` from now, or (``in_s`` 0) stop the job now."""
    svc = jobs.svc
    row, handles = jobs.running(job_id, me.admin)
    now = svc.loop.clock()
    if body.in_s == 0:
        if body.culled:
            svc.loop.cull(job_id, body.reason, body.gpu_idle_s)
        else:
            jobs.cancel_now(job_id)
        return job_out(row, svc.loop, sharing=svc.gpu_sharing_note)
    kind = nt.CULL if body.culled else nt.ANNOUNCED
    notice = nt.StopNotice(body.reason, now + body.in_s, row["attempt"], kind)
    if svc.loop.notices.put(job_id, notice):
        nt.announce(svc.store, svc.executor, job_id, handles, notice, now)
    return job_out(row, svc.loop, sharing=svc.gpu_sharing_note)


def withdraw(job_id: JobId, me: Who, jobs: Jobs) -> s.JobOut:
    """The announced stop is off (the server became busy again): the notice disappears."""
    svc = jobs.svc
    row, handles = jobs.running(job_id, me.admin)
    notice = svc.loop.notices.get(job_id, row["attempt"])
    if notice is None or notice.kind not in (nt.CULL, nt.ANNOUNCED):
        # nothing announced (a time limit is not withdrawn)
        return job_out(row, svc.loop, sharing=svc.gpu_sharing_note)
    svc.loop.notices.drop(job_id)
    jobs.note(row, "stop-notice-withdrawn", f"withdrawn: {notice.reason}")
    nt.write_files(svc.executor, handles, None)
    return job_out(row, svc.loop, sharing=svc.gpu_sharing_note)


def register(app: FastAPI) -> None:
    route(app, "POST", "/jobs/{job_id}/stop-notice", stop_notice, response_model=s.JobOut)
    route(app, "POST", "/jobs/{job_id}/stop-notice/withdraw", withdraw, response_model=s.JobOut)
