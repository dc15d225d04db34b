"""What the handlers receive by dependency injection: the ``JobService`` facade of the app.

``create_app`` puts the facade on ``app.state``; the dependency only reads it back, so it costs
a request one attribute lookup and adds nothing to the OpenAPI document.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request

from labhive.scheduler.service.job_service import JobService
from labhive.scheduler.service.routing import ERRORS, PREFIX


def job_service(request: Request) -> JobService:
    """The facade of the app that received ``request``."""
    jobs: JobService = request.app.state.jobs
    return jobs


Jobs = Annotated[JobService, Depends(job_service)]


def route(app: FastAPI, method: str, path: str, endpoint: Any, **kw: Any) -> None:
    """Add ``endpoint`` under ``PREFIX`` documenting ``ERRORS`` (every authenticated route)."""
    app.add_api_route(PREFIX + path, endpoint, methods=[method], responses=ERRORS, **kw)
