"""Given slices and re-timed copies of the SYNTHETIC Philly-format trace, expect the simulator
to still say it is synthetic (issue 34: only a copy starting at its first record was known)."""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import pytest
from sim_helpers import PHILLY

from labhive.scheduler.cli import main
from labhive.scheduler.sim.traces import Trace, load_trace, scan_trace, write_generic_csv

FULL = PHILLY / "synthetic" / "synthetic_jobs.csv.gz"
pytestmark = pytest.mark.skipif(not FULL.is_file(), reason=f"no synthetic trace at {FULL}")


def _rows() -> tuple[str, list[str]]:
    with gzip.open(FULL, "rt") as fh:
        header = fh.readline()
        return header, [fh.readline() for _ in range(60_000)]


def _simulate_says_synthetic(trace: Path, tmp: Path, capsys: pytest.CaptureFixture[str]) -> bool:
    machines = tmp / "m.csv"
    machines.write_text("machineId,number of GPUs\nm0,8\n")
    argv = ["simulate", "--json", "--quiet", "--trace", str(trace), "--cluster", str(machines)]
    assert main([*argv, "--policy", "fifo", "--limit", "5"]) == 0
    return bool(json.loads(capsys.readouterr().out)["synthetic"])


def test_a_slice_from_the_middle_is_still_synthetic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header, rows = _rows()
    piece = tmp_path / "philly_week3.csv"
    piece.write_text(header + "".join(rows[50_000:50_400]))  # 400 jobs, none the first
    assert load_trace(piece).synthetic
    scanned = scan_trace(piece)
    assert scanned is not None and scanned[0].synthetic
    assert _simulate_says_synthetic(piece, tmp_path, capsys)


def test_a_retimed_copy_in_the_generic_format_is_still_synthetic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header, rows = _rows()
    jobs = load_trace_text(tmp_path, header + "".join(rows[30_000:30_500])).jobs
    start = jobs[0].submit
    for j in jobs:
        j.submit = (j.submit - start) / 2  # twice the load, from time 0
    copy = tmp_path / "retimed.csv"
    write_generic_csv(jobs, copy)
    assert load_trace(copy).synthetic
    assert _simulate_says_synthetic(copy, tmp_path, capsys)


def test_a_recorded_looking_trace_is_not_labelled(tmp_path: Path) -> None:
    """Same shape of ids and hashes, other values: not the synthetic trace."""
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["job_id", "submit_time", "vc", "user", "gpus", "duration", "status"])
    for i in range(5000):
        w.writerow([f"application_1506638472019_{i}", i, f"{i % 7:06x}", f"{i:06x}", 1, 60, ""])
    path = tmp_path / "recorded.csv"
    path.write_text(out.getvalue())
    assert not load_trace(path).synthetic


def load_trace_text(tmp: Path, text: str) -> Trace:
    path = tmp / "part.csv"
    path.write_text(text)
    return load_trace(path)
