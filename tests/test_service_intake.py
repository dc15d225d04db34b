"""Given a live service and submissions the store cannot hold, expect each to fail alone with
its own 4xx (never another user's submission, never a 5xx), and no answer to carry SQL,
parameters or exception text. Both backends where the finding was on both (issue 16)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import select, text
from waiting import wait_until

from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.intake import Unstorable
from labhive.scheduler.service.store import jobs
from labhive.scheduler.service.store import transitions as tx

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
    assert "finding the rows the store refuses" in caplog.text  # a mixed batch was split
    with svc.store.read() as conn:
        stored = set(conn.execute(select(jobs.c.name)).scalars())
    assert stored == {n for n in names if n.startswith("ok")}


def test_store_failures_answer_without_sql(live) -> None:
    """A broken store (its jobs table gone under the service) gives 503s with a reference,
    never the statement or its parameters (which held other users' rows), on both backends."""
    with live.running.service.store.write() as conn:
        conn.execute(text("ALTER TABLE jobs RENAME TO jobs_gone"))
    answer = post(live.url, ALICE, {"name": "x", "vc": "vc1", "command": "true"})
    assert answer.status_code == 503, answer.text
    assert "reference" in answer.json()["detail"] and answer.headers["X-Request-Id"]
    listing = httpx.get(
        f"{live.url}/jobs", headers={"Authorization": f"Bearer {ALICE}"}, timeout=30
    )
    assert listing.status_code in (500, 503)
    for text_ in (answer.text, listing.text):
        assert not any(leak in text_ for leak in LEAKS), text_
        assert "jobs_gone" not in text_ and "reference" in text_


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


def test_both_backends_store_a_batch_alike(store) -> None:
    """PostgreSQL stores a batch with its own statement (one round trip); the rows and first
    events must be those the SQLite path writes from ``lifecycle.job_values``, ids in the order
    given."""
    from labhive.scheduler.service.store import events

    new = [
        lc.NewJob(
            f"j{i}", f"user{i % 2}", "vc1", 10 * i, i, i + 1, 2 * i, {"name": f"j{i}", "n": i}
        )
        for i in range(5)
    ]
    with store.write() as conn:
        ids = tx.submit_many(conn, new, 1234.5)
    assert ids == sorted(ids) and len(set(ids)) == 5
    with store.read() as conn:
        for job, job_id in zip(new, ids, strict=True):
            row = dict(conn.execute(select(jobs).where(jobs.c.id == job_id)).mappings().one())
            assert row == {**lc.job_values(job, 1234.5), "id": job_id}
            (event,) = conn.execute(select(events).where(events.c.job_id == job_id)).mappings()
            assert (event["time"], event["from_state"], event["to_state"], event["reason"]) == (
                1234.5,
                None,
                "WAITING",
                "submitted",
            )
            assert (event["attempt"], event["why"]) == (1, None)


def test_a_broken_intake_connection_costs_at_most_its_batch(pg_server, tmp_path) -> None:
    """PostgreSQL: the intake keeps its connection between batches (a batch is one round trip,
    no pool pre-ping). Given the server ending every connection of the service's database (an
    admin's pg_terminate_backend, a failover), expect the submission right after it answered
    201 or 503 (never a 500, never SQL) and every later one stored on a new connection."""
    from pg_throwaway import new_database
    from service_fixtures import live_service

    db = new_database(pg_server)
    with live_service(tmp_path / "data", db) as live:
        doc = {"name": "before", "vc": "vc1", "gpus": 0, "command": "true", "cpu": 0.1}
        assert post(live.url, ALICE, doc).status_code == 201
        with live.running.service.store.engine.connect() as conn:
            ended = conn.execute(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar()
        assert ended >= 1  # the intake's connection at least
        answers = [post(live.url, ALICE, {**doc, "name": f"after-{i}"}) for i in range(4)]
        assert answers[0].status_code in (201, 503), answers[0].text
        assert not any(leak in answers[0].text for leak in LEAKS), answers[0].text
        assert [a.status_code for a in answers[1:]] == [201, 201, 201], [a.text for a in answers]
        with live.running.service.store.read() as conn:
            stored = set(conn.execute(select(jobs.c.name)).scalars())
        accepted = {f"after-{i}" for i, a in enumerate(answers) if a.status_code == 201}
        assert stored == {"before"} | accepted
