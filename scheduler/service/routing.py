"""What every router of the REST API shares: the prefix, the caller, the id types, the errors.

Each resource's handlers live in their own module (``api/*.py``: module-level functions over the
``JobService`` facade; ``routes_*.py``: closures over the ``Service``, not moved yet) whose
``register`` adds them to the app itself (no nested routers to match through); ``app.create_app``
calls them in order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from fastapi import Depends, FastAPI, Request
from fastapi import Path as FPath
from fastapi.types import DecoratedCallable
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
    if getattr(service.auth, "blocking", True):
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


class Decorator(Protocol):
    """``app.get``/``app.post`` with the path under ``PREFIX`` and ``ERRORS`` documented."""

    def __call__(
        self, path: str, **kw: Any
    ) -> Callable[[DecoratedCallable], DecoratedCallable]: ...


def endpoints(app: FastAPI) -> tuple[Decorator, Decorator]:
    """``get`` and ``post`` decorators that add a route under ``PREFIX`` documenting ``ERRORS``."""

    def get(path: str, **kw: Any) -> Callable[[DecoratedCallable], DecoratedCallable]:
        return app.get(PREFIX + path, responses=ERRORS, **kw)

    def post(path: str, **kw: Any) -> Callable[[DecoratedCallable], DecoratedCallable]:
        return app.post(PREFIX + path, responses=ERRORS, **kw)

    return get, post
