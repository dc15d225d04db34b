"""Every course lab and researcher notebook, executed by papermill against a real ``labhive
serve`` (local executor, virtual cluster of 2 nodes x 4 GPU slots), as a student's or a
researcher's report run would. Each notebook checks itself in its last cells; here we expect
those checks to pass and the executed notebook to end with meaningful text, not widget reprs.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_support import Service, labhive_serve, venv_env
from labs_support import (
    LABS,
    NOTEBOOKS,
    REPO,
    execute,
    last_output,
    service_env,
    stale_widgets,
    text_of,
)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with labhive_serve(tmp_path_factory.mktemp("labs-service")) as svc, service_env(svc):
        yield svc


def run(name: str, tmp_path: Path, **parameters: object) -> str:
    notebook = LABS / name if (LABS / name).exists() else NOTEBOOKS / name
    nb, seconds = execute(notebook, tmp_path / name, parameters)
    print(f"{name}: {seconds:.1f} s")  # the per-notebook figure, shown with pytest -s
    assert stale_widgets(nb) == [], "a display kept a widget repr instead of its final text"
    return text_of(nb)


def test_lab1_a_jobs_life(service: Service, tmp_path: Path) -> None:
    text = run("lab1_a_jobs_life.ipynb", tmp_path)
    assert "CHECK PASSED" in text
    assert "job hello: SUCCEEDED" in text
    assert "job flaky: FAILED" in text and "attempt 3 failed" in text
    assert "OpenPAI file and short form describe the same job: True" in text
    assert "memory limit of 150 MB enforced by" in text or "cannot enforce memory limits" in text


def test_lab2_hived_experiments_live_and_replayed(service: Service, tmp_path: Path) -> None:
    nb, _ = execute(LABS / "lab2_sharing_with_hived.ipynb", tmp_path / "lab2.ipynb")
    text = text_of(nb)
    assert "CHECK PASSED: the live run, the replay agree" in text
    # tables are HTML for JupyterLab, and the expected values appear only in the checking cell
    tables = [o["data"] for c in nb["cells"] for o in c.get("outputs", []) if "data" in o]
    html = ["".join(d.get("text/html", "")) for d in tables]
    assert sum('class="dataframe labhive-lab-table"' in h for h in html) > 8, html
    shown = [(i, "".join(c["source"])) for i, c in enumerate(nb["cells"])]
    check = next(i for i, src in shown if "check_observations" in src)
    before = [d for c in nb["cells"][:check] for o in c.get("outputs", []) if (d := o.get("data"))]
    assert before and not any("expected" in "".join(d.get("text/plain", "")) for d in before)
    assert all("Question(" not in src for _, src in shown), "the expected values are in a cell"
    assert "12 of 12 answers not filled yet" in text
    assert "preempted" in text and "hostname-carol,hostname-dan" in text


def test_lab2_checking_cell_says_what_differs_from_a_students_answers(tmp_path: Path) -> None:
    answers = {"e1_second": "RUNNING", "e4_gang": "0", "e5_incr": "2"}
    text = run("lab2_sharing_with_hived.ipynb", tmp_path, live=False, answers=answers)
    assert "9 of 12 answers not filled yet" in text
    after = text.split("DIFFERENCES:")[1].splitlines()
    differences = "\n".join(line for line in after if line.startswith(" - "))
    assert "hostname-carol" in text.split("DIFFERENCES:")[1], "the revealed table follows"
    assert "1 VC safety: state of the 2nd vc1 job while the 1st runs - you wrote 'RUNNING'" in (
        differences
    )
    assert "5 incremental: tasks running while one node is busy - you wrote '2'" in differences
    assert "e4_gang" not in differences and "gang tasks running" not in differences


def test_lab3_strace_cpu_job_and_real_h100_logs(service: Service, tmp_path: Path) -> None:
    text = run("lab3_gpu_through_strace.ipynb", tmp_path)
    assert "CHECK PASSED" in text
    assert "ioctls on an NVIDIA device in the CPU run: 0" in text
    assert "NV_ESC_RM_CONTROL" in text and "UVM_REGISTER_GPU" in text
    assert "CHECK PASSED (isolation)" in text or "isolation part is skipped here" in text


def test_lab4_policies_on_a_trace_say_the_trace_is_synthetic(tmp_path: Path) -> None:
    text = run("lab4_scheduling_on_a_trace.ipynb", tmp_path, jobs=300)
    assert "CHECK PASSED (on a SYNTHETIC trace)" in text
    assert "SYNTHETIC (generated in the Philly format; not Philly results)" in text
    assert "gpu_time_first" in text
    assert "a slice of the real 552-machine list" in text
    assert "SYNTHETIC trace next to the real Philly cluster" in text
    assert "share a GPU" in text and "(REAL data)" in text  # the Alibaba sharing section


def test_a_copy_of_the_labs_in_a_home_finds_the_course_data_through_labhive_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the hub delivers them: ``labs/`` copied into a user's home, far from the repository,
    with ``LABHIVE_DATA`` set by the spawner's ``course_data``."""
    data = next((p / "shared" / "data" for p in REPO.parents if (p / "shared" / "data").is_dir()),
                None)  # fmt: skip
    if data is None:
        pytest.skip("the course data (shared/data beside the repository) is not here")
    home = tmp_path / "home" / "alice" / "labs"
    shutil.copytree(LABS, home, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("LABHIVE_DATA", str(data))
    nb, _ = execute(home / "lab4_scheduling_on_a_trace.ipynb", tmp_path / "lab4.ipynb",
                    {"jobs": 300})  # fmt: skip
    assert "CHECK PASSED (on a SYNTHETIC trace)" in text_of(nb)
    monkeypatch.delenv("LABHIVE_DATA")
    with pytest.raises(Exception, match="set LABHIVE_DATA"):
        execute(home / "lab4_scheduling_on_a_trace.ipynb", tmp_path / "lab4-lost.ipynb")


def test_lab5_metrics_drill_and_alerts(service: Service, tmp_path: Path) -> None:
    text = run("lab5_operating_the_platform.ipynb", tmp_path)
    assert "CHECK PASSED" in text
    assert 'labhive_queue_length{vc="vc1"} 2.0' in text
    assert "LabHiveNodeUnhealthy" in text and "LabHiveQueueWaitTooLong" in text
    assert "Warning" not in text, "a pandas warning in the student's output"
    assert not re.search(r"^vnode-\d+\s+\d+\.0\s", text, re.M), "job ids shown as floats"


def test_submit_and_watch_ends_with_the_jobs_final_state(service: Service, tmp_path: Path) -> None:
    nb, _ = execute(NOTEBOOKS / "submit_and_watch.ipynb", tmp_path / "watch.ipynb")
    assert stale_widgets(nb) == []
    assert last_output(nb).startswith("job report: SUCCEEDED")


def test_parameter_sweep_collects_a_results_file(service: Service, tmp_path: Path) -> None:
    results = tmp_path / "sweep.csv"
    text = run(
        "parameter_sweep.ipynb",
        tmp_path,
        learning_rates="0.01,0.2",
        batch_sizes="64",
        train_steps=20,
        results_file=str(results),
    )
    rows = list(csv.DictReader(results.open()))
    assert [(r["lr"], r["batch"], r["state"]) for r in rows] == [
        ("0.01", "64", "SUCCEEDED"),
        ("0.2", "64", "SUCCEEDED"),
    ]
    assert float(rows[1]["loss"]) < float(rows[0]["loss"])  # 20 steps at 0.01 barely move
    assert "best: lr=0.2 batch=64" in text


def test_experiment_report_is_one_command_to_html(tmp_path: Path) -> None:
    out = tmp_path / "report" / "report.html"
    env = venv_env()
    command = [
        *("bash", str(NOTEBOOKS / "make_report.sh"), str(out)),
        *("-p", "policies", "fifo,sjf,hived", "-p", "jobs", "200", "-p", "out_dir"),
        str(tmp_path / "figures"),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    html = out.read_text()
    assert "REPORT DONE: 3 policies x 200 jobs" in html
    assert "SYNTHETIC" in html and "not</strong> Philly results" in html
    assert html.count("plotly") > 10  # the figures, with plotly.js inside: opens offline
    assert "run_policy(" not in html  # code cells hidden: a report, not a notebook
    assert (tmp_path / "figures" / "summary.json").exists()


def test_labs_folder_holds_the_six_labs() -> None:
    labs = sorted(p.name for p in LABS.glob("lab*.ipynb"))
    assert [name[:4] for name in labs] == ["lab1", "lab2", "lab3", "lab4", "lab5", "lab6"]


def test_lab6_records_a_run_exports_it_and_simulates_it_under_two_policies(
    tmp_path: Path,
) -> None:
    """Its own service records a burst on vc1; the journal exported with hashed names reads
    back in ``labhive simulate`` under FIFO and SJF, and a what-if with one more node for vc1
    shortens its p95 wait: the check cell says so."""
    text = run("lab6_your_cluster_as_a_trace.ipynb", tmp_path)
    assert "CHECK PASSED" in text
    assert "[x] SJF waits less than FIFO on this burst" in text
    assert "exported 6 jobs (labhive)" in text
    assert "vc1 wait p95:" in text and "with one more node" in text


def test_lab1_also_runs_cell_after_cell_with_live_widgets(
    service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As "Run All" in JupyterLab: the magics make live widgets and return at once unless
    told to wait; the lab's cells must still see finished jobs where they need them."""
    monkeypatch.setenv("LABHIVE_INTERACTIVE", "1")
    nb, _ = execute(LABS / "lab1_a_jobs_life.ipynb", tmp_path / "live.ipynb")
    widgets = [
        out
        for cell in nb["cells"]
        for out in cell.get("outputs", [])
        if "application/vnd.jupyter.widget-view+json" in out.get("data", {})
    ]
    assert widgets, "no live widget was displayed"
    assert "CHECK PASSED" in text_of(nb)
    assert stale_widgets(nb) == []
