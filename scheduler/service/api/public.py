"""The endpoints that answer without a token: ``/health`` and ``/metrics``."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from labhive import __version__
from labhive.scheduler.service import schemas as s
from labhive.scheduler.service.api.deps import Jobs
from labhive.scheduler.service.auth import AuthError
from labhive.scheduler.service.context import Service
from labhive.scheduler.service.routing import PREFIX

PUBLIC = (f"{PREFIX}/health", f"{PREFIX}/metrics")


def health(jobs: Jobs) -> JSONResponse:
    """200 "ok", or 503 "degraded" when the database does not answer or the scheduler loop
    has not completed a pass for ``loop_stall_s`` (so a supervisor restarts the service).
    A full disk is reported (``disk``) but is no reason for 503: the service still answers
    reads and cancels, and a restart would not free any space. No exception text: this
    answers anyone."""
    svc = jobs.svc
    try:
        jobs.ping()
        database = "ok"
    except Exception as err:  # health reports a broken database, it does not raise
        database = f"error: {type(err).__name__}"
    loop = svc.loop.health
    age = loop.age()
    ok = database == "ok" and age <= svc.loop_stall_s
    body = s.Health(
        status="ok" if ok else "degraded",
        version=__version__,
        database=database,
        loop_age_s=round(age, 3),
        loop_last_pass=svc.loop.last_pass or None,
        loop_failures=loop.failures,
        loop_error=loop.error,
        policy=svc.policy,
        executor=svc.executor.name,
        disk=svc.disk.state() if svc.disk is not None else "ok",
    )
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)


def metrics(request: Request, jobs: Jobs) -> PlainTextResponse:
    """Anyone may scrape; an admin's token adds each user's fair-share usage and share
    (service/metrics.py: who used how much is not for everyone)."""
    from labhive.scheduler.service.metrics import CONTENT_TYPE, render

    svc = jobs.svc
    assert svc.monitoring is not None and svc.pass_views is not None  # (__post_init__)
    standings = svc.pass_views.get().standings if _admin(svc, request) else None
    text = render(svc.monitoring, svc.store, standings)
    return PlainTextResponse(text, media_type=CONTENT_TYPE)


def register(app: FastAPI) -> None:
    """/health and /metrics answer without a token (probes and Prometheus scrape them)."""
    degraded: dict[int | str, dict[str, Any]] = {
        503: {"model": s.Health, "description": "degraded: the loop is stalled"}
    }
    app.add_api_route(
        PREFIX + "/health", health, methods=["GET"], response_model=s.Health, responses=degraded
    )
    app.add_api_route(
        PREFIX + "/metrics", metrics, methods=["GET"], response_class=PlainTextResponse
    )


def _admin(svc: Service, request: Request) -> bool:
    """Whether the request carries an admin's credentials (none, or a user's: no)."""
    if "authorization" not in request.headers and not request.cookies:
        return False
    try:
        return svc.auth.identify(request).admin
    except AuthError:
        return False
