"""Given the scheduler's source tree, expect its layers to import only downwards.

``scheduler/`` is filed into layers (docs/scheduler-core.md, "Layers"): ``core/`` (the
events/decisions contract, jobs, states, errors, the cluster config and its limits) imports
nothing above it; the policy families (``policies/``, ``hived/``), the executors, the drivers,
the simulator and the forecasts import the core and what sits beside them; the service imports
them, never the reverse; the notebook client (``client/``) imports only the core, so a kernel
that imports ``labhive.client`` pulls in no forecast, policy or service code. ``cli/`` sits on
top. Every import counts, lazy ones too (``import_graph``).
"""

from __future__ import annotations

from import_graph import imports

SCHEDULER = "labhive.scheduler"

#: Layer -> the other layers its modules may import.
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    # the compiled modules' guard and build: `import labhive` runs the guard first
    "native": set(),
    "client": {"core"},
    "executors": {"core"},
    # HiveD's policy module lives in policies/; HiveD builds on policies/policy_base
    "policies": {"core", "hived"},
    "hived": {"core", "policies"},
    # drivers/stop_watch: the in-job stop notice (executors' file) and the client that reads it
    "drivers": {"core", "policies", "executors", "client"},
    "sim": {"core", "policies", "drivers"},
    "forecast": {"core", "policies", "sim"},
    "observe": {"core", "drivers"},
    "service": {
        "core",
        "client",
        "policies",
        "hived",
        "executors",
        "drivers",
        "sim",
        "forecast",
        "observe",
        # `labhive up` and the hub's adduser live with the hub integration
        "hub_extension",
        "labhive",  # labhive.__version__, in the API's answers
    },
}


def layer_of(module: str) -> str | None:
    """``labhive.scheduler.core.model`` -> ``core``; outside ``scheduler/`` -> its package."""
    parts = module.split(".")
    if parts[:2] != ["labhive", "scheduler"]:
        return parts[1] if len(parts) > 1 else parts[0]
    return parts[2] if len(parts) > 2 else None


def upward_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Module -> the imports it makes outside what ``ALLOWED`` grants its layer."""
    found = {}
    for module, targets in graph.items():
        mine = layer_of(module)
        if mine not in ALLOWED:
            continue
        bad = sorted(
            t for t in targets if layer_of(t) not in {mine, *ALLOWED[mine]} and t != SCHEDULER
        )
        if bad:
            found[module] = bad
    return found


def test_no_layer_imports_above_itself() -> None:
    graph = imports()
    layers = {layer_of(m) for m in graph if m.startswith(SCHEDULER + ".")}
    assert {"core", "client", "cli", "drivers", "forecast", "policies", "service"} <= layers
    assert upward_imports(graph) == {}


def test_scheduler_holds_only_layers() -> None:
    """No module is left beside the layers: each lives in the one that says what it is."""
    graph = imports()
    loose = sorted(m for m in graph if m.startswith(SCHEDULER + ".") and m.count(".") == 2)
    assert [m for m in loose if layer_of(m) not in {*ALLOWED, "cli", "examples"}] == []


def test_the_notebook_client_imports_only_the_core() -> None:
    graph = imports()
    client = {m: t for m, t in graph.items() if layer_of(m) == "client"}
    assert "labhive.scheduler.client" in client
    assert {layer_of(t) for targets in client.values() for t in targets} <= {"client", "core"}


def test_an_upward_import_is_found() -> None:
    """The check above can fail: the core importing the service, the client the forecasts, a
    driver the CLI, are each reported."""
    graph = {
        "labhive.scheduler.core.model": {"labhive.scheduler.service.loop"},
        "labhive.scheduler.client": {"labhive.scheduler.forecast.eta"},
        "labhive.scheduler.drivers.replay": {"labhive.scheduler.cli.scenario_cli"},
        "labhive.scheduler.forecast.eta": {"labhive.scheduler.core.model"},
    }
    assert upward_imports(graph) == {
        "labhive.scheduler.core.model": ["labhive.scheduler.service.loop"],
        "labhive.scheduler.client": ["labhive.scheduler.forecast.eta"],
        "labhive.scheduler.drivers.replay": ["labhive.scheduler.cli.scenario_cli"],
    }
