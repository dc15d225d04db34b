"""Given the loop split by owner of state (``service/runtime/``), expect each owner to hold its
own: the actuator's workers report by message and never write into the loop's records, a stop
ordered while a launch is still in flight stops what that launch started, and the settling of
attempts decides from the loop's records alone (no store, no executor)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from local_exec_util import processes_under
from loop_helpers import job_state, loop_by_hand, submit_by_hand
from sqlalchemy import select
from waiting import wait_until

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.executors.base import TaskExit
from labhive.scheduler.service.policy_port import ServiceEvent, task_key
from labhive.scheduler.service.runtime import settle
from labhive.scheduler.service.runtime.plan import Plan
from labhive.scheduler.service.runtime.runs import Running, Runs
from labhive.scheduler.service.store import tasks
from labhive.scheduler.service.store import transitions as tx


class HeldLaunches:
    """The service's real executor, each launch held until the test lets it go (as a slow
    image pull holds it): a launch still in flight while the loop passes."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.go = threading.Event()
        self.launched = threading.Event()

    def launch(self, launches: Any) -> Any:
        assert self.go.wait(60), "the test never let the launch go"
        handles = self._inner.launch(launches)
        self.launched.set()
        return handles

    def notify(self, handles: Any, notice: Any) -> None:
        """The local executor's ``Notices`` part, declared here (not left to ``__getattr__``:
        a runtime-checkable protocol looks members up statically from Python 3.12 on)."""
        self._inner.notify(handles, notice)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _stored_handles(loop: Any, job_id: int) -> list[Any]:
    with loop.store.read() as conn:
        rows = conn.execute(select(tasks.c.handle).where(tasks.c.job_id == job_id)).all()
    return [r.handle for r in rows]


def test_a_worker_reports_its_launch_by_message_and_the_next_pass_records_it(
    tmp_path: Path,
) -> None:
    """Given a job whose launch completes between two passes, expect the loop's record of the
    attempt untouched by the worker (no handles yet, none stored) until the next pass takes
    the worker's report, and then both the record and the store to have them."""
    with loop_by_hand(tmp_path / "data") as loop:
        held = HeldLaunches(loop.executor)
        loop.executor = held
        job_id = submit_by_hand(loop, {"name": "a", "vc": "vc1", "gpus": 1, "command": "sleep 60"})
        loop.step()  # the start is recorded and its launch handed to a worker
        assert job_state(loop, job_id) == "RUNNING"
        held.go.set()
        assert held.launched.wait(30)
        wait_until(lambda: loop._actuator.busy() == 0, "the worker done", timeout=30)
        assert loop.runs.running[job_id].handles == {}  # the worker wrote nothing there
        assert _stored_handles(loop, job_id) == [None]
        loop.step()  # takes the report
        assert len(loop.runs.running[job_id].handles) == 1
        assert [h is not None for h in _stored_handles(loop, job_id)] == [True]


def test_a_stop_ordered_while_the_launch_is_in_flight_stops_what_it_started(
    tmp_path: Path,
) -> None:
    """Given a job cancelled while its launch is still held (the loop has no handle of it yet),
    expect the stop, which runs after the launch, to stop the task that launch started (taken
    from the launch's own report), and the job to end STOPPED with nothing left running."""
    data = tmp_path / "data"
    with loop_by_hand(data) as loop:
        held = HeldLaunches(loop.executor)
        loop.executor = held
        job_id = submit_by_hand(loop, {"name": "a", "vc": "vc1", "gpus": 1, "command": "sleep 60"})
        loop.step()
        with loop.store.write() as conn:
            tx.request_cancel(conn, job_id)
        loop.cancel(job_id)
        loop.step()  # the stop is ordered behind the launch still in flight
        assert loop.runs.reserved.draining[job_id].run.handles == {}
        held.go.set()
        assert held.launched.wait(30)

        def stopped() -> bool:
            loop.step()
            return job_state(loop, job_id) == "STOPPED"

        wait_until(stopped, "the job stopped", timeout=30)
        deadline = time.monotonic() + 10
        while processes_under(data) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_under(data) == []


def test_a_failed_task_of_a_gang_drains_the_rest_and_spends_a_retry_from_the_record() -> None:
    """Given a two-task gang attempt (one retry, none used) whose task 1 exits 1, expect the
    pure settling to reserve the attempt's GPUs, order a stop of task 0 only, and settle the
    job WAITING with a retry spent, reading no store."""
    spec = parse_job({"name": "g", "vc": "vc1", "tasks": 2, "gpus": 1, "retries": 1})
    runs = Runs()
    run = Running(attempt=1, retries=1, retries_used=0, gpus={("n0", 0), ("n0", 1)})
    keys = [task_key(7, 1, "main", i) for i in (0, 1)]
    run.task_ids = {keys[0]: 70, keys[1]: 71}
    runs.running[7], runs.specs[7] = run, spec
    plan, events = Plan(), list[ServiceEvent]()
    settle.settle_exits(runs, [TaskExit(keys[1], 1, "exit code 1")], plan, events, 5.0, 2.0)
    assert plan.ended_tasks == [(71, 1)] and events == []  # the policy hears once 0 is gone
    drain = runs.reserved.draining[7]
    assert drain.gpus == {("n0", 0), ("n0", 1)} and 7 not in runs.running
    assert (drain.settle.state, drain.settle.spend_retry) == ("WAITING", True)
    assert [(o.job_id, o.only) for o in plan.stops] == [(7, frozenset({keys[0]}))]
    assert plan.failed_exits == [(7, TaskExit(keys[1], 1, "exit code 1"))]
