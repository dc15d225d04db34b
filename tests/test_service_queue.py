"""Given alice with a few jobs and bob with 150 in the same VC, expect ``GET /queue`` to give
each user their own jobs as rows a page at a time and the other's only as counts per VC (it used
to return every row to anyone: 2 MB and 1.6 s with 10,000 jobs, and everyone's queue entries),
and an admin every job, page by page."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from service_fixtures import live_service

from labhive.scheduler.cli import main as client_main

USERS = """
users:
  alice: {token: alice-token-123, groups: [lab]}
  bob: {token: bob-token-4567, groups: [lab]}
groups:
  lab: {vcs: [vc1]}
"""
ALICE, BOB = "alice-token-123", "bob-token-4567"
BOBS = 150


async def submit_many(url: str, token: str, docs: list[dict]) -> list[int]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        headers = {"Authorization": f"Bearer {token}"}
        gate = asyncio.Semaphore(8)

        async def one(doc: dict) -> int:
            async with gate:
                r = await http.post("/jobs", json=doc, headers=headers)
            assert r.status_code == 201, r.text
            return int(r.json()["id"])

        return list(await asyncio.gather(*(one(d) for d in docs)))


def jobs(name: str, n: int) -> list[dict]:
    return [{"name": f"{name}-{i}", "vc": "vc1", "gpus": 1, "command": "true"} for i in range(n)]


@pytest.fixture(scope="module")
def queued(tmp_path_factory: pytest.TempPathFactory):
    """vc1 (4 GPUs) held by bob's first job; his 149 others and alice's 3 wait behind it."""
    with live_service(tmp_path_factory.mktemp("queue") / "data", users=USERS) as live:
        blocker = {"name": "bob-blocker", "vc": "vc1", "gpus": 4, "command": "sleep 600"}
        bob = asyncio.run(submit_many(live.url, BOB, [blocker]))
        bob += asyncio.run(submit_many(live.url, BOB, jobs("bob-secret", BOBS - 1)))
        alice = asyncio.run(submit_many(live.url, ALICE, jobs("alice", 3)))
        yield live, alice, bob


def get_queue(live, token: str, **params: str | int) -> dict:
    r = httpx.get(
        f"{live.url}/queue",
        params=params,
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    return r.json()


def rows(page: dict) -> list[int]:
    return [e["id"] for e in page["running"] + page["waiting"]]


def test_a_user_gets_their_own_rows_and_only_counts_of_others(queued) -> None:
    live, alice, bob = queued
    page = get_queue(live, ALICE)
    assert sorted(rows(page)) == sorted(alice) and page["total"] == 3
    assert page["next_offset"] is None
    assert page["others"] == {"vc1": {"running": 1, "waiting": BOBS - 1, "running_gpus": 4}}
    assert "bob" not in str(page)  # no name, user or id of his reaches her
    assert not set(bob) & set(rows(page))
    positions = [e["position"] for e in page["waiting"]]
    assert positions == sorted(positions) and positions[0] >= BOBS  # behind all of bob's


def test_a_long_queue_comes_a_page_at_a_time(queued) -> None:
    live, _, bob = queued
    first = get_queue(live, BOB)
    assert (len(rows(first)), first["total"], first["next_offset"]) == (100, BOBS, 100)
    assert rows(first)[0] == bob[0]  # the running one first
    second = get_queue(live, BOB, offset=first["next_offset"])
    assert (len(rows(second)), second["next_offset"]) == (BOBS - 100, None)
    assert sorted(rows(first) + rows(second)) == sorted(bob)
    waiting = [e["position"] for e in first["waiting"] + second["waiting"]]
    assert waiting == sorted(waiting)  # pages follow the queue's order
    assert (
        get_queue(live, BOB, limit=5)["limit"] == 5
        and len(rows(get_queue(live, BOB, limit=5))) == 5
    )


def test_an_admin_pages_through_every_job(queued) -> None:
    live, alice, bob = queued
    seen: list[int] = []
    offset: int | None = 0
    while offset is not None:
        page = get_queue(live, live.admin, limit=1000, offset=offset)
        assert page["others"] == {}
        seen += rows(page)
        offset = page["next_offset"]
    assert sorted(seen) == sorted(alice + bob)


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 1001}, {"offset": -1}])
def test_a_page_out_of_bounds_is_a_422_that_names_it(queued, params) -> None:
    live, _, _ = queued
    r = httpx.get(f"{live.url}/queue", params=params, headers={"Authorization": f"Bearer {ALICE}"})
    assert r.status_code == 422 and next(iter(params)) in r.json()["detail"], r.text


def test_the_cli_shows_your_jobs_and_others_as_counts(queued, capsys) -> None:
    live, alice, _ = queued
    code = client_main(["queue", "--url", live.url, "--token", ALICE])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"{alice[0]} alice-0" in out and "bob" not in out
    assert f"1 running (4 GPUs), {BOBS - 1} waiting" in out
    code = client_main(["queue", "--url", live.url, "--token", BOB, "--limit", "10"])
    out = capsys.readouterr().out
    assert code == 0 and f"10 of {BOBS} jobs shown; more: --offset 10" in out, out
