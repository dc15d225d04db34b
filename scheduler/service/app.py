"""The REST API (``/api/v1``): thin handlers over the store, the loop's views and the executor.

This module assembles the app: the submission, error answers and the OpenAPI document (the
``Service`` the handlers share is in ``context.py``); each other resource's handlers are
module-level functions in ``api/`` over the ``JobService`` facade of ``job_service.py``
(``routing.py`` holds what they share).

Every handler asks ``Service.identify`` who is calling (the one identity check) and the
``Identity`` methods what they may do. A submission is parsed, checked against the cluster
once (``Service.check``; the loop's policy does not check it again) and committed (``intake.py``
groups concurrent ones into one transaction) before its 201, then queued for the scheduler
loop: the handler never waits for scheduling. Every user mistake becomes a 4xx whose
``detail`` says what to fix, and nothing is stored when a request is refused.
"""

from __future__ import annotations

import email.message
import logging
import secrets
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import ValidationError
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Message, Receive, Scope, Send

from labhive import __version__
from labhive.scheduler.core.errors import UserError
from labhive.scheduler.core.model import SpecRejected
from labhive.scheduler.service import json_body
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service import schemas as s
from labhive.scheduler.service.api import RESOURCES
from labhive.scheduler.service.api.public import PUBLIC
from labhive.scheduler.service.auth import AuthError, Forbidden
from labhive.scheduler.service.context import Service
from labhive.scheduler.service.diskspace import DiskFull, is_disk_full
from labhive.scheduler.service.intake import UNREACHABLE, StoreUnavailable
from labhive.scheduler.service.job_service import JobService
from labhive.scheduler.service.routing import (
    ERRORS,
    MAX_INT,
    PREFIX,
    JobId,
    NotFound,
    Who,
)
from labhive.scheduler.service.routing import who as _who

__all__ = ["MAX_INT", "PREFIX", "JobId", "NotFound", "Service", "Who", "create_app"]
log = logging.getLogger("labhive.service")


def create_app(service: Service) -> FastAPI:
    app = FastAPI(
        title="LabHive job service",
        version=__version__,
        openapi_url=f"{PREFIX}/openapi.json",
        docs_url=f"{PREFIX}/docs",
        redoc_url=None,
        # FastAPI's native OpenTelemetry asks the global providers on every request (env
        # lookups, a few % of a submission's CPU) and LabHive exports /metrics itself.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.service = service
    app.state.jobs = JobService(service)  # what ``api/`` handlers receive (``api.deps.Jobs``)
    app.add_middleware(BodyLimit, limit=service.max_body)
    _install_error_handlers(app)
    _routes(app, service)  # on the app itself: no nested routers to match through
    for resource in RESOURCES:
        resource.register(app)
    _document_bearer_auth(app)
    return app


#: The submission's body in the OpenAPI document (``submit`` reads it itself).
JOB_BODY_DOC = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JobRequest"}}},
    }
}


async def _job_request(request: Request) -> s.JobRequest:
    """The body of a submission, read and validated as FastAPI reads a body parameter (same
    errors, so the same 400/422 answers): JSON only for a JSON content type, else the body is
    not a job."""
    raw = await request.body()
    if not raw:
        raise _body_invalid([{"type": "missing", "loc": (), "msg": "Field required"}])
    doc: Any = raw
    content_type = request.headers.get("content-type")
    message = email.message.Message()
    message["content-type"] = content_type or "application/json"
    subtype = message.get_content_subtype()
    if message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    ):
        try:
            doc = json_body.loads(raw)
        except json_body.TooDeep:
            raise
        except ValueError as err:  # JSONDecodeError, or bytes that are no UTF-8/16/32
            problem = {"type": "json_invalid", "loc": (), "msg": "JSON decode error"}
            raise _body_invalid([problem]) from err
    try:
        return s.JobRequest.model_validate(doc)
    except ValidationError as err:
        raise _body_invalid(err.errors()) from None


def _body_invalid(problems: list[Any]) -> RequestValidationError:
    return RequestValidationError([{**p, "loc": ("body", *p["loc"])} for p in problems])


def _document_bearer_auth(app: FastAPI) -> None:
    """Declare the bearer scheme in the OpenAPI document (done here rather than by a security
    dependency, which would cost every request a dependency resolution)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            _document_job_request(schema)
            schema.setdefault("components", {})["securitySchemes"] = {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "the admin token file, or a user's token",
                }
            }
            for path, operations in schema["paths"].items():
                if path not in PUBLIC:
                    for operation in operations.values():
                        operation["security"] = [{"bearer": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _document_job_request(schema: dict[str, Any]) -> None:
    """Add the schema ``JOB_BODY_DOC`` refers to (and those it uses) to the components."""
    job = s.JobRequest.model_json_schema(ref_template="#/components/schemas/{model}")
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.update(job.pop("$defs", {}))
    components["JobRequest"] = job


class RequestRoute(APIRoute):
    """A route whose endpoint takes the ``Request`` and returns the ``Response`` itself:
    documented like any other, but FastAPI solves nothing for it (no parsing of query, headers
    and cookies into parameters, no dependency resolution) on each call."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        return self.endpoint


def _routes(app: FastAPI, svc: Service) -> None:
    """The submission (beside the intake it feeds); other resources are in ``api/``."""

    async def submit(request: Request) -> JSONResponse:
        # async, and stored by the intake's group commit: the hot path never takes a thread.
        # The caller and the body are read here, not by FastAPI's dependency machinery, which
        # cost about a sixth of the service's CPU per submission (JOB_BODY_DOC documents it).
        me = await _who(request)
        if svc.disk is not None:  # no new work on a full disk: 507 before reading the job
            svc.disk.check_submission()
        doc = (await _job_request(request)).model_dump(exclude_unset=True)
        doc.pop("user", None)  # the owner is whoever is calling
        spec = svc.admit(doc, me)
        job = lc.NewJob(
            name=spec.name,
            user=me.name,
            vc=spec.vc,
            priority=spec.priority,
            retries=spec.retries,
            task_count=spec.task_count,
            gpus=spec.total_gpus,
            spec=doc,
            owner_id=me.id,
        )
        assert svc.intake is not None
        job_id, t = await svc.intake.submit(job, spec)
        return JSONResponse(lc.new_job_view(job, job_id, t), status_code=201)

    app.router.add_api_route(
        PREFIX + "/jobs",
        submit,
        methods=["POST"],
        status_code=201,
        response_model=s.JobOut,
        responses={**ERRORS, 507: {"model": s.ErrorOut, "description": "disk full"}},
        openapi_extra=JOB_BODY_DOC,
        route_class_override=RequestRoute,
    )


# ---- errors -------------------------------------------------------------------------------

#: The store itself could not write for lack of space (its reserve already used up).
DISK_FULL_STORE = (
    "disk full: the job store has no space left to write, nothing was stored; an admin must "
    "free space in the service's data dir, then try again"
)


def _error(status: int, detail: str, **headers: str) -> JSONResponse:
    # a message may quote the request; keep it sendable whatever characters it quotes
    detail = detail.encode("utf-8", "backslashreplace").decode("utf-8")
    return JSONResponse({"detail": detail}, status_code=status, headers=headers or None)


def _incident(status: int, detail: str, err: BaseException) -> JSONResponse:
    """A server-side failure: a generic ``detail`` and a reference; what went wrong (SQL,
    parameters, exception text, which may hold other users' data) goes to the log only."""
    ref = secrets.token_hex(6)
    log.error("request failed (reference %s)", ref, exc_info=err)
    return _error(status, f"{detail} (reference {ref} in the service log)", **{"X-Request-Id": ref})


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        problems = err.errors()
        if any(p.get("type") == "json_invalid" for p in problems):
            return _error(
                400, "malformed JSON body: send one JSON object (Content-Type: application/json)"
            )
        if any(tuple(p.get("loc", ())) == ("body",) for p in problems):
            what = " (a job)" if request.url.path == PREFIX + "/jobs" else ""
            return _error(422, f"invalid request: the body must be one JSON object{what}")
        text = "; ".join(
            f"{'.'.join(str(x) for x in p.get('loc', ()) if x != 'body') or 'body'}: {p.get('msg')}"
            for p in problems[:10]
        )
        return _error(422, f"invalid request: {text}")

    @app.exception_handler(json_body.TooDeep)
    async def _too_deep(_: Request, err: json_body.TooDeep) -> JSONResponse:
        return _error(400, str(err))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, err: StarletteHTTPException) -> Response:
        # FastAPI reads the other routes' bodies itself and answers a RecursionError of its
        # JSON decoder with a vague 400: say what is wrong, as the submission does.
        if isinstance(err.__cause__, RecursionError):
            return _error(400, json_body.TOO_DEEP)
        return await http_exception_handler(request, err)

    @app.exception_handler(AuthError)
    async def _unauthorized(_: Request, err: AuthError) -> JSONResponse:
        return _error(401, str(err), **{"WWW-Authenticate": "Bearer"})

    @app.exception_handler(Forbidden)
    async def _forbidden(_: Request, err: Forbidden) -> JSONResponse:
        return _error(403, str(err))

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, err: NotFound) -> JSONResponse:
        return _error(404, str(err))

    @app.exception_handler(lc.IllegalTransition)
    async def _conflict(_: Request, err: lc.IllegalTransition) -> JSONResponse:
        return _error(409, str(err))

    @app.exception_handler(UserError)
    async def _user_error(_: Request, err: UserError) -> JSONResponse:
        return _error(422, str(err))

    @app.exception_handler(SpecRejected)
    async def _rejected(_: Request, err: SpecRejected) -> JSONResponse:
        return _error(422, f"job rejected: {err}")

    @app.exception_handler(DiskFull)
    async def _disk_full(_: Request, err: DiskFull) -> JSONResponse:
        return _error(507, str(err))

    @app.exception_handler(StoreUnavailable)
    async def _unavailable(_: Request, err: StoreUnavailable) -> JSONResponse:
        if is_disk_full(err):
            return _incident(507, DISK_FULL_STORE, err)
        return _incident(
            503, "the job store is unavailable, nothing was stored; try again soon", err
        )

    async def _unreachable(_: Request, err: Exception) -> JSONResponse:
        if is_disk_full(err):
            return _incident(507, DISK_FULL_STORE, err)
        return _incident(503, "the job store is unavailable; try again soon", err)

    for kind in UNREACHABLE:
        app.add_exception_handler(kind, _unreachable)

    @app.exception_handler(sa_exc.SQLAlchemyError)
    async def _store_error(_: Request, err: sa_exc.SQLAlchemyError) -> JSONResponse:
        return _incident(500, "internal error in the job store", err)

    @app.exception_handler(Exception)
    async def _internal(_: Request, err: Exception) -> JSONResponse:
        return _incident(500, "internal error", err)


class BodyLimit:
    """Refuses request bodies over ``limit`` bytes with a 413 before any handler reads them."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None:
            if not declared.isdigit() or int(declared) > self.limit:
                await self._refuse(send, declared.decode("latin-1"))
                return
            await self.app(scope, receive, send)  # the server holds the body to its length
            return
        body = bytearray()  # chunked: count as it arrives
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body.extend(message.get("body", b""))
            more = message.get("more_body", False)
            if len(body) > self.limit:
                await self._refuse(send, f">{self.limit}")
                return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send, size: str) -> None:
        detail = f"request body too large ({size} bytes); the limit is {self.limit} bytes"
        response = _error(413, detail)
        await response({"type": "http"}, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}
