"""An attempt's end on a job record (``lifecycle.end_attempt``) and the simulator's question
whether a failed run is retried (``Simulation._end_run``) take the common cases without calls:
a success is SUCCEEDED, a failure of a job allowed no retries is ``attempts.FAILED``, and a run
is retried while ``spec.retries > retries_used``. Given jobs allowed 0-3 retries that have used
some, ending well or not, expect the record, the event for the policy and the retry answer to
be those of the plain rule (``attempts.attempt_end`` and ``JobRecord.retries_left``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sim_helpers import cluster, simulate
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.core.jobs import JobSpec, RoleSpec
from labhive.scheduler.core.model import Finish, Requeue
from labhive.scheduler.core.states import JobState
from labhive.scheduler.drivers import attempts
from labhive.scheduler.drivers.lifecycle import JobRecord, end_attempt
from labhive.scheduler.sim.engine import SimJob
from labhive.scheduler.sim.traces import TraceJob
from labhive.scheduler.sim.workload import trace_job_spec


def plain_end_attempt(record: JobRecord, ok: bool, now: float) -> Finish | Requeue:
    """The reference: every end asks ``attempts.attempt_end``."""
    record.generation += 1
    record.tasks = ()
    record.stopped.clear()
    record.started = None
    retries, used = record.spec.retries, record.retries_used
    end = attempts.attempt_end("succeeded" if ok else "failed", retries, used)
    record.state, record.reason = end.state, end.text
    if end.requeued:
        record.attempt += 1
        record.retries_used += end.spend_retry
        return Requeue(record.job_id, now)
    record.ended = now
    return Finish(record.job_id, now)


def running(retries: int, used: int) -> JobRecord:
    spec = JobSpec("j", "vc", 100, (RoleSpec("worker", instances=2, gpu=1),), retries=retries)
    stopped = {("worker", 1): "stopped: drained"}
    return JobRecord(
        "j", spec, 0.0, state=JobState.RUNNING, retries_used=used, started=5.0, stopped=stopped
    )


@PROPERTY_SETTINGS
@given(
    retries=st.integers(0, 3),
    used=st.integers(0, 4),
    ok=st.booleans(),
    now=st.floats(0.0, 1e9),
)
def test_an_attempts_end_is_the_plain_rules(retries: int, used: int, ok: bool, now: float) -> None:
    fast, plain = running(retries, used), running(retries, used)
    assert end_attempt(fast, ok, now) == plain_end_attempt(plain, ok, now)
    assert repr(fast) == repr(plain)


@PROPERTY_SETTINGS
@given(retries=st.integers(0, 3), gpus=st.sampled_from([1, 2, 4]), duration=st.floats(1.0, 1e4))
def test_a_job_failing_every_run_runs_once_more_per_retry(
    retries: int, gpus: int, duration: float
) -> None:
    """Given one 4-GPU node and a trace job that fails every run, allowed ``retries``, expect
    ``retries + 1`` runs back to back, then FAILED, its figures those of that many runs."""
    tj = TraceJob("j", 10.0, "default", "ann", gpus, duration, "Failed")
    spec = replace(trace_job_spec(tj, "default"), retries=retries)
    sim_job = SimJob("j", spec, 10.0, duration, status="Failed")
    done = simulate("fifo", cluster([4]), [sim_job])["j"]
    assert done.record is not None and done.record.state == JobState.FAILED
    assert (done.attempts, done.record.retries_used) == (retries + 1, retries)
    end = 10.0
    for _ in range(retries + 1):
        end += duration
    assert (done.first_start, done.end) == (10.0, end)
    assert done.run_seconds == pytest.approx((retries + 1) * duration)
