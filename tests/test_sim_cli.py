"""Given a trace and a cluster on the command line, expect a table, a JSON document, per-job
CSVs and figures; and the documented example policy working as written."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from sim_helpers import PHILLY, cluster, job, simulate, spans

from labhive.scheduler.cli import main
from labhive.scheduler.sim.engine import Simulation

SAMPLE = PHILLY / "synthetic" / "synthetic_jobs_sample1000.csv"
MACHINES = PHILLY / "cluster_machine_list"
ROOT = Path(__file__).resolve().parents[1]


def small_trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(
        "job_id,submit_time,vc,user,gpus,duration,status\n"
        "a,0,vc1,alice,2,100,Pass\n"
        "b,1,vc1,bob,2,50,Failed\n"
        "c,2,vc1,carol,1,10,Pass\n"
        "d,3,vc1,dave,lots,10,Pass\n"
    )
    return path


def small_cluster(tmp_path: Path) -> Path:
    path = tmp_path / "machines.csv"
    path.write_text("machineId,number of GPUs\nm0,2\nm1,1\n")
    return path


def test_table_compares_policies_and_names_the_bad_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["simulate", "--trace", str(small_trace(tmp_path)), "--cluster"]
    args += [str(small_cluster(tmp_path)), "--policy", "fifo", "--policy", "sjf", "--quiet"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "1 malformed rows skipped (--strict rejects): line 5: gpus 'lots' is not a number" in out
    assert re.search(r"metric\s+fifo\s+sjf", out)
    assert re.search(r"JCT avg\s+\S+ min\s+\S+ min", out) or "JCT avg" in out
    assert "SYNTHETIC" not in out
    assert main([*args, "--strict"]) == 2
    assert "line 5" in capsys.readouterr().err


def test_json_and_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "out"
    args = ["simulate", "--trace", str(SAMPLE), "--cluster", str(MACHINES), "--limit", "300"]
    args += ["--policy", "fifo", "--policy", "las:promote_knob=4", "--json", "--out", str(out_dir)]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["synthetic"] is True
    assert set(doc["policies"]) == {"fifo", "las:promote_knob=4"}
    fifo = doc["policies"]["fifo"]["overall"]
    assert fifo["jobs"] == 300 and fifo["finished"] == 300
    assert 0 < fifo["utilization"] < 1
    series = doc["policies"]["fifo"]["over_time"]["utilization"]
    assert len(series) == 200
    assert sum(series) / len(series) == pytest.approx(fifo["utilization"], rel=1e-4)
    assert set(doc["policies"]["fifo"]["per_vc"]) <= {
        "6214e9", "7f04ca", "11cb48", "b436b2", "ee9e8c", "e13805",
        "6c71a0", "2869ce", "ed69ec", "103959", "0e4a51", "795a4c", "51b7ef", "925e2b", "23dbec",
    }  # fmt: skip
    names = {p.name for p in out_dir.iterdir()}
    assert {"jobs_fifo.csv", "summary.json", "jct_cdf.html", "utilization_queue.html"} <= names
    assert {"vc_waits.html", "plotly.min.js", "jobs_las_promote_knob_4.csv"} <= names
    rows = list(csv.DictReader((out_dir / "jobs_fifo.csv").open()))
    assert len(rows) == 300 and rows[0]["state"] in ("SUCCEEDED", "FAILED")
    assert "Plotly.newPlot" in (out_dir / "jct_cdf.html").read_text()


def test_same_seed_same_result(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", "--trace", str(SAMPLE), "--cluster", str(MACHINES), "--policy", "las"]
    base += ["--sample", "0.3", "--json", "--quiet"]
    main([*base, "--seed", "7"])
    first = capsys.readouterr().out
    main([*base, "--seed", "7"])
    assert capsys.readouterr().out == first
    main([*base, "--seed", "8"])
    assert capsys.readouterr().out != first


def test_user_mistakes_are_messages_not_tracebacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["simulate", "--cluster", str(MACHINES), "--policy", "fifo"]
    assert main([*base, "--trace", str(tmp_path / "missing.csv")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main([*base, "--trace", str(SAMPLE), "--policy", "nope"]) == 2
    assert "unknown policy 'nope'" in capsys.readouterr().err
    assert main([*base, "--trace", str(SAMPLE), "--policy", "fifo:backfill"]) == 2
    assert "key=value" in capsys.readouterr().err


def test_scenario_through_the_simulator(capsys: pytest.CaptureFixture[str]) -> None:
    scenario = ROOT / "scheduler" / "examples" / "lab6-4-gang.yaml"
    assert main(["simulate", "--scenario", str(scenario), "--policy", "hived", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["policies"]["hived"]["overall"]["finished"] == 2


def test_the_documented_example_policy_works_as_written() -> None:
    text = (ROOT / "docs" / "policies.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S)
    assert code is not None
    namespace: dict[str, object] = {}
    exec(compile(code.group(1), "fewest_gpus.py", "exec"), namespace)
    config = cluster([2])
    policy = namespace["create"](config)  # type: ignore[operator]
    jobs = [job("big", 0, 2, 100), job("wide", 1, 2, 10), job("one", 2, 1, 10)]
    sim = Simulation(policy, jobs, total_gpus=config.total_gpus())  # type: ignore[arg-type]
    got = {j.job_id: (j.first_start, j.end) for j in sim.run().jobs}
    assert got == {"big": (0, 100), "one": (100, 110), "wide": (110, 120)}
    trace = [job("big", 0, 2, 100), job("wide", 1, 2, 10), job("one", 2, 1, 10)]
    assert spans(simulate("fifo", config, trace)) == {
        "big": (0, 100),
        "wide": (100, 110),
        "one": (110, 120),
    }
