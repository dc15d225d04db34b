"""Given the job store on SQLite and on a real PostgreSQL server, expect the lifecycle to hold:
legal moves recorded as events, illegal ones refused, GPUs never allocated twice, and readers
never seeing half of a transition."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from labhive.scheduler.core.model import TaskPlacement
from labhive.scheduler.drivers import attempts
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.store import (
    HEAD_REVISION,
    MIGRATIONS,
    Store,
    allocations,
    events,
    jobs,
    queries,
)
from labhive.scheduler.service.store import transitions as tx

pytest_plugins = ["service_fixtures"]


def _new(store: Store, retries: int = 0, name: str = "a") -> int:
    job = lc.NewJob(name, "alice", "vc1", 10, retries, 1, 2, {"name": name, "gpus": 2})
    with store.write() as conn:
        return tx.submit(conn, job, 1.0)


def _row(store: Store, job_id: int) -> queries.JobRow:
    with store.read() as conn:
        row = queries.job(conn, job_id)
    assert row is not None
    return row


def _start(store: Store, job_id: int, node: str = "n1", gpus: tuple[int, ...] = (0, 1)) -> None:
    with store.write() as conn:
        tx.start(conn, _row(store, job_id), [TaskPlacement("main", 0, node, gpus)], False, 2.0)


def _history(store: Store, job_id: int) -> list[tuple]:
    with store.read() as conn:
        rows = conn.execute(
            select(events.c.from_state, events.c.to_state, events.c.attempt, events.c.reason)
            .where(events.c.job_id == job_id)
            .order_by(events.c.id)
        ).all()
    return [tuple(r) for r in rows]


def test_migrations_reach_the_head_the_store_expects(store: Store) -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(cfg).get_current_head() == HEAD_REVISION
    assert store.revision() == HEAD_REVISION
    store.migrate()  # idempotent


def test_a_job_runs_and_succeeds_with_every_step_an_event(store: Store) -> None:
    job_id = _new(store)
    _start(store, job_id)
    with store.read() as conn:
        assert conn.execute(select(func.count()).select_from(allocations)).scalar() == 2
    with store.write() as conn:
        tx.end_attempt(conn, _row(store, job_id), lc.SUCCEEDED, "succeeded", None, 3.0)
    row = _row(store, job_id)
    assert (row["state"], row["attempt"], row["finished_at"]) == ("SUCCEEDED", 1, 3.0)
    with store.read() as conn:
        assert conn.execute(select(func.count()).select_from(allocations)).scalar() == 0
    assert _history(store, job_id) == [
        (None, "WAITING", 1, "submitted"),
        ("WAITING", "RUNNING", 1, "started"),
        ("RUNNING", "SUCCEEDED", 1, "succeeded"),
    ]


def test_failures_spend_retries_and_preemption_does_not(store: Store) -> None:
    job_id = _new(store, retries=1)
    _start(store, job_id)
    with store.write() as conn:  # preempted: new attempt, no retry spent
        tx.end_attempt(conn, _row(store, job_id), lc.WAITING, "preempted", "by job 9", 3.0)
    assert (_row(store, job_id)["attempt"], _row(store, job_id)["retries_used"]) == (2, 0)
    _start(store, job_id)
    row = _row(store, job_id)
    end = attempts.after_failure(row["retries"], row["retries_used"])
    assert (end.state, end.spend_retry) == (lc.WAITING, True)
    with store.write() as conn:
        tx.end_attempt(conn, row, end.state, end.reason, "exit 3", 4.0, spend_retry=end.spend_retry)
    assert (_row(store, job_id)["attempt"], _row(store, job_id)["retries_used"]) == (3, 1)
    _start(store, job_id)
    row = _row(store, job_id)
    assert attempts.after_failure(row["retries"], row["retries_used"]).state == lc.FAILED
    with store.write() as conn:
        tx.end_attempt(conn, _row(store, job_id), lc.FAILED, "failed", "exit 3", 5.0, exit_code=3)
    row = _row(store, job_id)
    assert (row["state"], row["exit_code"]) == ("FAILED", 3)
    assert [h[1] for h in _history(store, job_id)] == [
        "WAITING", "RUNNING", "WAITING", "RUNNING", "WAITING", "RUNNING", "FAILED",
    ]  # fmt: skip


def test_illegal_and_stale_transitions_are_refused_and_change_nothing(store: Store) -> None:
    job_id = _new(store)
    with store.write() as conn:
        tx.stop_waiting(conn, _row(store, job_id), "cancelled", 2.0)
    for target in (lc.RUNNING, lc.WAITING, lc.SUCCEEDED):
        with pytest.raises(lc.IllegalTransition), store.write() as conn:
            tx.transition(conn, _row(store, job_id), target, "x", None, 3.0)
    with pytest.raises(lc.IllegalTransition, match="already ended"), store.write() as conn:
        tx.request_cancel(conn, job_id)
    other = _new(store, name="b")
    stale = _row(store, other)
    _start(store, other)
    with pytest.raises(lc.StaleState), store.write() as conn:
        tx.stop_waiting(conn, stale, "cancelled", 3.0)
    assert _row(store, other)["state"] == "RUNNING"
    assert len(_history(store, other)) == 2


def test_a_gpu_is_never_allocated_twice(store: Store) -> None:
    first, second = _new(store), _new(store, name="b")
    _start(store, first, gpus=(0, 1))
    with pytest.raises(IntegrityError):
        _start(store, second, gpus=(1, 2))
    row = _row(store, second)  # the whole transaction rolled back: no state change, no event
    assert row["state"] == "WAITING"
    assert len(_history(store, second)) == 1
    with store.read() as conn:
        owners = conn.execute(select(allocations.c.gpu, allocations.c.job_id)).all()
    assert sorted(owners) == [(0, first), (1, first)]


def test_readers_never_see_half_a_transition(store: Store) -> None:
    """One writer moves jobs WAITING <-> RUNNING; readers check in one read transaction that
    a job's state, its allocations and its last event always agree."""
    ids = [_new(store, name=f"j{i}") for i in range(4)]
    stop = threading.Event()
    problems: list[str] = []

    def writer() -> None:
        for round_ in range(15):
            for i, job_id in enumerate(ids):
                _start(store, job_id, node=f"n{i}", gpus=(0, 1))
            for job_id in ids:
                with store.write() as conn:
                    tx.end_attempt(conn, _row(store, job_id), lc.WAITING, "preempted", None, round_)
        stop.set()

    def reader() -> None:
        while not stop.is_set():
            with store.read() as conn:
                states = dict(conn.execute(select(jobs.c.id, jobs.c.state)).all())
                held: dict[int, int] = dict(
                    conn.execute(
                        select(allocations.c.job_id, func.count()).group_by(allocations.c.job_id)
                    ).all()
                )
                last = dict(
                    conn.execute(
                        select(events.c.job_id, events.c.to_state).where(
                            events.c.id.in_(select(func.max(events.c.id)).group_by(events.c.job_id))
                        )
                    ).all()
                )
            for job_id, state in states.items():
                expected = 2 if state == "RUNNING" else 0
                if held.get(job_id, 0) != expected or last[job_id] != state:
                    problems.append(
                        f"job {job_id}: {state}, {held.get(job_id)} GPUs, {last[job_id]}"
                    )

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert problems == []


def test_database_url_forms(tmp_path: Path) -> None:
    from labhive.scheduler.core.errors import UserError
    from labhive.scheduler.service.store import database_url

    assert database_url(None, tmp_path) == f"sqlite:///{tmp_path / 'labhive.db'}"
    assert database_url("postgresql://u@h/db", tmp_path) == "postgresql+psycopg://u@h/db"
    with pytest.raises(UserError, match="unsupported --db"):
        database_url("mysql://x", tmp_path)
