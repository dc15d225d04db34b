"""Given the service's source tree, expect its API side layered as docs/service.md draws it:

- the loop's parts (``service/runtime/``) import nothing of the REST API (``service/api/``) nor
  the ``JobService`` facade its handlers call;
- no handler in ``service/api/`` opens a store transaction or runs SQL itself: the facade owns
  every transaction (a handler that did would hold a connection across its rendering, and skip
  the facade's one ownership check);
- every handler is an importable module-level function the app routes to, not a closure.
"""

from __future__ import annotations

import ast

from fastapi.routing import APIRoute
from import_graph import ROOT, imports

API = ROOT / "scheduler" / "service" / "api"
#: What opening a transaction or running SQL looks like in this code base.
STORE_CALLS = {"read", "write", "execute", "connect", "begin"}


def test_the_runtime_imports_neither_the_api_nor_the_facade() -> None:
    graph = imports()
    runtime = {m: t for m, t in graph.items() if m.startswith("labhive.scheduler.service.runtime")}
    assert runtime, "no runtime modules found"
    upward = {
        m: sorted(t for t in targets if ".service.api" in t or t.endswith(".job_service"))
        for m, targets in runtime.items()
    }
    assert {m: t for m, t in upward.items() if t} == {}


def store_calls(source: str) -> list[str]:
    """``x.store.read()``-like calls and ``conn.execute`` in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            opens = node.func.attr in STORE_CALLS and "store" in ast.unparse(node.func.value)
            if opens or node.func.attr == "execute":
                found.append(ast.unparse(node))
    return found


def test_no_handler_module_opens_a_transaction() -> None:
    found = {p.name: store_calls(p.read_text()) for p in sorted(API.glob("*.py"))}
    assert len(found) >= 7
    assert {name: calls for name, calls in found.items() if calls} == {}


def test_a_handler_that_opens_a_transaction_is_found() -> None:
    """The check above can fail: a handler written the old way is caught."""
    old_way = (
        "def get_job(job_id, me, jobs):\n"
        "    with jobs.svc.store.read() as conn:\n"
        "        return conn.execute(q)\n"
    )
    assert store_calls(old_way) == ["jobs.svc.store.read()", "conn.execute(q)"]


def test_every_route_is_a_module_level_function_of_the_api(live_sqlite) -> None:
    """Given a live service, expect each route's endpoint importable by its qualified name
    (the submission is ``app.py``'s, beside the intake it feeds)."""
    import importlib

    routes = [r for r in live_sqlite.running.app.routes if isinstance(r, APIRoute)]
    handlers = [r.endpoint for r in routes if r.endpoint.__name__ != "submit"]
    assert len(handlers) >= 20
    for fn in handlers:
        assert fn.__module__.startswith("labhive.scheduler.service.api."), fn
        assert "<locals>" not in fn.__qualname__, fn.__qualname__
        assert getattr(importlib.import_module(fn.__module__), fn.__name__) is fn


pytest_plugins = ["service_fixtures"]
