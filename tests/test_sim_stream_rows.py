"""A streamed trace reaches the simulator as rows, not ``TraceJob``s: a generic CSV's common
row is made as its ``trace_row`` tuple (``iter_trace(rows=True)``, ``JobStream.rows``), and
``iter_sim_jobs`` reads every job, streamed or listed, as that tuple. Given a generic CSV
(columns in any order, with or without ``job_id`` and ``status``; good, padded, empty and bad
values; ids repeated), a cluster of one VC or of two, sampled or not, expect the same
``SimJob``s, in order, and the same counts left out, as the plain loop over the
``TraceJob``s read from the file the general way (each field read from the job, as before)."""

from __future__ import annotations

import random
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sim_helpers import cluster
from test_properties import PROPERTY_SETTINGS
from test_trace_csv_fast_rows import generic_csv, write_csv

from labhive.scheduler.core.config import ClusterConfig
from labhive.scheduler.core.jobs import PRIORITY_CLASSES
from labhive.scheduler.sim import traces
from labhive.scheduler.sim.engine import SimJob, trace_sim_job
from labhive.scheduler.sim.traces import JobStream, TraceJob, iter_trace
from labhive.scheduler.sim.workload import _gang_spec, _roles, iter_sim_jobs

PRIORITY = PRIORITY_CLASSES["prod"]


def plain_sim_jobs(
    trace_jobs: list[TraceJob], config: ClusterConfig, left_out: Counter[str], sample: float | None
) -> list[SimJob]:
    """The reference: each job's fields read from its ``TraceJob`` (the loop as it was)."""
    known = config.vcs
    single = sorted(known)[0] if len(known) == 1 else None
    rng = random.Random(0)
    seen: set[str] = set()
    out = []
    for tj in trace_jobs:
        if sample is not None and rng.random() >= sample:
            left_out["not sampled"] += 1
            continue
        vc = single or tj.vc
        if vc not in known:
            left_out["VC not in the cluster"] += 1
            continue
        job_id = tj.job_id
        if job_id in seen:
            job_id = f"{job_id}@{tj.line}"
        seen.add(job_id)
        roles = _roles(tj.gpus, tj.cpu, tj.memory_mb)
        spec = _gang_spec(tj.job_id, vc, PRIORITY, roles, tj.duration, tj.user)
        out.append(
            trace_sim_job(job_id, spec, tj.submit, tj.duration, tj.vc, tj.user, tj.status, tj.gpus)
        )
    return out


@PROPERTY_SETTINGS
@given(
    csv_file=generic_csv(),
    two_vcs=st.booleans(),
    sample=st.sampled_from([None, 0.5]),
    ids=st.lists(st.sampled_from(["a", "b", "job-2"]), max_size=30),
)
def test_streamed_rows_make_the_jobs_the_trace_jobs_make(
    csv_file: tuple[list[str], list[list[str]]],
    two_vcs: bool,
    sample: float | None,
    ids: list[str],
) -> None:
    header, rows = csv_file
    if "job_id" in header:  # some ids repeated (renamed ``id@line`` by the simulator)
        at = header.index("job_id")
        for row, job_id in zip(rows, ids, strict=False):
            row[at] = job_id
    config = cluster([8, 8], {"a": 1, "vc1": 1} if two_vcs else None)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.csv"
        write_csv(path, header, rows)
        want_left: Counter[str] = Counter()
        with pytest.MonkeyPatch.context() as patch:  # every row the general way
            patch.setattr(traces, "_generic_fast", lambda fields: lambda values, line: None)
            trace_jobs = list(iter_trace(path, "generic-csv"))
        want = plain_sim_jobs(trace_jobs, config, want_left, sample)
        for jobs in (JobStream(path, "generic-csv", "run", 10**6), list(iter_trace(path))):
            left: Counter[str] = Counter()
            got = list(iter_sim_jobs(jobs, config, left, sample=sample))
            assert repr(got) == repr(want)  # (by repr: a NaN submit time)
            assert left == want_left
