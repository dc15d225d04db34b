"""Driving a ``SchedulerLoop`` by hand in tests: submit a job as the intake would, read a
job's state from the store."""

from __future__ import annotations

import time

from labhive.scheduler.jobs import parse_job
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.loop import SchedulerLoop
from labhive.scheduler.service.store import job_row


def submit_by_hand(loop: SchedulerLoop, doc: dict) -> int:
    """Store a job for user ann and tell the loop, as the intake does; its id."""
    spec = parse_job(doc)
    new = lc.NewJob(spec.name, "ann", spec.vc, spec.priority, spec.retries, spec.task_count,
                    spec.total_gpus, doc)  # fmt: skip
    with loop.store.write() as conn:
        job_id = lc.submit(conn, new, time.time())
    loop.submitted(job_id, spec)
    return job_id


def job_state(loop: SchedulerLoop, job_id: int) -> str:
    with loop.store.read() as conn:
        row = job_row(conn, job_id)
    assert row is not None
    return str(row["state"])
