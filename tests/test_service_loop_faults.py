"""Given a live service whose store already holds a job the store cannot start (a task role
name with a lone surrogate, or longer than its column, stored before intake refused such
names), expect that job to fail alone, with its reason, while other users' jobs start, and its
``GET /jobs/{id}`` to answer."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from service_fixtures import live_service
from waiting import wait_until

from labhive.scheduler.jobs import parse_job
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.store import Store, database_url

pytest_plugins = ["service_fixtures"]

ALICE, BOB = "alice-token-123", "bob-token-4567"


def _poison(role: str) -> dict:
    return {
        "protocolVersion": 2,
        "name": "poison",
        "defaults": {"virtualCluster": "default"},
        "taskRoles": {
            role: {
                "instances": 1,
                "resourcePerInstance": {"gpu": 1, "cpu": 1, "memoryMB": 512},
                "commands": ["sleep 1"],
            }
        },
    }


def _store_directly(db_url: str, data_dir: Path, doc: dict) -> int:
    """What an older intake accepted: the row goes into the store, bypassing today's checks."""
    spec = parse_job(doc)
    new = lc.NewJob(spec.name, "bob", spec.vc, spec.priority, spec.retries, spec.task_count,
                    spec.total_gpus, doc)  # fmt: skip
    store = Store(database_url(db_url, data_dir))
    store.migrate()
    try:
        with store.write() as conn:
            return lc.submit(conn, new, time.time())
    finally:
        store.dispose()


@pytest.mark.parametrize("role", ["w\ud800", "r" * 129], ids=["surrogate", "129-chars"])
def test_a_job_whose_start_cannot_be_stored_fails_alone(
    db_url: str, tmp_path: Path, role: str
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    bad = _store_directly(db_url, data, _poison(role))
    with live_service(data, db_url) as live:
        alice = live.client(ALICE).submit(command="true", vc="vc1", gpus=1, name="a")
        bob = live.client(BOB).submit(command="true", vc="default", gpus=1, name="b")
        for job in (alice, bob):
            assert job.wait(timeout=60, poll_s=0.05).state == "SUCCEEDED"
        answer = httpx.get(
            f"{live.url}/jobs/{bad}", headers={"Authorization": f"Bearer {live.admin}"}
        )
        assert answer.status_code == 200, answer.text
        shown = answer.json()
        if shown["state"] == "FAILED":  # SQLite holds a 129-character name: that one just runs
            assert shown["reason"] in ("unstorable", "rejected")
            assert "submit" in shown["why"]
        else:
            wait_until(lambda: live.client().job(bad).state == "SUCCEEDED", "the long name")
        assert live.client().health()["status"] == "ok"
