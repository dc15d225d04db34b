"""Driving a ``SchedulerLoop`` by hand in tests: submit a job as the intake would, read a
job's state from the store."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.loop import SchedulerLoop
from labhive.scheduler.service.server import ServeOptions, build
from labhive.scheduler.service.store import queries
from labhive.scheduler.service.store import transitions as tx


@contextmanager
def loop_by_hand(data_dir: Path) -> Iterator[SchedulerLoop]:
    """A service's loop (HiveD, local processes), recovered, its intake closed: the test
    submits by hand and runs each pass (``step``)."""
    running = build(ServeOptions(data_dir=data_dir, grace_s=1))
    running.service.intake.close()
    loop = running.service.loop
    loop.recover()
    yield loop
    loop.stop(stop_tasks=True)
    loop.store.dispose()


def submit_by_hand(loop: SchedulerLoop, doc: dict, *, admitted: bool = False) -> int:
    """Store a job for user ann and tell the loop, as the intake does; its id. ``admitted``:
    as a job ``Service.admit`` checked (the loop's policy does not check it again)."""
    spec = parse_job(doc)
    new = lc.NewJob(spec.name, "ann", spec.vc, spec.priority, spec.retries, spec.task_count,
                    spec.total_gpus, doc)  # fmt: skip
    with loop.store.write() as conn:
        job_id = tx.submit(conn, new, time.time())
    if admitted:
        loop.submitted_many([(job_id, spec)])
    else:
        loop.submitted(job_id, spec)
    return job_id


def job_state(loop: SchedulerLoop, job_id: int) -> str:
    with loop.store.read() as conn:
        row = queries.job(conn, job_id)
    assert row is not None
    return str(row["state"])
