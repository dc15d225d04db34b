"""One core, two drivers: a scenario driven through the simulator gives the same placements,
states and reasons, step by step, as ``labhive replay``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sim_helpers import cluster, job, simulate

from labhive.scheduler.drivers.replay import VirtualTimeDriver, replay, snapshot
from labhive.scheduler.drivers.scenario import Scenario, load_scenario
from labhive.scheduler.sim.cli import register  # noqa: F401  (the CLI module imports cleanly)
from labhive.scheduler.sim.engine import Simulation
from labhive.scheduler.sim.machines import cluster_dict
from labhive.scheduler.sim.runner import run_scenario

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "scheduler" / "examples").glob("*.yaml"))


def simulated_steps(scenario: Scenario, policy: str = "hived") -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []

    def observe(sim: Simulation, label: str) -> None:
        steps.append(snapshot(sim, label))

    run_scenario(policy, scenario, observe=observe)
    return steps


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_shipped_scenarios_simulate_exactly_as_they_replay(path: Path) -> None:
    scenario = load_scenario(path)
    replayed = replay(scenario)
    assert replayed.steps, "the example has events"
    assert simulated_steps(scenario) == replayed.steps


def busy_scenario() -> dict[str, Any]:
    """Retries, a failure without retries, a cancel, a node going down and coming back."""
    machines = cluster_dict_machines()
    return {
        "cluster": machines,
        "events": [
            {
                "at": 0,
                "submit": {"name": "a", "vc": "default", "gpus": 2, "duration": 100, "retries": 1},
            },
            {"at": 0, "submit": {"name": "b", "vc": "default", "gpus": 2, "duration": 50}},
            {"at": 5, "submit": {"name": "c", "vc": "default", "gpus": 2, "duration": 30}},
            {"at": 10, "fail": "a"},
            {"at": 20, "node_down": "n1"},
            {"at": 25, "cancel": "c"},
            {
                "at": 30,
                "submit": {"name": "d", "vc": "default", "tasks": 2, "gpus": 1, "duration": 40},
            },
            {"at": 60, "node_up": "n1"},
            {"at": 70, "fail": "b"},
        ],
    }


def cluster_dict_machines() -> dict[str, Any]:
    from labhive.scheduler.sim.machines import Machine

    return cluster_dict([Machine("n0", 2), Machine("n1", 2)])


@pytest.mark.parametrize("policy", ["hived", "fifo", "las", "capacity"])
def test_lifecycle_events_simulate_as_they_replay(policy: str) -> None:
    scenario = load_scenario(busy_scenario())
    assert simulated_steps(scenario, policy) == replay(scenario, policy).steps


def test_scenario_metrics_account_for_every_job(tmp_path: Path) -> None:
    scenario = load_scenario(busy_scenario())
    run = run_scenario("fifo", scenario)
    jobs = {j.job_id: j for j in run.result.jobs}
    assert jobs["a"].attempts == 2  # failed once, retried
    assert jobs["c"].state == "STOPPED"
    assert jobs["b"].state == "FAILED"
    overall = run.summary["overall"]
    assert overall["jobs"] == 4 and overall["cancelled"] == 1
    assert json.dumps(run.summary)  # plain data
    assert cluster([2, 2]).total_gpus() == run.result.total_gpus


@pytest.mark.sources
def test_the_simulator_runs_on_the_drivers_one_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given three jobs simulated on 4 GPUs, expect the run to go through
    ``VirtualTimeDriver.drive``, the loop ``labhive replay`` runs on, once, and the simulator
    to define no loop of its own (issue 32: its ``_run`` was a hand-kept copy of the driver's)."""
    assert "drive" not in vars(Simulation)
    drives: list[type] = []
    shared = VirtualTimeDriver.drive

    def counted(self: VirtualTimeDriver, *args: Any, **kwargs: Any) -> None:
        drives.append(type(self))
        shared(self, *args, **kwargs)

    monkeypatch.setattr(VirtualTimeDriver, "drive", counted)
    jobs = [job("a", 0, 4, 10), job("b", 1, 2, 5), job("c", 2, 2, 5)]
    done = simulate("fifo", cluster([4]), jobs)
    assert drives == [Simulation]
    assert {name: j.end for name, j in done.items()} == {"a": 10.0, "b": 15.0, "c": 15.0}
