"""Given a trace read as a stream (a generator, never a list of all jobs), expect the same jobs,
the same skipped and malformed rows, and the same simulation as the trace loaded whole."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from sim_helpers import PHILLY

from labhive.scheduler.cli import main
from labhive.scheduler.core.errors import UserError
from labhive.scheduler.sim.machines import load_sim_cluster
from labhive.scheduler.sim.runner import run_policy
from labhive.scheduler.sim.traces import JobStream, Trace, iter_trace, load_trace, scan_trace

SAMPLE = PHILLY / "synthetic" / "synthetic_jobs_sample1000.csv"
MACHINES = PHILLY / "cluster_machine_list"


def test_a_csv_stream_yields_the_loaded_jobs_one_at_a_time() -> None:
    stream = iter_trace(SAMPLE)
    assert not isinstance(stream, list)
    first = next(stream)
    whole = load_trace(SAMPLE)
    assert first == whole.jobs[0]
    assert [first, *stream] == whole.jobs  # the sample is in submit order, as written


def test_a_gzipped_philly_log_streams_its_jobs_and_counts_its_skips(tmp_path: Path) -> None:
    def job(n: int, attempts: list | None = None) -> dict:
        ok = [
            {
                "start_time": f"2017-10-01 00:0{n}:10",
                "end_time": "2017-10-01 01:00:10",
                "detail": [{"ip": "m1", "gpus": ["gpu0"]}],
            }
        ]
        return {
            "status": "Pass",
            "vc": "vc1",
            "jobid": f"app_{n}",
            "submitted_time": f"2017-10-01 00:0{n}:00",
            "user": "u1",
            "attempts": ok if attempts is None else attempts,
        }

    rows = [job(0), job(1, attempts=[]), job(2), {"jobid": "broken"}]
    path = tmp_path / "log.gz"
    path.write_bytes(gzip.compress(("[\n" + ",\n".join(map(json.dumps, rows)) + "\n]").encode()))
    into = Trace(str(path), "philly-json", [])
    streamed = list(iter_trace(path, into=into))
    whole = load_trace(path)
    assert streamed == whole.jobs and [j.job_id for j in streamed] == ["app_0", "app_2"]
    assert into.skipped == whole.skipped == {"no attempts": 1}
    assert into.problems == whole.problems and len(into.problems) == 1


def test_a_malformed_csv_row_is_counted_as_the_stream_passes_it(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "submit_time,vc,user,gpus,duration\n0,vc1,u,1,10\n1,vc1,u,many,10\n2,vc1,u,2,5\n"
    )
    into = Trace(str(path), "generic-csv", [])
    assert [j.job_id for j in iter_trace(path, into=into)] == ["job-2", "job-4"]
    assert [str(p) for p in into.problems] == ["line 3: gpus 'many' is not a number"]


def test_a_missing_or_unreadable_trace_is_a_message(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        next(iter_trace(tmp_path / "none.csv"))
    (tmp_path / "bin.csv").write_bytes(b"submit_time,vc\n\xff\xfe\n")
    with pytest.raises(UserError, match="not UTF-8"):
        list(iter_trace(tmp_path / "bin.csv"))


def test_a_streamed_trace_replays_as_the_loaded_list() -> None:
    config, _ = load_sim_cluster(MACHINES, None, 40)
    whole = run_policy("sjf", config, load_trace(SAMPLE, limit=300).jobs)
    jobs = iter_trace(SAMPLE)
    streamed = run_policy("sjf", config, (next(jobs) for _ in range(300)))
    assert streamed.summary == whole.summary
    assert streamed.summary["overall"]["jobs"] == 300


def test_jobs_out_of_submit_order_are_refused() -> None:
    config, _ = load_sim_cluster(MACHINES, None, 40)
    jobs = load_trace(SAMPLE, limit=3).jobs
    with pytest.raises(ValueError, match="sorted by submit time"):
        run_policy("fifo", config, [jobs[1], jobs[0], jobs[2]])


def test_a_run_that_keeps_no_jobs_reports_the_same_figures() -> None:
    config, _ = load_sim_cluster(MACHINES, None, 40)
    jobs = load_trace(SAMPLE, limit=400).jobs
    for policy in ("fifo", "las", "hived"):
        kept = run_policy(policy, config, jobs)
        lean = run_policy(policy, config, iter(jobs), keep_jobs=False)
        assert lean.summary == kept.summary, policy
        assert len(kept.result.jobs) == 400 and lean.result.jobs == []
        assert len(lean.result.table) == 400


def test_simulate_streams_a_sorted_trace_and_sorts_one_out_of_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``labhive simulate --trace``: a file in submit order is scanned once (counts, order)
    and replayed as a stream of its first ``--limit`` jobs; a file out of order is loaded
    whole and sorted. Both give the document the loaded list gives."""
    scanned = scan_trace(SAMPLE, limit=300)
    assert scanned is not None
    trace, jobs = scanned
    whole = load_trace(SAMPLE, limit=300)
    assert isinstance(jobs, JobStream) and len(jobs) == 300
    assert list(jobs) == list(jobs) == whole.jobs  # read afresh on each pass
    assert (trace.format, trace.synthetic, trace.skipped) == (
        whole.format,
        whole.synthetic,
        whole.skipped,
    )
    assert trace.problems == whole.problems

    lines = SAMPLE.read_text().splitlines()
    # The last job first: sorting puts it back (it has a later time than any other; jobs at
    # the same time keep their file order, so any other move could change the replay).
    shuffled = tmp_path / "shuffled.csv"
    shuffled.write_text("\n".join([lines[0], lines[300], *lines[1:300]]) + "\n")
    sorted_ = tmp_path / "sorted.csv"
    sorted_.write_text("\n".join(lines[:301]) + "\n")
    assert scan_trace(shuffled) is None  # out of order: load_trace sorts it
    assert scan_trace(PHILLY / "synthetic" / "synthetic_cluster_job_log.json.gz") is None
    assert scan_trace(sorted_) is not None
    docs = []
    for path in (sorted_, shuffled):
        args = ["simulate", "--trace", str(path), "--cluster", str(MACHINES), "--machines", "40"]
        assert main([*args, "--policy", "fifo", "--limit", "250", "--json", "--quiet"]) == 0
        docs.append(json.loads(capsys.readouterr().out))
    assert docs[0]["policies"] == docs[1]["policies"]
    assert docs[0]["policies"]["fifo"]["overall"]["jobs"] == 250


def test_strict_still_refuses_a_malformed_row_before_replaying(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("submit_time,vc,user,gpus,duration\n0,vc1,u,1,10\n1,vc1,u,many,10\n")
    with pytest.raises(UserError, match=r"line 3: gpus 'many'.*1 malformed rows"):
        scan_trace(path, strict=True)
    scanned = scan_trace(path)
    assert scanned is not None and len(scanned[1]) == 1 and len(scanned[0].problems) == 1
