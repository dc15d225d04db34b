"""The simulator keeps a job's record on its ``SimJob`` only, and serves ``records`` from
``sim_jobs`` (``engine.Records``): no second dict with an entry a job. Given random workloads
with scripted resubmissions of ended jobs (same id, a new record), cancellations and a job
the cluster refuses, under policies that decide once an instant (FIFO, DRF) and one that
decides as each event comes, inside the job's admission (HiveD), jobs kept or forgotten once
done, expect ``records``
after every event to be, item for item and in order, the dict the replayer keeps (a record
set at each admission, before the policy is fed; dropped with the job), and every job's
figures, the summary and the decisions to be those of a simulator that keeps that dict."""

from __future__ import annotations

import functools
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sim_helpers import cluster, job
from test_properties import PROPERTY_SETTINGS
from test_sim_apply import cancel, resubmit, workload

from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.drivers.lifecycle import JobRecord
from labhive.scheduler.drivers.replay import Holder, VirtualTimeDriver
from labhive.scheduler.policies import get_policy
from labhive.scheduler.sim.engine import SimJob, Simulation
from labhive.scheduler.sim.metrics import summarize


class DictKept(Simulation):
    """The reference, the replayer's way: each record in a dict of its own, set before the
    policy is fed (the replayer's ``_admit``), given to the job after; decisions find their
    record there (the replayer's ``apply``); a forgotten job's record dropped from it."""

    apply = VirtualTimeDriver.apply

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.records = {}

    def _admit(self, job_id: str, spec: JobSpec, holder: Holder | None = None) -> JobRecord:
        record = super()._admit(job_id, spec)  # (into ``records``)
        if holder is not None:
            holder.record = record
        return record

    def _done(self, job: SimJob) -> None:
        super()._done(job)
        if not self.keep_jobs:
            self.records.pop(job.job_id, None)


def cancel_kept(sim: Simulation, job: SimJob) -> str | None:
    """``cancel`` of a job not forgotten (the replayer's ``cancel`` of one forgotten fails)."""
    return cancel(sim, job) if job.job_id in sim.records else None


def run(kind: type[Simulation], policy: str, seed: int, keep_jobs: bool) -> tuple[object, ...]:
    """Every job's figures, the summary, and ``records`` (each id and record) after every
    event, of a random workload with scripted resubmissions and cancellations."""
    rng = random.Random(seed)
    config = cluster([8, 8])
    jobs = workload(rng)
    if rng.random() < 0.5:  # one the cluster refuses (its record is a rejection's)
        jobs.append(job("huge", jobs[-1].submit, 32, 5.0))
    seen: list[str] = []

    def observe(sim: Simulation, label: str) -> None:
        seen.append(f"{label}: {list(sim.records.items())!r} {len(sim.records)}")

    sim = kind(
        get_policy(policy, config),
        jobs,
        total_gpus=config.total_gpus(),
        observe=observe,
        keep_jobs=keep_jobs,
    )
    for _ in range(rng.randint(1, 6)):
        again = rng.choice(jobs)
        at = again.submit + rng.uniform(0.0, 120.0)
        if rng.random() < 0.7:
            sim.at(at, functools.partial(resubmit, sim, again, rng.choice([3.0, 20.0])))
        else:
            sim.at(at, functools.partial(cancel_kept, sim, again))
    result = sim.run()
    return [repr(j) for j in result.jobs], repr(summarize(result)), seen, sim.decisions


@pytest.mark.sources
@PROPERTY_SETTINGS
@given(st.sampled_from(["fifo", "drf", "hived"]), st.integers(0, 10_000), st.booleans())
def test_records_are_the_replayers_dict(policy: str, seed: int, keep_jobs: bool) -> None:
    assert run(Simulation, policy, seed, keep_jobs) == run(DictKept, policy, seed, keep_jobs)


def test_records_reads_and_writes_the_job() -> None:
    """Given one job, expect ``records`` to reach and change its ``SimJob``'s record, and a
    job unknown or without a record yet to be no key."""
    config = cluster([8])
    sim = Simulation(get_policy("fifo", config), [], total_gpus=8)
    spec = JobSpec("a", "default", 100, ())
    with pytest.raises(KeyError):
        sim.records["a"]
    sim.sim_jobs["a"] = job = SimJob("a", spec, 0.0, 1.0)
    assert "a" not in sim.records and sim.records.get("a") is None and len(sim.records) == 0
    record = JobRecord("a", spec, 0.0)
    sim.records["a"] = record
    assert job.record is record and sim.records["a"] is record and list(sim.records) == ["a"]
    del sim.records["a"]
    assert job.record is None and dict(sim.records) == {}
