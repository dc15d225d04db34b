"""What every router of the REST API shares: the prefix, the caller, the id types, the errors.

Each resource's handlers live in their own module of ``api/`` (module-level functions over the
``JobService`` facade) whose ``register(app)`` adds them to the app itself (no nested routers to
match through); ``app.create_app`` calls them in the order of ``api.RESOURCES``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request
from fastapi import Path as FPath
from starlette.concurrency import run_in_threadpool

from labhive.scheduler.service import schemas as s
from labhive.scheduler.service.auth import Identity

if TYPE_CHECKING:
    from labhive.scheduler.service.context import Service

PREFIX = "/api/v1"


class NotFound(Exception):
    pass


async def who(request: Request) -> Identity:
    """The caller, as the service's authenticator sees them (the one identity check).

    An authenticator that may wait on I/O (the hub's asks JupyterHub over HTTP on a cache miss)
    runs in the thread pool, so it never stalls the event loop and every other request; one that
    says ``blocking = False`` (tokens compared in memory) answers inline, because the thread hop
    cost each submission about a fifth of the service's CPU and a wake-up of a pool thread."""
    service: Service = request.app.state.service
    if service.auth.blocking:
        return await run_in_threadpool(service.identify, request)
    who = service.auth.identify(request)
    assert service.owners is not None
    known = service.owners.known_id(who)
    if known is None:  # first sight: the account is written to the store, off the event loop
        return await run_in_threadpool(service.numbered, who)
    return dataclasses.replace(who, id=known)


Who = Annotated[Identity, Depends(who)]
#: Ids and offsets stay within what every backend stores (SQLite's and PostgreSQL's integers).
MAX_INT = 2**53
JobId = Annotated[int, FPath(ge=1, le=MAX_INT)]

#: The answers every authenticated endpoint documents besides its own.
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": s.ErrorOut} for code in (400, 401, 403, 404, 409, 413, 422)
}
