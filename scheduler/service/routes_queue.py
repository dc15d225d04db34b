"""The queue as each caller may see it, and how accurate the ETAs have been."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service import queries as q
from labhive.scheduler.service import schemas as s
from labhive.scheduler.service.eta import eta_fields
from labhive.scheduler.service.routes_cluster import vcs_out
from labhive.scheduler.service.routing import Who, endpoints

if TYPE_CHECKING:
    from labhive.scheduler.service.context import Service


def register(app: FastAPI, svc: Service) -> None:
    """Add ``GET /eta/accuracy`` and ``GET /queue``."""
    get, _ = endpoints(app)

    @get("/eta/accuracy")
    def eta_accuracy(me: Who) -> dict[str, Any]:
        """How close the ETAs given at submit came to the real starts, per VC."""
        from labhive.scheduler.service.eta import stored_accuracy

        return {"vcs": [dataclasses.asdict(a) for a in stored_accuracy(svc.store)]}

    @get("/queue", response_model=s.QueueOut)
    def queue(me: Who, vc: str | None = None) -> s.QueueOut:
        views = svc.loop.views()
        with svc.store.read() as conn:
            rows = q.active_jobs(conn)
        running: list[s.QueueEntry] = []
        waiting: list[s.QueueEntry] = []
        for v in views:
            row = rows.get(v.job_id)
            if row is None or (vc and v.vc != vc):
                continue
            mine = me.owns(row["owner_id"])
            entry = s.QueueEntry(
                position=v.queue_position,
                vc=v.vc,
                state=v.state,
                gpus=row["gpus"],
                tasks=row["task_count"],
                priority=v.priority,
                opportunistic=v.opportunistic,
                mine=mine,
                id=row["id"] if mine else None,
                name=row["name"] if mine else None,
                user=row["user"] if mine else None,
                why=v.why if mine else None,
            )
            for field, value in eta_fields(svc.loop.estimates.get(row["id"])).items():
                setattr(entry, field, value)
            (waiting if v.state == lc.WAITING else running).append(entry)
        return s.QueueOut(vcs=vcs_out(svc, me), running=running, waiting=waiting)
