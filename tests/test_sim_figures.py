"""Given two policies compared with --out, expect each policy drawn in one colour in every
figure, and its per-VC average wait bar paired with its p95 in one slot."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from labhive.scheduler.cli import main
from labhive.scheduler.sim.report import PALETTE


def figure(path: Path) -> dict:
    text = path.read_text()
    start = text.index("Plotly.newPlot(")
    # the call's 2nd argument is the traces' JSON array
    match = re.search(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*(\[.*?\]),\s*\{", text[start:], re.S)
    assert match is not None
    return {"data": json.loads(match.group(1))}


def test_a_policy_keeps_its_colour_across_figures(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(
        "submit_time,vc,user,gpus,duration\n0,default,a,2,100\n1,default,b,1,10\n2,default,c,1,5\n"
    )
    machines = tmp_path / "m.csv"
    machines.write_text("machineId,number of GPUs\nm0,2\n")
    out = tmp_path / "out"
    args = ["simulate", "--trace", str(trace), "--cluster", str(machines), "--quiet"]
    assert main([*args, "--policy", "fifo", "--policy", "sjf", "--out", str(out)]) == 0
    for name in ("jct_cdf.html", "utilization_queue.html", "vc_waits.html"):
        for trace_ in figure(out / name)["data"]:
            colour = (trace_.get("line") or trace_.get("marker") or {}).get("color")
            policy = trace_["name"].split()[0]
            assert colour == PALETTE[["fifo", "sjf"].index(policy)], (name, trace_["name"])
    bars = figure(out / "vc_waits.html")["data"]
    assert [(b["name"], b["offsetgroup"]) for b in bars] == [
        ("fifo p95", "fifo"),
        ("fifo avg", "fifo"),
        ("sjf p95", "sjf"),
        ("sjf avg", "sjf"),
    ]


def test_progress_is_a_line_per_policy_off_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("submit_time,vc,user,gpus,duration\n0,default,a,1,10\n5,default,b,1,10\n")
    machines = tmp_path / "m.csv"
    machines.write_text("machineId,number of GPUs\nm0,2\n")
    args = ["simulate", "--trace", str(trace), "--cluster", str(machines), "--policy", "fifo"]
    assert main([*args, "--policy", "las"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [line.split(" in ")[0] for line in err] == [
        "simulate: fifo: 2 jobs",
        "simulate: las: 2 jobs",
    ]
    assert main([*args, "--quiet"]) == 0
    assert capsys.readouterr().err == ""
