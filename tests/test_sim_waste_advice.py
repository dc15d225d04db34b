"""Given LAS preempting a long job that has no checkpoints, expect a warning whose advice,
when followed, brings the waste under the threshold, and no advice that does not (issue 34:
the old text said "a longer las:quantum, or turn starvation promotion off (the default)")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labhive.scheduler.cli import main

#: One 2-GPU machine. "long" runs 2 GPUs for 10,000 s; past 3,250 GPU-seconds (1,625 s) it is
#: in LAS' second queue, so "short", arriving at 2,000 s in the first queue, preempts it.
TRACE = """job_id,submit_time,vc,user,gpus,duration,status
long,0,default,a,2,10000,Pass
short,2000,default,b,2,100,Pass
"""


def _run(tmp: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[float, list[str]]:
    trace = tmp / "t.csv"
    trace.write_text(TRACE)
    machines = tmp / "m.csv"
    machines.write_text("machineId,number of GPUs\nm0,2\n")
    argv = ["simulate", "--json", "--quiet", "--trace", str(trace), "--cluster", str(machines)]
    assert main([*argv, *extra]) == 0
    doc = json.loads(capsys.readouterr().out)
    (summary,) = doc["policies"].values()
    warnings = [n for n in doc["notes"] if n.startswith("WARNING")]
    return summary["overall"]["wasted_share"], warnings


def test_the_advice_brings_the_waste_under_the_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    share, warnings = _run(tmp_path, capsys, "--policy", "las")
    assert share > 0.03
    (warning,) = warnings
    assert "e.g. --checkpoint 600" in warning
    assert "promote_knob" not in warning  # promotion is off already: no advice to turn it off
    # the old advice, followed: a longer quantum wastes as much or more
    longer, still = _run(tmp_path, capsys, "--policy", "las:quantum=1800")
    assert longer >= share and still
    # the new advice, followed
    share, warnings = _run(tmp_path, capsys, "--policy", "las", "--checkpoint", "600")
    assert share < 0.03 and warnings == []


def test_with_promotion_on_the_advice_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, (warning,) = _run(tmp_path, capsys, "--policy", "las:promote_knob=8", "--checkpoint", "3000")
    assert "a shorter --checkpoint than 3000 s" in warning
    assert "las:promote_knob=0" in warning
