"""Given a task stopped alone and started again within its attempt (HiveD's per-task
preemption), expect each run to be its own generation: its own row in the store (SQLite and
PostgreSQL), its own directory and process, and its own exit, so the old process's exit never
counts against the restart."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from local_exec_util import task, wait_exits
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from labhive.scheduler.core.model import TaskPlacement
from labhive.scheduler.executors.base import TaskKey
from labhive.scheduler.executors.local import LocalExecutor, task_dir
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.runtime.runs import Running as _Running
from labhive.scheduler.service.runtime.runs import current_key as _current_key
from labhive.scheduler.service.runtime.runs import next_key as _next_key
from labhive.scheduler.service.store import Store, queries, tasks
from labhive.scheduler.service.store import transitions as tx

pytest_plugins = ["service_fixtures"]


def _running_job(store: Store) -> queries.JobRow:
    spec = {"name": "inc", "gpus": 1}
    job = lc.NewJob("inc", "alice", "vc1", 10, 0, 1, 1, spec)
    with store.write() as conn:
        job_id = tx.submit(conn, job, 1.0)
        row = queries.job(conn, job_id)
        assert row is not None
        tx.start(conn, row, [TaskPlacement("w", 0, "n1", (0,))], False, 2.0)
        started = queries.job(conn, job_id)
        assert started is not None
        return started


def test_a_restarted_task_is_a_new_row_of_the_next_generation(store: Store) -> None:
    job = _running_job(store)
    with store.write() as conn:
        conn.execute(tasks.update().where(tasks.c.job_id == job["id"]).values(state="ENDED"))
        tx.start(conn, job, [TaskPlacement("w", 0, "n1", (1,))], False, 3.0, [2])
    with store.read() as conn:
        rows = conn.execute(
            select(tasks.c.attempt, tasks.c.generation, tasks.c.state).order_by(tasks.c.id)
        ).all()
    assert [tuple(r) for r in rows] == [(1, 1, "ENDED"), (1, 2, "RUNNING")]


def test_the_same_generation_twice_is_refused(store: Store) -> None:
    job = _running_job(store)
    with pytest.raises(IntegrityError), store.write() as conn:
        tx.start(conn, job, [TaskPlacement("w", 0, "n1", (1,))], False, 3.0, [1])


def test_the_loop_keys_a_restart_one_generation_past_the_newest() -> None:
    run = _Running(attempt=2)
    first = _next_key(run, 7, "w", 0)
    assert first == TaskKey("7", 2, "w", 0, 1)
    run.task_ids[first] = 11
    second = _next_key(run, 7, "w", 0)
    assert second == TaskKey("7", 2, "w", 0, 2)
    run.task_ids[second] = 12
    assert _current_key(run, TaskKey("7", 2, "w", 0)) == second
    assert _current_key(run, TaskKey("7", 2, "w", 1)) == TaskKey("7", 2, "w", 1)


def test_two_generations_of_a_task_run_apart_and_exit_under_their_own_keys(
    tmp_path: Path,
) -> None:
    ex = LocalExecutor(tmp_path, grace_s=2.0)
    old = task("9", "sleep 30")
    new = dataclasses.replace(old, key=dataclasses.replace(old.key, generation=2), command="exit 3")
    assert task_dir(tmp_path, old.key) != task_dir(tmp_path, new.key)
    (old_handle,) = ex.launch([old])
    (new_handle,) = ex.launch([new])
    assert old_handle.info["pid"] != new_handle.info["pid"]
    exits = wait_exits(ex, 1)
    assert list(exits) == [new.key] and exits[new.key].exit_code == 3
    ex.stop([old_handle], 2.0)  # the old generation goes; nothing is reported for the new
    assert [e.key for e in ex.poll()] in ([], [old.key])
