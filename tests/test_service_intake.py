"""Given a live service and submissions the store cannot hold, expect each to fail alone with
its own 4xx (never another user's submission, never a 5xx), and no answer to carry SQL,
parameters or exception text. Both backends where the finding was on both (issue 16)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import sqlite3
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import select
from waiting import wait_until

from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.intake import Unstorable
from labhive.scheduler.service.store import jobs

pytest_plugins = ["service_fixtures"]

ALICE, BOB = "alice-token-123", "bob-token-4567"
#: What an answer must never show: SQL, bound parameters, driver or exception names.
LEAKS = ("INSERT", "SELECT", "[SQL", "parameters", "psycopg", "sqlite3", "Traceback", "Error:")


def openpai(role: str = "worker", **res: object) -> dict:
    instances = res.pop("instances", 1)
    return {
        "protocolVersion": 2,
        "name": "poison",
        "defaults": {"virtualCluster": "default"},
        "taskRoles": {
            role: {
                "instances": instances,
                "resourcePerInstance": {"gpu": 1, "cpu": 1, "memoryMB": 1024, **res},
                "commands": ["sleep 60"],
            }
        },
    }


#: Issue 16's poison submissions: each was stored (201) or made its batch fail (503) or
#: answered 500.
POISON = [
    openpai("w\ud800"),
    openpai("r" * 129),
    {"name": "ok", "vc": "default", "retries": None, "command": "true"},
    openpai(instances=10**30),
    openpai(cpu=math.nan),
    openpai(cpu=math.inf),
    {"name": "nul\x00name", "vc": "default", "command": "true"},
    {"name": "g", "vc": "default", "gpus": None, "command": "true"},
    {"name": "t", "vc": "default", "tasks": None, "command": "true"},
    {"name": "m", "vc": "default", "memory_mb": None, "command": "true"},
    {**openpai(), "prerequisites": 5},
]


def post(url: str, token: str, doc: object) -> httpx.Response:
    """POST a job as raw JSON (httpx's own encoder refuses NaN and lone surrogates)."""
    body = json.dumps(doc).encode()  # ensure_ascii: surrogates travel as \\ud800 escapes
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    return httpx.post(f"{url}/jobs", content=body, headers=headers, timeout=60)


@pytest.mark.parametrize("doc", POISON, ids=lambda d: repr(d)[:60])
def test_each_poison_submission_gets_its_own_4xx(live_sqlite, doc) -> None:
    answer = post(live_sqlite.url, BOB, doc)
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert not any(leak in detail for leak in LEAKS), detail
    with live_sqlite.running.service.store.read() as conn:
        assert conn.execute(select(jobs.c.id)).first() is None


def test_valid_submissions_survive_interleaved_poison(live) -> None:
    """One user's stream of valid jobs with another's poison between them: every valid one is
    stored (201), every bad one gets its own 4xx, on both backends."""
    good = [
        {"name": f"good-{i}", "vc": "vc1", "gpus": 0, "command": "true", "cpu": 0.1}
        for i in range(60)
    ]
    work = [(ALICE, g) for g in good]
    for i, bad in enumerate(POISON * 2):
        work.insert(i * 5 + 1, (BOB, bad))
    with ThreadPoolExecutor(max_workers=12) as pool:
        answers = list(pool.map(lambda tw: post(live.url, *tw), work))
    for (token, doc), answer in zip(work, answers, strict=True):
        if token == ALICE:
            assert answer.status_code == 201, answer.text
        else:
            assert 400 <= answer.status_code < 500, (doc, answer.text)
            assert not any(leak in answer.text for leak in LEAKS), answer.text
    with live.running.service.store.read() as conn:
        stored = set(conn.execute(select(jobs.c.name)).scalars())
    assert stored == {g["name"] for g in good}


def test_a_row_the_store_refuses_fails_only_itself(live, caplog) -> None:
    """Below validation: a batch holding a row the database refuses (a lone surrogate, which
    neither backend can encode) is stored again row by row; the others are committed."""
    svc = live.running.service
    spec = svc.parse({"name": "fine", "vc": "default", "gpus": 0, "command": "true"})

    def new(name: str) -> lc.NewJob:
        return lc.NewJob(name, "alice", "default", 10, 0, 1, 0, {"name": name, "gpus": 0})

    names = [f"ok-{i}" if i % 10 else f"bad-\ud800-{i}" for i in range(200)]

    async def submit_all() -> list[object]:
        assert svc.intake is not None
        calls = [svc.intake.submit(new(n), spec) for n in names]
        return await asyncio.gather(*calls, return_exceptions=True)

    with caplog.at_level(logging.WARNING, logger="labhive.service.intake"):
        results = asyncio.run(submit_all())
    for name, result in zip(names, results, strict=True):
        if name.startswith("bad"):
            assert isinstance(result, Unstorable), result
            assert "reference" in str(result) and "INSERT" not in str(result)
        else:
            assert isinstance(result, tuple), result
    assert "storing them one by one" in caplog.text  # a mixed batch was split
    with svc.store.read() as conn:
        stored = set(conn.execute(select(jobs.c.name)).scalars())
    assert stored == {n for n in names if n.startswith("ok")}


def test_store_failures_answer_without_sql(live_sqlite) -> None:
    """A broken store (its tables gone under the service) gives 503s with a reference, never
    the statement or its parameters (which held other users' rows)."""
    db = live_sqlite.data_dir / "labhive.db"
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE jobs RENAME TO jobs_gone")
    answer = post(live_sqlite.url, ALICE, {"name": "x", "vc": "vc1", "command": "true"})
    assert answer.status_code == 503, answer.text
    assert "reference" in answer.json()["detail"] and answer.headers["X-Request-Id"]
    listing = httpx.get(
        f"{live_sqlite.url}/jobs", headers={"Authorization": f"Bearer {ALICE}"}, timeout=30
    )
    assert listing.status_code == 503
    for text in (answer.text, listing.text):
        assert not any(leak in text for leak in LEAKS), text
        assert "jobs" not in text.replace("/jobs", "")


def test_gpu_and_cluster_views_hide_other_users_job_ids(live_sqlite) -> None:
    alice, bob = live_sqlite.client(ALICE), live_sqlite.client(BOB)
    admin = live_sqlite.client()
    job = alice.submit(command="sleep 60", vc="vc1", gpus=1, name="mine")
    wait_until(lambda: job.refresh().state == "RUNNING", "alice's job to start", 30)

    def holders(client) -> list[object]:
        return [g["job"] for g in client.gpus() if g["job"] is not None]

    def used(client) -> list[object]:
        return [j for n in client.cluster()["nodes"] for j in n["used"].values()]

    assert holders(alice) == used(alice) == [job.id]
    assert holders(admin) == used(admin) == [job.id]
    assert holders(bob) == used(bob) == ["another user's job"]
    job.cancel()
