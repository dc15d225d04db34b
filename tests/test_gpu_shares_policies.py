"""Given lab 6's GPU-share experiment (four quarter notebooks on vc1's one GPU), expect every
policy but HiveD, which count GPUs in whole slots, to refuse each share saying which policy and
what to do, in ``labhive replay``, ``labhive simulate`` and the live service alike; never to
round a quarter up to a whole GPU in silence (they used to: q1..q4 each held a GPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import EXAMPLES

from labhive.scheduler.drivers.replay import replay, snapshot
from labhive.scheduler.drivers.scenario import load_scenario
from labhive.scheduler.policies import available
from labhive.scheduler.sim.engine import Simulation
from labhive.scheduler.sim.runner import run_scenario

LAB = EXAMPLES / "lab6-6-gpu-shares.yaml"
QUEUE_POLICIES = [p for p in available() if p != "hived"]
SHARES = ("q1", "q2", "q3", "q4", "q5", "borrow")


def refused(jobs: list[dict[str, Any]]) -> dict[str, str]:
    return {j["name"]: j["reason"] for j in jobs if j["state"] == "REJECTED"}


def test_every_policy_but_hived_is_checked():
    assert set(QUEUE_POLICIES) >= {"fifo", "sjf", "drf", "capacity", "las"}


@pytest.mark.parametrize("policy", QUEUE_POLICIES)
def test_a_queue_policy_refuses_each_share_in_replay_and_simulate_saying_what_to_do(policy):
    scenario = load_scenario(LAB)
    replayed = replay(scenario, policy)
    steps: list[dict[str, Any]] = []

    def observe(sim: Simulation, label: str) -> None:
        steps.append(snapshot(sim, label))

    run_scenario(policy, scenario, observe=observe)
    for last in (replayed.steps[-1], steps[-1]):
        reasons = refused(last["jobs"])
        assert set(reasons) == set(SHARES)
        for reason in reasons.values():
            assert f"policy {policy} places whole GPUs only" in reason
            assert "--gpus 1" in reason and "--policy hived" in reason
        whole = {j["name"]: j for j in last["jobs"]}["whole"]
        assert whole["state"] == "SUCCEEDED"  # whole-GPU work runs as before


def test_hived_places_the_same_shares():
    assert replay(load_scenario(LAB)).failures == []


def test_the_live_service_under_fifo_refuses_a_share_with_the_same_words(tmp_path: Path):
    from service_fixtures import live_service

    from labhive.scheduler.client import LabHiveError

    with live_service(tmp_path / "data", policy="fifo") as live:
        alice = live.client("alice-token-123")
        with pytest.raises(LabHiveError) as err:
            alice.submit(name="quarter", command="true", vc="vc1", gpus=0.25)
        assert "policy fifo places whole GPUs only" in err.value.message
        assert "--policy hived" in err.value.message
        assert alice.submit(name="whole", command="true", vc="vc1", gpus=1).id  # whole: fine
