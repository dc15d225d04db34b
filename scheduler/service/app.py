"""The REST API (``/api/v1``): thin handlers over the store, the loop's views and the executor.

Every handler asks ``Service.identify`` who is calling (the one identity check) and the
``Identity`` methods what they may do. A submission is parsed, checked against the cluster and
committed (``intake.py`` groups concurrent ones into one transaction) before its 201, then
queued for the scheduler loop: the handler never waits for scheduling. Every user mistake
becomes a 4xx whose ``detail`` says what to fix, and nothing is stored when a request is
refused.
"""

from __future__ import annotations

import dataclasses
import email.message
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from fastapi import Depends, FastAPI, Query, Request
from fastapi import Path as FPath
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.types import DecoratedCallable
from pydantic import ValidationError
from sqlalchemy import exc as sa_exc
from sqlalchemy import func, select
from starlette.concurrency import run_in_threadpool
from starlette.types import Message, Receive, Scope, Send

from labhive import __version__
from labhive.scheduler.errors import UserError
from labhive.scheduler.executors.base import Executor, TaskHandle, TaskKey
from labhive.scheduler.jobs import JobSpec
from labhive.scheduler.model import NodeDown, NodeUp, NodeView, SpecRejected
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service import schemas as s
from labhive.scheduler.service.accounts import Accounts
from labhive.scheduler.service.auth import Authenticator, AuthError, Forbidden, Identity
from labhive.scheduler.service.intake import UNREACHABLE, Intake, StoreUnavailable
from labhive.scheduler.service.loop import SchedulerLoop
from labhive.scheduler.service.monitoring import JobGpusOut, Monitoring
from labhive.scheduler.service.responses import encodable
from labhive.scheduler.service.store import Store, events, job_row, jobs, tasks

log = logging.getLogger("labhive.service")
PREFIX = "/api/v1"
MAX_BODY = 1 << 20
MAX_LOG_CHUNK = 1 << 20
T = TypeVar("T")


class NotFound(Exception):
    pass


@dataclass
class Service:
    """What the handlers need; ``server.build`` assembles it."""

    store: Store
    loop: SchedulerLoop
    executor: Executor
    auth: Authenticator
    parse: Callable[[dict[str, Any]], JobSpec]
    check: Callable[[JobSpec], None]
    intake: Intake | None = None
    policy: str = "hived"
    max_body: int = MAX_BODY
    cancel_wait_s: float = 5.0
    loop_stall_s: float = 30.0  # /health is 503 once the loop has not passed for this long
    monitoring: Monitoring | None = None  # GPU sampler and /metrics (off when not given)
    accounts: Any = None  # users' OS identities (service/accounts.py), for GET /me
    owners: Accounts | None = None  # account numbers: jobs are owned by them, not by names

    def __post_init__(self) -> None:
        self._check_lock = threading.Lock()
        if self.owners is None:
            self.owners = Accounts(self.store)
        if self.intake is None:
            self.intake = Intake(self.store, self.loop)
        if self.monitoring is None:
            self.monitoring = Monitoring(self.store, self.loop, interval_s=0)

    def identify(self, request: Request) -> Identity:
        """The caller with their account number, which every ownership check compares."""
        who = self.auth.identify(request)
        assert self.owners is not None
        return dataclasses.replace(who, id=self.owners.id_of(who))

    def admit(self, doc: dict[str, Any], who: Identity) -> JobSpec:
        """Parse and check a submission; raise a UserError/SpecRejected/Forbidden to refuse."""
        try:
            spec = self.parse(doc)
        except UserError:
            raise
        except (ValueError, TypeError, KeyError) as err:
            raise UserError(f"invalid job: {err}") from err
        with self._check_lock:
            self.check(spec)
        if not who.may_submit_to(spec.vc):
            allowed = ", ".join(sorted(who.vcs)) or "none"
            raise Forbidden(f"you may not submit to VC {spec.vc!r}; your groups grant: {allowed}")
        return dataclasses.replace(spec, user=who.name)


async def _who(request: Request) -> Identity:
    """The caller, as the service's authenticator sees them (the one identity check).

    An authenticator that may wait on I/O (the hub's asks JupyterHub over HTTP on a cache miss)
    runs in the thread pool, so it never stalls the event loop and every other request; one that
    says ``blocking = False`` (tokens compared in memory) answers inline, because the thread hop
    cost each submission about a fifth of the service's CPU and a wake-up of a pool thread."""
    service: Service = request.app.state.service
    if getattr(service.auth, "blocking", True):
        return await run_in_threadpool(service.identify, request)
    return service.identify(request)


Who = Annotated[Identity, Depends(_who)]
#: Ids and offsets stay within what every backend stores (SQLite's and PostgreSQL's integers).
MAX_INT = 2**53
JobId = Annotated[int, FPath(ge=1, le=MAX_INT)]


def create_app(service: Service) -> FastAPI:
    app = FastAPI(
        title="LabHive job service",
        version=__version__,
        openapi_url=f"{PREFIX}/openapi.json",
        docs_url=f"{PREFIX}/docs",
        redoc_url=None,
    )
    app.state.service = service
    app.add_middleware(BodyLimit, limit=service.max_body)
    _install_error_handlers(app)
    _routes(app, service)  # on the app itself: no nested routers to match through
    _public_routes(app, service)
    _document_bearer_auth(app)
    return app


PUBLIC = (f"{PREFIX}/health", f"{PREFIX}/metrics")


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
            doc = json.loads(raw)
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


def _routes(app: FastAPI, svc: Service) -> None:
    errors: dict[int | str, dict[str, Any]] = {
        code: {"model": s.ErrorOut} for code in (400, 401, 403, 404, 409, 413, 422)
    }

    def get(path: str, **kw: Any) -> Callable[[DecoratedCallable], DecoratedCallable]:
        return app.get(PREFIX + path, responses=errors, **kw)

    def post(path: str, **kw: Any) -> Callable[[DecoratedCallable], DecoratedCallable]:
        return app.post(PREFIX + path, responses=errors, **kw)

    @post("/jobs", status_code=201, response_model=s.JobOut, openapi_extra=JOB_BODY_DOC)
    async def submit(request: Request) -> JSONResponse:
        # async, and stored by the intake's group commit: the hot path never takes a thread.
        # The caller and the body are read here, not by FastAPI's dependency machinery, which
        # cost about a sixth of the service's CPU per submission (JOB_BODY_DOC documents it).
        me = await _who(request)
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

    @get("/me")
    def whoami(me: Who) -> dict[str, Any]:
        """The caller's LabHive identity and the OS uid/gid their tasks run as (the hub's
        spawner gives a server's home and launch file to that uid)."""
        out: dict[str, Any] = {
            "name": me.name, "id": me.id, "admin": me.admin, "vcs": sorted(me.vcs)
        }  # fmt: skip
        if svc.accounts is not None and me.id is not None:
            account = svc.accounts.of_id(me.id)
            out.update(uid=account.uid, gid=account.gid)
        return out

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
        query = select(jobs).order_by(jobs.c.id.desc()).limit(limit).offset(offset)
        if not me.admin:
            query = query.where(jobs.c.owner_id == me.id)
        elif user:
            query = query.where(jobs.c.user == user)
        if state:
            query = query.where(jobs.c.state == state)
        if vc:
            query = query.where(jobs.c.vc == vc)
        with svc.store.read() as conn:
            rows = [dict(r) for r in conn.execute(query).mappings()]
        return s.JobList(jobs=[_job_out(r, svc.loop) for r in rows])

    @get("/jobs/{job_id}", response_model=s.JobOut)
    def get_job(job_id: JobId, me: Who) -> s.JobOut:
        with svc.store.read() as conn:
            row = _owned(conn, job_id, me)
            task_rows = _tasks(conn, job_id, row["attempt"])
        return _job_out(row, svc.loop, task_rows, with_spec=True)

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
                row = job_row(conn, job_id)
                assert row is not None
                task_rows = _tasks(conn, job_id, row["attempt"])
            out = _job_out(row, svc.loop, task_rows, with_spec=True)
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
            rows = conn.execute(
                select(events).where(events.c.job_id == job_id).order_by(events.c.id)
            ).mappings()
            out = [s.EventOut(**{k: r[k] for k in s.EventOut.model_fields}) for r in rows]
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
            at = attempt or _last_attempt(conn, job_id) or row["attempt"]
            task_rows = _tasks(conn, job_id, at)
        names = list(dict.fromkeys(f"{t['role']}-{t['idx']}" for t in task_rows))
        chosen = task_rows[0] if task_rows and task is None else None
        if task is not None:
            chosen = next((t for t in task_rows if f"{t['role']}-{t['idx']}" == task), None)
            if chosen is None:
                raise NotFound(f"job {job_id} attempt {at} has no task {task!r}; tasks: {names}")
        data = b""
        if chosen is not None and chosen["handle"]:
            key = TaskKey(str(job_id), at, chosen["role"], chosen["idx"], chosen["generation"])
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
            task_rows = [
                dict(r)
                for r in conn.execute(
                    select(tasks).where(tasks.c.job_id == job_id).order_by(tasks.c.id)
                ).mappings()
            ]
        out = []
        for t in task_rows:
            if not t["handle"]:
                continue
            key = TaskKey(str(job_id), t["attempt"], t["role"], t["idx"], t["generation"])
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

    @get("/eta/accuracy")
    def eta_accuracy(me: Who) -> dict[str, Any]:
        """How close the ETAs given at submit came to the real starts, per VC."""
        from labhive.scheduler.service.eta import stored_accuracy

        return {"vcs": [dataclasses.asdict(a) for a in stored_accuracy(svc.store)]}

    @get("/queue", response_model=s.QueueOut)
    def queue(me: Who, vc: str | None = None) -> s.QueueOut:
        views = svc.loop.views()
        with svc.store.read() as conn:
            rows = {
                r["id"]: dict(r)
                for r in conn.execute(
                    select(
                        jobs.c.id,
                        jobs.c.user,
                        jobs.c.owner_id,
                        jobs.c.name,
                        jobs.c.gpus,
                        jobs.c.task_count,
                    ).where(jobs.c.state.in_(lc.ACTIVE))
                ).mappings()
            }
        running: list[s.QueueEntry] = []
        waiting: list[s.QueueEntry] = []
        for v in views:
            row = rows.get(int(v.job_id))
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
            if (estimate := svc.loop.estimates.get(row["id"])) is not None:
                entry.eta, entry.eta_low, entry.eta_high = estimate.eta, estimate.low, estimate.high
            (waiting if v.state == lc.WAITING else running).append(entry)
        return s.QueueOut(vcs=_vcs(svc, me), running=running, waiting=waiting)

    @get("/cluster", response_model=s.ClusterOut)
    def cluster(me: Who) -> s.ClusterOut:
        view = svc.loop.cluster()
        shown = _job_shown(svc, me)
        nodes = [_node_out(svc, n, shown) for n in view.nodes]
        return s.ClusterOut(virtual=view.virtual, policy=svc.policy, nodes=nodes, vcs=_vcs(svc, me))

    @post("/nodes/{node}/down", response_model=s.NodeOut)
    def node_down(node: str, me: Who, body: s.NodeDownRequest | None = None) -> s.NodeOut:
        """Take a node out of service (admins): its jobs are stopped and requeued, nothing
        starts there, and it stays down across restarts until ``/nodes/{node}/up``."""
        _known_node(svc, node, me)
        return _node_settled(svc, svc.loop.take_down(node, body.reason if body else "", me.name))

    @post("/nodes/{node}/up", response_model=s.NodeOut)
    def node_up(node: str, me: Who) -> s.NodeOut:
        """Put a node an admin took down back into service (admins)."""
        _known_node(svc, node, me)
        return _node_settled(svc, svc.loop.bring_up(node))

    @get("/vcs", response_model=s.VCList)
    def vcs(me: Who) -> s.VCList:
        return s.VCList(vcs=_vcs(svc, me))

    @get("/gpus", response_model=s.GPUList)
    def gpus(me: Who) -> s.GPUList:
        view = svc.loop.cluster()
        shown = _job_shown(svc, me)
        out = [
            s.GPUOut(
                node=n.name,
                index=g,
                sku=n.sku,
                healthy=n.healthy,
                job=shown(n.used[g]) if g in n.used else None,
                virtual=view.virtual,
            )
            for n in view.nodes
            for g in n.gpus
        ]
        return s.GPUList(gpus=out)


def _public_routes(app: FastAPI, svc: Service) -> None:
    """/health and /metrics answer without a token (probes and Prometheus scrape them)."""

    @app.get(
        PREFIX + "/health",
        response_model=s.Health,
        responses={503: {"model": s.Health, "description": "degraded: the loop is stalled"}},
    )
    def health() -> JSONResponse:
        """200 "ok", or 503 "degraded" when the database does not answer or the scheduler loop
        has not completed a pass for ``loop_stall_s`` (so a supervisor restarts the service).
        No exception text: this answers anyone."""
        try:
            with svc.store.read() as conn:
                conn.execute(select(1))
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
            executor=getattr(svc.executor, "name", type(svc.executor).__name__),
        )
        return JSONResponse(body.model_dump(), status_code=200 if ok else 503)

    @app.get(PREFIX + "/metrics", response_class=PlainTextResponse)
    def metrics() -> PlainTextResponse:
        from labhive.scheduler.service.metrics import CONTENT_TYPE, render

        assert svc.monitoring is not None  # set by Service.__post_init__
        return PlainTextResponse(render(svc.monitoring, svc.store), media_type=CONTENT_TYPE)


# ---- helpers ------------------------------------------------------------------------------


def _owned(conn: Any, job_id: int, me: Identity) -> dict[str, Any]:
    row = job_row(conn, job_id)
    if row is None:
        raise NotFound(f"no job {job_id}")
    if not me.owns(row["owner_id"]):
        raise Forbidden(f"job {job_id} belongs to another user; you see only its queue entry")
    return row


def _tasks(conn: Any, job_id: int, attempt: int) -> list[dict[str, Any]]:
    query = (
        select(tasks)
        .where(tasks.c.job_id == job_id, tasks.c.attempt == attempt)
        .order_by(tasks.c.role, tasks.c.idx, tasks.c.generation.desc())  # newest run first
    )
    return [dict(r) for r in conn.execute(query).mappings()]


def _last_attempt(conn: Any, job_id: int) -> int | None:
    """The newest attempt that ran tasks (a requeued job's logs are its last run's)."""
    last: int | None = conn.execute(
        select(func.max(tasks.c.attempt)).where(tasks.c.job_id == job_id)
    ).scalar()
    return last


def _job_out(
    row: dict[str, Any],
    loop: SchedulerLoop | None = None,
    task_rows: list[dict[str, Any]] | None = None,
    with_spec: bool = False,
) -> s.JobOut:
    if with_spec:  # names in a spec stored before intake checked them may not encode
        row, task_rows = encodable(row), encodable(task_rows)
    out = s.JobOut(
        **{k: row[k] for k in s.JobOut.model_fields if k not in ("tasks", "spec") and k in row},
        tasks=[
            s.TaskOut(
                role=t["role"],
                index=t["idx"],
                node=t["node"],
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
    if loop is not None and row["state"] == lc.WAITING:
        view = loop.view(row["id"])
        if view is not None and view.state == lc.WAITING:
            out.queue_position = view.queue_position
            out.queue_length = view.queue_length
            out.why = view.why or out.why
        estimate = loop.estimates.get(row["id"])
        if estimate is not None:
            out.eta, out.eta_low, out.eta_high = estimate.eta, estimate.low, estimate.high
    return out


#: What a non-admin sees in place of another user's job id on the GPU and cluster views.
FOREIGN_JOB = "another user's job"


def _job_shown(svc: Service, me: Identity) -> Callable[[str], int | str]:
    """How a job holding a GPU is shown to ``me``: its id to an admin or its owner, else
    ``FOREIGN_JOB`` (ids of others' jobs tell when they submit and how much they run)."""
    if me.admin:
        return int
    with svc.store.read() as conn:
        mine = {
            str(i)
            for i in conn.execute(
                select(jobs.c.id).where(jobs.c.owner_id == me.id, jobs.c.state.in_(lc.ACTIVE))
            ).scalars()
        }
    return lambda job: int(job) if str(job) in mine else FOREIGN_JOB


def _node_out(svc: Service, n: NodeView, shown: Callable[[str], int | str] = int) -> s.NodeOut:
    return s.NodeOut(
        name=n.name,
        sku=n.sku,
        gpus=list(n.gpus),
        healthy=n.healthy,
        reason=n.reason,
        used={str(g): shown(j) for g, j in n.used.items()},
        held=n.name in svc.loop.held,
    )


def _known_node(svc: Service, node: str, me: Identity) -> None:
    if not me.admin:
        raise Forbidden("only an admin may take nodes down or bring them up")
    names = [n.name for n in svc.loop.cluster().nodes]
    if node not in names:
        raise NotFound(f"no node {node!r}; this cluster has {', '.join(names)}")


def _node_settled(svc: Service, event: NodeDown | NodeUp, wait_s: float = 5.0) -> s.NodeOut:
    """The node once the loop has applied ``event`` (as it stands after ``wait_s`` at most)."""
    want = (True, "") if isinstance(event, NodeUp) else (False, event.reason or "down")

    def look() -> tuple[bool, s.NodeOut]:
        (view,) = [n for n in svc.loop.cluster().nodes if n.name == event.node]
        return (view.healthy, view.reason) == want, _node_out(svc, view)

    return _settled(svc, wait_s, look)


def _settled(svc: Service, wait_s: float, look: Callable[[], tuple[bool, T]]) -> T:
    """``look()`` gives (done, answer); ask again after each scheduler pass until it is done or
    ``wait_s`` has passed, and return the last answer."""
    deadline = time.monotonic() + wait_s
    while True:
        done, answer = look()
        left = deadline - time.monotonic()
        if done or left <= 0:
            return answer
        with svc.loop.changed:
            svc.loop.changed.wait(min(left, 0.2))


def _vcs(svc: Service, me: Identity) -> dict[str, s.VCOut]:
    view = svc.loop.cluster()
    return {
        name: s.VCOut(
            name=name,
            guaranteed_gpus=v.guaranteed_gpus,
            used_gpus=v.used_gpus,
            opportunistic_gpus=v.opportunistic_gpus,
            waiting=v.waiting,
            may_submit=me.may_submit_to(name),
        )
        for name, v in view.vcs.items()
    }


# ---- errors -------------------------------------------------------------------------------


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
    async def _invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        problems = err.errors()
        if any(p.get("type") == "json_invalid" for p in problems):
            return _error(
                400, "malformed JSON body: send one JSON object (Content-Type: application/json)"
            )
        if any(tuple(p.get("loc", ())) == ("body",) for p in problems):
            return _error(422, "invalid request: the body must be one JSON object (a job)")
        text = "; ".join(
            f"{'.'.join(str(x) for x in p.get('loc', ()) if x != 'body') or 'body'}: {p.get('msg')}"
            for p in problems[:10]
        )
        return _error(422, f"invalid request: {text}")

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

    @app.exception_handler(StoreUnavailable)
    async def _unavailable(_: Request, err: StoreUnavailable) -> JSONResponse:
        return _incident(
            503, "the job store is unavailable, nothing was stored; try again soon", err
        )

    async def _unreachable(_: Request, err: Exception) -> JSONResponse:
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
