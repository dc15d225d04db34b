"""Given a live service and an attacker's probes (issue: the service's low-severity holes),
expect each to get one clear 4xx that gives nothing away, and nothing stored:

- a body nested 100,000 levels deep (or a few hundred, which used to be stored and then made
  the job's page a 500) is a 400 that says so, on every route that takes a body;
- a job that asks to run under ``observe: "../../etc/passwd"`` is refused at submission with the
  choices, not accepted and failed at launch with exit 127;
- a 401 names no file system path (it used to name the admin token's file);
- another user's job and a job that does not exist get the same 404 on every job route, so no
  one learns which ids exist; admins still see every job.
"""

from __future__ import annotations

import json
import re
import time

import httpx
import pytest
from fastapi.routing import APIRoute
from sqlalchemy import func, select

from labhive.scheduler.core.jobs import SpecError, parse_job
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.routing import PREFIX
from labhive.scheduler.service.store import jobs
from labhive.scheduler.service.store import transitions as tx

pytest_plugins = ["service_fixtures"]

ALICE, BOB = "alice-token-123", "bob-token-4567"
DEEP = 100_000


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def stored_jobs(live) -> int:
    with live.running.service.store.read() as conn:
        return int(conn.execute(select(func.count()).select_from(jobs)).scalar() or 0)


def routes(live, method: str, *, under: str = "") -> list[str]:
    """Every path of the live app's API that answers ``method`` (under ``PREFIX + under``)."""
    return sorted(
        r.path
        for r in live.running.app.routes
        if isinstance(r, APIRoute)
        and method in (r.methods or set())
        and r.path.startswith(PREFIX + under)
    )


# ---- 1. bodies nested too deeply -----------------------------------------------------------

#: POST routes that read a body; every other POST route must still answer a deep body < 500.
READS_A_BODY = {f"{PREFIX}/jobs", f"{PREFIX}/nodes/{{node}}/down"}


def test_a_body_nested_100000_deep_is_a_400_on_every_post_route(live_sqlite) -> None:
    posts = routes(live_sqlite, "POST")
    assert set(posts) >= READS_A_BODY, posts
    body = b"[" * DEEP + b"]" * DEEP
    with httpx.Client(headers=auth(live_sqlite.admin), timeout=60) as http:
        for path in posts:
            url = live_sqlite.url + path.removeprefix(PREFIX).format(job_id=1, node="n0")
            for content in (body, iter([body])):  # with a length, and chunked
                r = http.post(url, content=content)
                assert r.status_code < 500, (path, r.text)
                if path in READS_A_BODY:
                    assert r.status_code == 400, (path, r.text)
                    assert "levels deep" in r.json()["detail"], r.text
    assert stored_jobs(live_sqlite) == 0


def test_a_job_nested_a_few_hundred_deep_is_refused_not_stored_to_break_its_page(
    live_sqlite,
) -> None:
    """500 levels parse (under the decoder's bound); such a job used to be stored (201), and
    then every ``GET /jobs/{id}`` of it was a 500."""
    nested = "{" + '"a":{' * 500 + "}" * 501
    body = '{"name": "deep", "command": "true", "gpus": 0, "extras": ' + nested + "}"
    r = httpx.post(live_sqlite.url + "/jobs", content=body, headers=auth(ALICE), timeout=60)
    assert r.status_code == 400, r.text
    assert "more than 32 levels deep" in r.json()["detail"]
    assert stored_jobs(live_sqlite) == 0


def test_a_job_stored_deep_before_the_bound_still_reads(live_sqlite) -> None:
    """A store may hold such a job from before the bound: its page is a 200 that says why its
    spec is not shown, not a 500 on every read."""
    deep: dict = {}
    inner = deep
    for _ in range(500):
        inner["a"] = inner = {}
    old = lc.NewJob(
        name="old", user="admin", vc="vc1", priority=10, retries=0, task_count=1, gpus=1,
        spec={"name": "old", "command": "true", "extras": deep}, owner_id=None,
    )  # fmt: skip
    with live_sqlite.running.service.store.write() as conn:
        (job_id,) = tx.submit_many(conn, [old], time.time())
    r = httpx.get(f"{live_sqlite.url}/jobs/{job_id}", headers=auth(live_sqlite.admin), timeout=60)
    assert r.status_code == 200, r.text
    assert "more than 32 levels deep" in r.json()["spec"]["labhive"]


def test_an_openpai_job_of_ordinary_depth_is_still_accepted(live_sqlite) -> None:
    doc = {
        "protocolVersion": 2,
        "name": "pai",
        "defaults": {"virtualCluster": "vc1"},
        "taskRoles": {"w": {"instances": 1, "commands": ["true"]}},
        "extras": {"hivedScheduler": {"taskRoles": {"w": {"skuType": "VGPU"}}}},
        "parameters": {"grid": [[[{"lr": [0.1, 0.01]}]]]},  # 8 levels: well within
    }
    r = httpx.post(live_sqlite.url + "/jobs", json=doc, headers=auth(ALICE), timeout=60)
    assert r.status_code == 201, r.text


# ---- 2. observe names a choice, not a file --------------------------------------------------


@pytest.mark.parametrize(
    "doc",
    [
        {"name": "o", "vc": "vc1", "command": "true", "observe": "../../etc/passwd"},
        {"name": "o", "vc": "vc1", "command": "true", "observe": ""},
        {
            "protocolVersion": 2,
            "name": "o",
            "defaults": {"virtualCluster": "vc1"},
            "taskRoles": {"w": {"commands": ["true"]}},
            "extras": {"observe": "/bin/sh"},
        },
    ],
    ids=["short-path", "short-empty", "openpai-extras"],
)
def test_an_unknown_observation_is_refused_at_submission_with_the_choices(live_sqlite, doc) -> None:
    r = httpx.post(live_sqlite.url + "/jobs", json=doc, headers=auth(ALICE), timeout=60)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "observe" in detail and "unknown observation" in detail and "strace" in detail
    assert stored_jobs(live_sqlite) == 0


def test_the_job_parser_takes_strace_and_nothing_else_for_observe() -> None:
    assert parse_job({"name": "t", "observe": "strace"}).observe == "strace"
    assert parse_job({"name": "t"}).observe is None
    with pytest.raises(SpecError, match=r"observe: unknown observation 'perf'.*strace"):
        parse_job({"name": "t", "observe": "perf"})


# ---- 3. a 401 shows no path -----------------------------------------------------------------


@pytest.mark.parametrize("header", [None, "Bearer wrong-token", "Basic abc"])
def test_a_401_says_how_to_log_in_and_names_no_path(live_sqlite, header) -> None:
    headers = {} if header is None else {"Authorization": header}
    r = httpx.get(live_sqlite.url + "/jobs", headers=headers, timeout=60)
    assert r.status_code == 401, r.text
    detail = r.json()["detail"]
    assert str(live_sqlite.data_dir) not in detail and "admin.token" not in detail
    assert not re.search(r"(^|[\s(])/\w", detail), detail  # no absolute path of any kind
    if header != "Basic abc":  # a malformed header is told its form
        assert "docs/service.md" in detail and "log in through the hub" in detail


# ---- 4. not yours and not there read the same ------------------------------------------------


def test_another_users_job_and_a_missing_job_get_the_same_404_on_every_job_route(
    live_sqlite,
) -> None:
    alice = live_sqlite.client(ALICE)
    mine = alice.submit(command="echo secret", vc="vc1", gpus=1, name="mine")
    missing = mine.id + 1000
    posts = [p for p in routes(live_sqlite, "POST") if "{job_id}" in p]
    job_routes = [p for p in routes(live_sqlite, "GET") if "{job_id}" in p] + posts
    assert len(job_routes) >= 7, job_routes  # show, cancel, events, logs, observations, ...
    with httpx.Client(headers=auth(BOB), timeout=60) as bob:
        for path in job_routes:
            method = "POST" if path in posts else "GET"
            answers = []
            for job_id in (mine.id, missing):
                url = live_sqlite.url + path.removeprefix(PREFIX).format(job_id=job_id)
                body = {"reason": "probe", "in_s": 60} if path.endswith("/stop-notice") else None
                params = {"wait": 0} if method == "POST" else None
                r = bob.request(method, url, params=params, json=body)
                answers.append((r.status_code, r.json()["detail"].replace(str(job_id), "N")))
            theirs, nothing = answers
            assert theirs == nothing, (path, answers)
            if "/stop-notice" in path:  # admins' only: one refusal for every user
                assert theirs[0] == 403, (path, answers)
                continue
            assert theirs[0] == 404 and "no job N" in theirs[1], (path, answers)
    own = httpx.get(f"{live_sqlite.url}/jobs/{mine.id}", headers=auth(ALICE), timeout=60).json()
    assert own["cancel_requested"] is False  # bob's cancel did nothing
    admin = httpx.get(
        f"{live_sqlite.url}/jobs/{mine.id}", headers=auth(live_sqlite.admin), timeout=60
    )
    assert admin.status_code == 200 and "secret" in json.dumps(admin.json()["spec"])
