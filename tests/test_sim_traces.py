"""Given trace files (good, quirky and malformed), expect every row accounted for by line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from sim_helpers import PHILLY

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.sim.machines import load_sim_cluster
from labhive.scheduler.sim.traces import load_trace

SYNTHETIC = PHILLY / "synthetic"


def philly_job(n: int, **over: object) -> dict[str, object]:
    """One job of Philly's log, as its JSON reads: any field may be given another value."""
    job: dict[str, object] = {
        "status": "Pass",
        "vc": "vc1",
        "jobid": f"application_1_{n}",
        "attempts": [
            {
                "start_time": "2017-10-01 00:00:10",
                "end_time": "2017-10-01 01:00:10",
                "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}],
            }
        ],
        "submitted_time": "2017-10-01 00:00:00",
        "user": "u1",
    }
    job.update(over)
    return job


def write_log(path: Path, jobs: list) -> Path:
    path.write_text("[\n" + ",\n".join(json.dumps(j) for j in jobs) + "\n]\n")
    return path


def test_philly_log_quirks_are_counted_and_bad_rows_named_by_line(tmp_path: Path) -> None:
    jobs = [
        philly_job(0),
        philly_job(1, attempts=[]),  # never started
        philly_job(2, attempts=[{"start_time": "None", "end_time": None, "detail": []}]),
        philly_job(3, submitted_time="yesterday"),  # malformed time
        philly_job(4, status="Failed"),
    ]
    del jobs[4]["vc"]  # malformed: no VC
    trace = load_trace(write_log(tmp_path / "cluster_job_log", jobs))
    assert trace.format == "philly-json"
    assert [j.job_id for j in trace.jobs] == ["application_1_0"]
    job = trace.jobs[0]
    assert (job.gpus, job.duration, job.vc) == (2, 3600, "vc1")
    assert trace.skipped == {"no attempts": 1, "attempt without start or end": 1}
    assert [(p.line, p.message) for p in trace.problems] == [
        (5, "time 'yesterday' is not 'YYYY-MM-DD HH:MM:SS'"),
        (6, "missing vc"),
    ]
    with pytest.raises(UserError, match="line 5: time 'yesterday'"):
        load_trace(tmp_path / "cluster_job_log", strict=True)


def test_retried_attempts_replay_their_summed_run_time_or_their_span(tmp_path: Path) -> None:
    attempts: list[dict[str, object]] = [
        {"start_time": "2017-10-01 00:00:00", "end_time": "2017-10-01 00:10:00", "detail": []},
        {"start_time": "2017-10-01 00:20:00", "end_time": "2017-10-01 00:30:00", "detail": []},
    ]
    attempts[0]["detail"] = [{"ip": "m1", "gpus": ["gpu0"]}]
    path = write_log(tmp_path / "log.json", [philly_job(0, attempts=attempts, status="Failed")])
    assert load_trace(path).jobs[0].duration == 1200
    assert load_trace(path, service_time="span").jobs[0].duration == 1800


def test_gzipped_log_and_broken_json(tmp_path: Path) -> None:
    gz = tmp_path / "log.json.gz"
    gz.write_bytes(gzip.compress(json.dumps([philly_job(0)]).encode()))
    assert len(load_trace(gz).jobs) == 1
    broken = tmp_path / "broken.json"
    broken.write_text('[\n{"jobid": "a",\n "vc": }\n]')
    with pytest.raises(UserError, match="line 3: broken JSON"):
        load_trace(broken)


def test_generic_csv_reports_malformed_rows_with_their_line(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(
        "submit_time,vc,user,gpus,duration,status\n"
        "0,vc1,alice,1,100,Pass\n"
        "10,vc1,bob,two,100,Pass\n"
        "2017-10-01 00:00:20,vc2,carol,4,50,Failed\n"
        "30,vc1,dave,1\n"
        "40,vc1,erin,1,-5,Killed\n"
        "50,vc1,frank,0,10,Pass\n"
    )
    trace = load_trace(path)
    assert trace.format == "generic-csv"
    assert [(j.user, j.gpus, j.duration, j.status) for j in trace.jobs] == [
        ("alice", 1, 100, "Pass"),
        ("carol", 4, 50, "Failed"),
    ]
    assert [p.line for p in trace.problems] == [3, 5, 6]
    assert "gpus 'two' is not a number" in str(trace.problems[0])
    assert trace.skipped == {"zero GPUs": 1}
    with pytest.raises(UserError, match=r"line 3: gpus 'two'.*3 malformed rows"):
        load_trace(path, strict=True)


def test_generic_csv_rows_read_by_position_as_by_name(tmp_path: Path) -> None:
    """Well-formed rows take a faster way (by column position); quirky ones the general way.
    Both must give the same jobs, skips and problems, whatever the column order."""
    rows = [
        "0,vc1,alice,1,100,Pass,j1",
        " 5 , vc2 , bob , 2.0 , 1e2 , ,",  # spaces, 2.0 GPUs, an empty status and job id
        "6,vc1,carol,1.5,10,Pass,j3",  # fractional GPUs
        "7,,dave,1,10,Pass,j4",  # no VC
        "8,vc1,erin,nan,10,Pass,j5",
        "9,vc1,frank,1,nan,Pass,j6",
        "10,vc1,gina,1,-0.0,Killed,j7",
        "11,vc1,hal,-1,10,Pass,j8",
        "2017-10-01 00:00:20,vc1,ida,4,50,Failed,j9",  # a Philly time
        "12,vc1,jo,0,10,Pass,j10",
        "14,vc1,lee,1,inf,Pass,j12",
    ]
    path = tmp_path / "trace.csv"
    path.write_text("submit_time,vc,user,gpus,duration,status,job_id\n" + "\n".join(rows) + "\n")
    fast = load_trace(path)
    # The same rows with the columns in another order and a memory column: the general way.
    cols = ["job_id", "duration", "gpus", "user", "vc", "status", "submit_time", "memory_mb"]
    other = tmp_path / "other.csv"
    lines = [",".join(cols)]
    for row in rows:
        v = dict(
            zip(
                ["submit_time", "vc", "user", "gpus", "duration", "status", "job_id"],
                row.split(","),
                strict=True,
            )
        )
        lines.append(",".join([*(v[c] for c in cols[:-1]), ""]))
    other.write_text("\n".join(lines) + "\n")
    general = load_trace(other)
    assert fast.jobs == general.jobs
    assert [str(p) for p in fast.problems] == [str(p) for p in general.problems]
    assert fast.skipped == general.skipped
    assert sorted(j.job_id for j in fast.jobs) == ["j1", "j12", "j7", "j9", "job-3"]
    assert len(fast.problems) == 5 and fast.skipped == {"zero GPUs": 1}


def test_unknown_format_says_what_is_expected(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match="generic CSV"):
        load_trace(path)


def test_synthetic_philly_json_and_its_derived_csv_agree() -> None:
    log = load_trace(SYNTHETIC / "synthetic_cluster_job_log.json.gz")
    table = load_trace(SYNTHETIC / "synthetic_jobs.csv.gz")
    assert log.format == "philly-json" and table.format == "philly-csv"
    assert len(log.jobs) == len(table.jobs) > 100_000
    assert log.skipped == table.skipped
    assert log.problems == table.problems == []
    for a, b in zip(log.jobs[:2000], table.jobs[:2000], strict=True):
        assert (a.job_id, a.submit, a.gpus, a.duration, a.vc, a.status) == (
            b.job_id,
            b.submit,
            b.gpus,
            b.duration,
            b.vc,
            b.status,
        )


def test_sample_and_limit_keep_submit_order() -> None:
    trace = load_trace(SYNTHETIC / "synthetic_jobs_sample1000.csv", limit=10)
    assert len(trace.jobs) == 10
    assert [j.submit for j in trace.jobs] == sorted(j.submit for j in trace.jobs)


def test_real_machine_lists_become_hived_clusters() -> None:
    config, note = load_sim_cluster(PHILLY / "cluster_machine_list")
    nodes = config.nodes()
    assert len(nodes) == 552 and config.total_gpus() == 2490
    assert sorted({len(n.gpus) for n in nodes}) == [2, 8]
    assert list(config.vcs) == ["default"]
    assert "321 x 2 GPU 12GB, 231 x 8 GPU 24GB" in note
    revised, note = load_sim_cluster(PHILLY / "revised_machine_list.csv")
    assert revised.total_gpus() == 3205
    assert "13 machines without GPUs left out" in note


def test_helios_vcs_share_out_the_machine_list() -> None:
    from labhive.scheduler.policies.queued import vc_gpus

    config, _ = load_sim_cluster(
        PHILLY / "cluster_machine_list", PHILLY / "philly_vc_nodes_helios.csv"
    )
    quotas = vc_gpus(config)
    assert len(quotas) == 11
    assert sum(quotas.values()) == 2490
    # 6214e9 has 64 of Helios' 352 nodes: 42.0 of the 231 8-GPU nodes and 58.4 of the 321
    # 2-GPU nodes; largest remainders round the 2-GPU share up
    assert quotas["6214e9"] == 42 * 8 + 59 * 2


def test_a_trace_jobs_spec_is_the_one_jobspec_builds() -> None:
    """``trace_job_spec`` sets a frozen spec's slots directly (for speed): it must equal, field
    for field, what ``JobSpec(...)`` builds, and each spec must get its own ``raw`` dict."""
    from dataclasses import fields

    from labhive.scheduler.core.jobs import JobSpec
    from labhive.scheduler.sim.traces import TraceJob
    from labhive.scheduler.sim.workload import _role, trace_job_spec

    tj = TraceJob("j1", 5.0, "vc1", "alice", 4, 60.0, cpu=8.0, memory_mb=4096)
    built = trace_job_spec(tj, "vc2", priority=7)
    want = JobSpec(
        name="j1", vc="vc2", priority=7, roles=(_role(4, 8.0, 4096),), duration=60.0, user="alice"
    )
    assert built == want
    assert [getattr(built, f.name) for f in fields(JobSpec)] == [
        getattr(want, f.name) for f in fields(JobSpec)
    ]
    assert built.total_gpus == 4 and hash(built) == hash(want)
    assert trace_job_spec(tj, "vc2").raw is not built.raw
