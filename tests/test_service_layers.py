"""Given the service's source tree, expect its layers as docs/service.md draws them:

- the store (``service/store/``) at the bottom, then the loop's parts (``service/runtime/``),
  then what the REST side enters by (``service/loop.py``'s re-export, the ``JobService``
  facade, the handlers in ``service/api/``), then the app and the process (``app.py``,
  ``server.py``, ``commands.py``) on top; no module reaches a layer above its own, directly or
  through the helpers beside the layers (``eta.py``, ``notices.py``, ``journal/`` ...);
- no handler in ``service/api/`` opens a store transaction or runs SQL itself: the facade owns
  every transaction (a handler that did would hold a connection across its rendering, and skip
  the facade's one ownership check);
- every handler is an importable module-level function the app routes to, not a closure.
"""

from __future__ import annotations

import ast
from pathlib import Path

from fastapi.routing import APIRoute
from import_graph import ROOT, imports

API = ROOT / "scheduler" / "service" / "api"
#: What opening a transaction or running SQL looks like in this code base.
STORE_CALLS = {"read", "write", "execute", "connect", "begin"}


SERVICE = "labhive.scheduler.service"
#: The service's layers, bottom first: module-name prefix (under ``SERVICE``) -> rank. A module
#: of none of them (a helper beside the layers) belongs to no layer, but an import chain through
#: it counts: the runtime reaching the facade through ``eta.py`` is an import up all the same.
SERVICE_LAYERS: dict[str, int] = {
    "store": 0,
    "runtime": 1,
    "loop": 2,  # the re-export of runtime's SchedulerLoop, for those above it
    "job_service": 2,
    "api": 2,
    "app": 3,
    "server": 3,
    "commands": 3,
}


def service_rank(module: str) -> int | None:
    """``...service.runtime.loop`` -> 1; a helper beside the layers -> None."""
    if not module.startswith(SERVICE + "."):
        return None
    head = module[len(SERVICE) + 1 :].split(".")[0]
    return SERVICE_LAYERS.get(head)


def upward_in_service(graph: dict[str, set[str]]) -> dict[str, str]:
    """Module of a layer -> the first import chain (``a -> b -> c``) by which it reaches a module
    of a higher layer, following imports inside the service only."""
    found = {}
    for start in sorted(m for m in graph if service_rank(m) is not None):
        rank = service_rank(start)
        assert rank is not None
        came_from: dict[str, str] = {start: ""}
        todo = [start]
        while todo:
            module = todo.pop(0)
            reached = service_rank(module)
            if reached is not None and reached > rank:
                chain = [module]
                while came_from[chain[-1]]:
                    chain.append(came_from[chain[-1]])
                found[start] = " -> ".join(reversed(chain))
                break
            for target in sorted(graph.get(module, ())):
                if target.startswith(SERVICE + ".") and target not in came_from:
                    came_from[target] = module
                    todo.append(target)
    return found


def test_the_service_stands_on_its_layers() -> None:
    """Given the tree, expect no store module to reach the runtime, no runtime module the loop's
    re-export, the facade or the API, and nothing below the app the app."""
    graph = imports()
    ranked = {service_rank(m) for m in graph}
    assert {0, 1, 2, 3} <= ranked, "a layer of the service was not found"
    assert upward_in_service(graph) == {}


def test_an_import_back_up_the_service_is_found(tmp_path: Path) -> None:
    """The check above can fail: given a tree whose runtime imports ``service/loop.py`` (lazily,
    inside a function), whose store reaches the facade through a helper, and whose handler
    imports the app, expect each found with its chain."""
    service = tmp_path / "scheduler" / "service"
    for folder in ("runtime", "store", "api"):
        (service / folder).mkdir(parents=True)
        (service / folder / "__init__.py").write_text("")
    for top in ("scheduler", "scheduler/service"):
        (tmp_path / top / "__init__.py").write_text("")
    files = {
        "runtime/settle.py": "def f():\n    from labhive.scheduler.service.loop import X\n",
        "loop.py": "from labhive.scheduler.service.runtime import settle\n",
        "store/queries.py": "from labhive.scheduler.service import helper\n",
        "helper.py": "from labhive.scheduler.service.job_service import JobService\n",
        "job_service.py": "",
        "api/jobs.py": "from labhive.scheduler.service.app import make_app\n",
        "app.py": "",
    }
    for name, text in files.items():
        (service / name).write_text(text)
    assert upward_in_service(imports(tmp_path)) == {
        f"{SERVICE}.runtime.settle": f"{SERVICE}.runtime.settle -> {SERVICE}.loop",
        f"{SERVICE}.store.queries": (
            f"{SERVICE}.store.queries -> {SERVICE}.helper -> {SERVICE}.job_service"
        ),
        f"{SERVICE}.api.jobs": f"{SERVICE}.api.jobs -> {SERVICE}.app",
    }


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
