"""Given a fresh checkout after ``make up`` (the venv exists, nobody activated it), expect
``notebooks/make_report.sh`` to find papermill and nbconvert in it and write the report."""

from __future__ import annotations

import subprocess
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def test_make_report_runs_without_the_venv_on_path(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no .venv/bin, no activate
    command = ["bash", str(NOTEBOOKS / "make_report.sh"), str(out),
               "-p", "policies", "fifo", "-p", "jobs", "20"]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "REPORT DONE: 1 policies x 20 jobs" in out.read_text()
