"""Given VCs with quotas, expect per-VC queues (Helios' model) to keep each VC within its
quota, block only within a VC, and preempt only the VC's own jobs; one pool otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_helpers import cluster, job, simulate, spans

from labhive.scheduler.cli import main


def two_vcs() -> list:
    # VC a and VC b are each guaranteed one 4-GPU node
    return [job("a1", 0, 4, 100, vc="a"), job("a2", 1, 2, 10, vc="a"), job("b1", 2, 2, 10, vc="b")]


def test_one_pool_lets_a_vc_run_past_its_quota() -> None:
    got = spans(simulate("fifo", cluster([4, 4], {"a": 1, "b": 1}), two_vcs()))
    assert got == {"a1": (0, 100), "a2": (1, 11), "b1": (2, 12)}


@pytest.mark.parametrize("policy", ["fifo", "sjf", "las"])
def test_per_vc_queues_keep_each_vc_within_its_quota(policy: str) -> None:
    got = spans(simulate(policy, cluster([4, 4], {"a": 1, "b": 1}), two_vcs(), per_vc=True))
    # a is at its 4 GPUs: a2 waits for a1 although b's node has room; b1 is not held back
    assert got == {"a1": (0, 100), "a2": (100, 110), "b1": (2, 12)}


def test_per_vc_rejects_a_job_larger_than_its_vc() -> None:
    jobs = simulate("fifo", cluster([4, 4], {"a": 1, "b": 1}), [job("big", 0, 8, 10, vc="a")])
    assert spans(jobs)["big"] == (0, 10)  # one pool: fits the cluster
    jobs = simulate(
        "fifo", cluster([4, 4], {"a": 1, "b": 1}), [job("big", 0, 8, 10, vc="a")], per_vc=True
    )
    assert jobs["big"].state == "REJECTED" and "guaranteed 4" in jobs["big"].reason


def test_per_vc_las_preempts_only_the_vcs_own_jobs() -> None:
    trace = [
        job("a_long", 0, 1, 10_000, vc="a"),
        job("b_long", 0, 1, 10_000, vc="b"),
        job("a_short", 4000, 1, 100, vc="a"),  # both longs are in queue 1 by then
    ]
    config = cluster([1, 1], {"a": 1, "b": 1})
    pooled = simulate("las", config, trace)
    assert pooled["b_long"].preemptions == 1  # one pool: the latest-started victim, b's
    trace = [job(j.job_id, j.submit, j.gpus, j.duration, vc=j.vc) for j in trace]
    per_vc = simulate("las", config, trace, per_vc=True)
    assert per_vc["a_long"].preemptions == 1 and per_vc["b_long"].preemptions == 0
    assert spans(per_vc)["a_short"] == (4000, 4100)


def test_the_cli_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("submit_time,vc,user,gpus,duration\n0,default,a,1,10\n")
    machines = tmp_path / "m.csv"
    machines.write_text("machineId,number of GPUs\nm0,2\n")
    args = ["simulate", "--trace", str(trace), "--cluster", str(machines), "--per-vc", "--quiet"]
    assert main([*args, "--policy", "fifo", "--policy", "las:quantum=60"]) == 0
    assert "fifo:per_vc=true" in capsys.readouterr().out
    assert main([*args, "--policy", "capacity"]) == 2
    assert "capacity keeps VC quotas already" in capsys.readouterr().err
