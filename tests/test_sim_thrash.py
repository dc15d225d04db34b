"""Given preemptive policies on a small cluster, expect runs that are never cut shorter than a
quantum, wasted GPU time and total waiting counted, and jobs that can never start rejected."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sim_helpers import PHILLY, cluster, job, simulate, spans
from sim_helpers import las as las_policy

from labhive.scheduler.cli import main
from labhive.scheduler.policies import get_policy
from labhive.scheduler.sim.engine import Simulation
from labhive.scheduler.sim.metrics import summarize
from labhive.scheduler.sim.traces import file_is_synthetic, load_trace


def long_and_short() -> list:
    # one GPU; 'long' drops to LAS queue 1 at 100 GPU-s, 'short' arrives in queue 0 at 150
    return [job("long", 0, 1, 1000), job("short", 150, 1, 10)]


def test_las_cuts_no_run_shorter_than_its_quantum() -> None:
    jobs = simulate("las", cluster([1]), long_and_short(), thresholds=(100.0,))
    # 'long' has run 150 s of its 300-s quantum when 'short' arrives: 'short' waits till 300
    assert spans(jobs) == {"short": (300, 310), "long": (0, 1310)}
    assert jobs["long"].wasted_gpu_seconds == 300  # no checkpoint: its first run is lost
    assert jobs["long"].run_seconds == 1300


def test_without_a_quantum_las_preempts_at_once() -> None:
    jobs = simulate("las", cluster([1]), long_and_short(), thresholds=(100.0,), quantum=0)
    assert spans(jobs) == {"short": (150, 160), "long": (0, 1160)}


def test_checkpoints_and_a_restart_cost() -> None:
    config = cluster([1])
    sched = get_policy("las", config, thresholds=(100.0,))
    sim = Simulation(sched, long_and_short(), total_gpus=1, checkpoint=100, restart_cost=50)
    result = sim.run()
    jobs = {j.job_id: j for j in result.jobs}
    # 'long' keeps the 300 s it checkpointed and restores for 50 s: 700 + 50 left at 310
    assert jobs["long"].end == 310 + 750
    assert jobs["long"].wasted_gpu_seconds == 50
    overall = summarize(result)["overall"]
    assert overall["wasted_share"] == pytest.approx(50 / (300 + 750 + 10))  # of the GPU time held
    # total waiting counts the wait after the preemption too; the first-start delay does not
    assert jobs["long"].queue_delay == 0
    assert overall["waiting_total_avg"] == pytest.approx((10 + 150) / 2)


def test_las_does_not_promote_by_default() -> None:
    las = las_policy(cluster([1]))
    assert las.promote_knob == 0 and las.quantum == 300


def test_hard_quotas_reject_a_job_larger_than_its_vc() -> None:
    config = cluster([4, 4], {"a": 1, "b": 1})  # each VC is guaranteed one 4-GPU node
    big = job("big", 0, 8, 10, vc="a")
    jobs = simulate("capacity", config, [big, job("ok", 1, 4, 10, vc="a")], borrow=False)
    assert jobs["big"].state == "REJECTED" and "borrowing is off" in jobs["big"].reason
    assert spans(jobs)["ok"] == (1, 11)  # not blocked behind a job that can never start
    jobs = simulate("capacity", config, [job("big", 0, 8, 10, vc="a")])  # borrowing on
    assert spans(jobs)["big"] == (0, 10)


def test_a_synthetic_trace_is_known_by_its_content(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = PHILLY / "synthetic" / "synthetic_jobs_sample1000.csv"
    if not sample.is_file():
        pytest.skip(f"no synthetic sample at {sample}")
    renamed = tmp_path / "philly_jobs.csv"
    shutil.copy(sample, renamed)
    assert load_trace(renamed).synthetic and file_is_synthetic(renamed)
    packed = PHILLY / "synthetic" / "synthetic_cluster_job_log.json.gz"
    assert file_is_synthetic(packed)
    machines = tmp_path / "m.csv"
    machines.write_text("machineId,number of GPUs\nm0,8\n")
    args = ["simulate", "--trace", str(renamed), "--cluster", str(machines), "--limit", "20"]
    assert main([*args, "--policy", "fifo", "--quiet"]) == 0
    assert "this trace is SYNTHETIC" in capsys.readouterr().out
    real_looking = tmp_path / "synthetic_name_only.csv"
    real_looking.write_text("submit_time,vc,user,gpus,duration\n0,default,a,1,10\n")
    assert not load_trace(real_looking).synthetic and not file_is_synthetic(real_looking)


def test_las_promotion_without_checkpoints_is_warned_before_it_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sample = PHILLY / "synthetic" / "synthetic_jobs_sample1000.csv"
    base = ["simulate", "--trace", str(sample), "--cluster", str(PHILLY / "cluster_machine_list")]
    base += ["--machines", "40", "--limit", "30", "--policy", "las:promote_knob=8"]
    assert main(base) == 0
    err = capsys.readouterr().err
    assert err.startswith("simulate: WARNING: las:promote_knob=8 without --checkpoint thrashes")
    assert main([*base, "--checkpoint", "60"]) == 0
    assert "thrashes" not in capsys.readouterr().err
    assert main([*base, "--policy", "las"]) == 0
    assert capsys.readouterr().err.count("thrashes") == 1  # the default does not promote
