"""Given a live service whose store already holds a job the store cannot start (a task role
name with a lone surrogate, or longer than its column, stored before intake refused such
names), expect that job to fail alone, with its reason, while other users' jobs start, and its
``GET /jobs/{id}`` to answer."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from pg_throwaway import new_database, pg_ctl_postgres
from service_fixtures import live_service
from waiting import wait_until

from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.store import Store, database_url
from labhive.scheduler.service.store import transitions as tx

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
    """What an older intake accepted: the row goes into the store, bypassing today's checks
    (today's parser refuses such a spec, so the row is made by hand)."""
    new = lc.NewJob(doc["name"], "bob", "default", 10, 0, 1, 1, doc)
    store = Store(database_url(db_url, data_dir))
    store.migrate()
    try:
        with store.write() as conn:
            return tx.submit(conn, new, time.time())
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


def _health(live) -> tuple[int, dict]:
    answer = httpx.get(f"{live.url}/health", timeout=10)
    return answer.status_code, answer.json()


def test_a_database_outage_degrades_health_and_the_loop_carries_on_after_it(
    tmp_path: Path,
) -> None:
    """A real PostgreSQL stopped (``pg_ctl stop``) and started again under a running service:
    /health goes 503 "degraded" while the loop cannot pass, the job that ran through the
    outage is recorded as finished, and new jobs start once the database is back."""
    with pg_ctl_postgres() as pg, live_service(tmp_path / "data", new_database(pg.url)) as live:
        live.running.service.loop_stall_s = 1.0
        alice = live.client(ALICE)
        through = alice.submit(command="sleep 3", vc="vc1", gpus=1, name="through")
        wait_until(lambda: through.refresh().state == "RUNNING", "the job to start")
        pg.stop()
        # The job ends while the database is down: its end cannot be recorded, the loop fails
        # and backs off (an idle loop touches no database and is not stalled).
        _, body = wait_until(
            lambda: (h := _health(live))[1]["loop_failures"] >= 2 and h, "the loop to fail", 60
        )
        assert body["status"] == "degraded" and body["loop_error"] == "OperationalError"
        assert body["database"] == "error: OperationalError"
        wait_until(lambda: _health(live)[1]["loop_age_s"] > 1, "the loop to stall", 60)
        assert _health(live)[0] == 503
        pg.start()
        wait_until(lambda: _health(live)[0] == 200, "/health to recover", timeout=60)
        assert through.wait(timeout=60, poll_s=0.1).state == "SUCCEEDED"
        after = alice.submit(command="true", vc="vc1", gpus=1, name="after")
        assert after.wait(timeout=60, poll_s=0.1).state == "SUCCEEDED"
        metrics = httpx.get(f"{live.url}/metrics", timeout=10).text
        age = [ln for ln in metrics.splitlines() if ln.startswith("labhive_loop_last_pass_age")]
        assert age and float(age[0].split()[-1]) < 30
