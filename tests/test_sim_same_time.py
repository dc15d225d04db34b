"""Given jobs submitted at the same virtual time, expect the policy to see them all before it
decides: in the simulator and in scenario replay alike."""

from __future__ import annotations

import pytest
from sim_helpers import cluster, job, simulate, spans

from labhive.scheduler.drivers.replay import replay
from labhive.scheduler.drivers.scenario import load_scenario


def batch() -> list:
    # one GPU; three 1-GPU jobs in the same second, the long one first in the file
    return [job("long", 0, 1, 100), job("s1", 0, 1, 10), job("s2", 0, 1, 10)]


def avg_jct(jobs: dict) -> float:
    return sum(j.jct for j in jobs.values()) / len(jobs)


def test_sjf_runs_the_short_jobs_of_a_batch_first() -> None:
    jobs = simulate("sjf", cluster([1]), batch())
    assert spans(jobs) == {"s1": (0, 10), "s2": (10, 20), "long": (20, 120)}
    assert avg_jct(jobs) == 50  # (10 + 20 + 120) / 3


def test_fifo_keeps_the_file_order_of_a_batch() -> None:
    jobs = simulate("fifo", cluster([1]), batch())
    assert spans(jobs) == {"long": (0, 100), "s1": (100, 110), "s2": (110, 120)}
    assert avg_jct(jobs) == 110


def test_las_starts_the_whole_batch_in_its_first_queue_in_file_order() -> None:
    # all three attain nothing before the decision: queue 0, submission order
    jobs = simulate("las", cluster([2]), batch())
    assert spans(jobs)["long"][0] == 0 and spans(jobs)["s1"][0] == 0
    assert spans(jobs)["s2"][0] == 10


def test_a_finish_and_an_arrival_at_one_instant_are_decided_together() -> None:
    # at t=10 "a" ends, and "big" (10 s) and "small" (5 s) arrive: SJF picks small first
    jobs = [job("a", 0, 1, 10), job("big", 10, 1, 10), job("small", 10, 1, 5)]
    got = spans(simulate("sjf", cluster([1]), jobs))
    assert got["small"] == (10, 15) and got["big"] == (15, 25)


@pytest.mark.parametrize("policy", ["sjf", "fifo"])
def test_replay_decides_a_batch_as_the_simulator_does(tmp_path, policy: str) -> None:
    path = tmp_path / "batch.yaml"
    path.write_text(
        """
cluster:
  physicalCluster:
    skuTypes: {}
    cellTypes:
      node: {childCellType: GPU, childCellNumber: 1, isNodeLevel: true}
    physicalCells:
      - {cellType: node, cellAddress: n0}
  virtualClusters:
    default: {virtualCells: [{cellType: node, cellNumber: 1}]}
events:
  - {at: 0, submit: {name: long, vc: default, gpus: 1, duration: 100}}
  - {at: 0, submit: {name: s1, vc: default, gpus: 1, duration: 10}}
  - {at: 0, submit: {name: s2, vc: default, gpus: 1, duration: 10}}
"""
    )
    result = replay(load_scenario(path), policy)
    first = result.steps[0]
    running = [j["name"] for j in first["jobs"] if j["state"] == "RUNNING"]
    assert running == (["s1"] if policy == "sjf" else ["long"])
    assert len(result.steps) == 6  # three submissions, three finishes
