"""The store's named read queries: given these stored jobs, each query returns these rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.store import Store, database_url
from labhive.scheduler.service.store import queries as q
from labhive.scheduler.service.store import transitions as tx


def _job(name: str, owner: int, user: str, vc: str = "a") -> lc.NewJob:
    return lc.NewJob(
        name=name,
        user=user,
        vc=vc,
        priority=1,
        retries=0,
        task_count=1,
        gpus=1,
        spec={"name": name},
        owner_id=owner,
    )


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """Three waiting jobs: ann's (VC a), bob's (VC b), ann's (VC b), ids 1..3."""
    store = Store(database_url(None, tmp_path))
    store.migrate()
    with store.write() as conn:
        tx.submit_many(
            conn, [_job("j1", 1, "ann"), _job("j2", 2, "bob", "b"), _job("j3", 1, "ann", "b")], 5.0
        )
    return store


def test_job_reads_one_row_or_none(store: Store) -> None:
    with store.read() as conn:
        row = q.job(conn, 2)
        missing = q.job(conn, 99)
    assert row is not None and (row["name"], row["user"], row["owner_id"]) == ("j2", "bob", 2)
    assert (row["state"], row["attempt"], row["submitted_at"]) == (lc.WAITING, 1, 5.0)
    assert missing is None


def test_job_list_filters_newest_first(store: Store) -> None:
    def names(want: q.JobFilter) -> list[str]:
        with store.read() as conn:
            return [r["name"] for r in q.job_list(conn, want)]

    assert names(q.JobFilter()) == ["j3", "j2", "j1"]
    assert names(q.JobFilter(owner_only=True, owner_id=1)) == ["j3", "j1"]
    # a user's list ignores the name filter: only the owner id decides
    assert names(q.JobFilter(owner_only=True, owner_id=2, user="ann")) == ["j2"]
    assert names(q.JobFilter(user="ann", vc="b")) == ["j3"]
    assert names(q.JobFilter(state=lc.RUNNING)) == []
    assert names(q.JobFilter(limit=1, offset=1)) == ["j2"]


def test_events_tasks_and_active_job_ids(store: Store) -> None:
    with store.read() as conn:
        events = q.job_events(conn, 1)
        assert [(e["from_state"], e["to_state"], e["attempt"]) for e in events] == [
            (None, lc.WAITING, 1)
        ]
        assert q.attempt_tasks(conn, 1, 1) == [] and q.job_tasks(conn, 1) == []
        assert q.last_attempt(conn, 1) is None
        assert q.active_job_ids(conn, 1) == {1, 3}
        assert q.active_job_ids(conn, 7) == set()


def test_a_queue_page_holds_the_callers_jobs_and_counts_the_others(store: Store) -> None:
    """Given ann's j1 (VC a) and j3 (VC b) and bob's j2 (VC b): ann's page holds her two, an
    admin's (no owner) all three, a page is cut where asked, and bob's jobs reach ann only as
    counts per VC."""
    with store.read() as conn:
        rows, total = q.queue_page(conn, q.QueueFilter(owner_id=1))
        assert ([r["name"] for r in rows], total) == (["j1", "j3"], 2)
        rows, total = q.queue_page(conn, q.QueueFilter(owner_id=None, limit=2, offset=1))
        assert ([r["name"] for r in rows], total) == (["j2", "j3"], 3)
        rows, total = q.queue_page(conn, q.QueueFilter(owner_id=1, vc="b"))
        assert ([r["name"] for r in rows], total) == (["j3"], 1)
        assert rows[0] == {
            "id": 3, "user": "ann", "owner_id": 1, "name": "j3", "gpus": 1, "task_count": 1
        }  # fmt: skip
        assert q.waiting_by_vc(conn, 1) == {"a": 1, "b": 1}
        assert q.waiting_by_vc(conn, 2) == {"b": 1}
        assert q.others_running(conn, 1, None) == []  # nothing runs yet
    with store.write() as conn:  # bob's j2 starts (no tasks: the counts read the job's row)
        row = q.job(conn, 2)
        assert row is not None
        tx.start(conn, row, [], opportunistic=False, t=6.0)
    with store.read() as conn:
        assert q.others_running(conn, 1, None) == [{"vc": "b", "jobs": 1, "gpus": 1}]
        assert q.others_running(conn, 1, "a") == [] and q.others_running(conn, 2, None) == []
        assert q.waiting_by_vc(conn, 2) == {}
        rows, total = q.queue_page(conn, q.QueueFilter(owner_id=None))
        assert ([r["name"] for r in rows], total) == (["j2", "j1", "j3"], 3)  # running first
