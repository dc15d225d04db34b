"""Given a trace and AcmeTrace's real cluster summary, expect the trace's job statistics beside
the real Philly row, worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_helpers import DATA, PHILLY

from labhive.scheduler.cli import main

SUMMARY_HEADER = (
    "id,gpu_job_num,med_run_time_gpu,avg_run_time_gpu,med_gpu_num,avg_gpu_num,"
    "complete_rate_gpu,cancel_rate_gpu,fail_rate_gpu\n"
)


def test_statistics_beside_the_real_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(
        "submit_time,vc,user,gpus,duration,status\n"
        "0,a,u,1,100,Pass\n1,a,u,2,300,Failed\n2,a,u,1,200,Killed\n3,a,u,8,1000,Pass\n"
    )
    summary = tmp_path / "summary.csv"
    summary.write_text(SUMMARY_HEADER + "Philly,100,200,400,1,2,0.5,0.25,0.25\n")
    assert main(["trace-report", str(trace), "--against", str(summary), "--json"]) == 0
    rows = {r["statistic"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["run time, median (s)"]["trace"] == 250  # of 100, 200, 300, 1000
    assert rows["run time, average (s)"]["trace"] == 400
    assert rows["run time, average (s)"]["ratio"] == 1.0
    assert rows["GPUs per job, average"]["trace"] == 3
    assert rows["completed share"]["trace"] == 0.5
    assert rows["cancelled share"]["trace"] == rows["failed share"]["trace"] == 0.25
    assert main(["trace-report", str(trace), "--against", str(summary), "--row", "Nope"]) == 2
    assert "it lists Philly" in capsys.readouterr().err


def test_the_synthetic_sample_against_real_philly(capsys: pytest.CaptureFixture[str]) -> None:
    sample = PHILLY / "synthetic" / "synthetic_jobs_sample1000.csv"
    acme = DATA / "acme" / "cluster_summary.csv"
    if not (sample.is_file() and acme.is_file()):
        pytest.skip("no synthetic sample or AcmeTrace summary here")
    assert main(["trace-report", str(sample), "--against", str(acme)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("NOTE: this trace is SYNTHETIC")
    assert "real Philly" in out and "112,956" in out
