"""Given a live service (real HTTP, real processes) on a virtual 2 x 4 GPU cluster, expect jobs to
run through the lifecycle, users to see only what is theirs, and bad requests to be refused with a
message and leave nothing behind."""

from __future__ import annotations

import json
import os
import threading
import time

import httpx
import pytest
from sqlalchemy import func, select
from waiting import wait_until

from labhive.scheduler.client import (
    AuthenticationError,
    Client,
    NotFoundError,
    PermissionDenied,
    Rejected,
)
from labhive.scheduler.service.store import jobs

pytest_plugins = ["service_fixtures"]

ALICE, BOB = "alice-token-123", "bob-token-4567"


def _states(job) -> list[tuple[str | None, str, str]]:
    return [(e["from_state"], e["to_state"], e["reason"]) for e in job.events()]


def test_a_job_runs_and_its_log_and_history_are_kept(live) -> None:
    c = live.client(ALICE)
    job = c.submit(command="echo hello from $PAI_JOB_NAME", vc="vc1", gpus=1, name="hello")
    assert (job.state, job.user, job.vc) == ("WAITING", "alice", "vc1")
    job.wait(timeout=30, poll_s=0.05)
    assert job.state == "SUCCEEDED"
    assert job.tasks[0]["gpus"] and job.tasks[0]["exit_code"] == 0
    assert "hello from hello" in job.logs().data
    assert _states(job) == [
        (None, "WAITING", "submitted"),
        ("WAITING", "RUNNING", "started"),
        ("RUNNING", "SUCCEEDED", "succeeded"),
    ]


def test_a_failing_job_is_retried_then_fails(live) -> None:
    c = live.client(ALICE)
    job = c.submit(command="exit 3", vc="vc1", gpus=1, retries=2, name="flaky").wait(30, 0.05)
    assert (job.state, job.attempt, job.retries_used, job.exit_code) == ("FAILED", 3, 2, 3)
    reasons = [r for _, _, r in _states(job)]
    assert reasons.count("retrying") == 2 and reasons[-1] == "failed"


def test_a_gang_starts_whole_with_rendezvous_env(live_sqlite) -> None:
    c = live_sqlite.client(ALICE)
    job = c.submit(command="echo rank=$RANK of $WORLD_SIZE", vc="vc1", gpus=2, tasks=2)
    job.wait(timeout=30, poll_s=0.05)
    assert job.state == "SUCCEEDED"
    assert sorted(c.logs(job.id, task=t).data.strip() for t in ("main-0", "main-1")) == [
        "rank=0 of 2",
        "rank=1 of 2",
    ]


def test_cancel_stops_waiting_and_running_jobs_and_refuses_ended_ones(live_sqlite) -> None:
    c = live_sqlite.client(ALICE)
    job = c.submit(command="sleep 60", vc="vc1", gpus=4, name="long")  # fills vc1
    waiting = c.submit(command="true", vc="vc1", gpus=1, name="second")
    wait_until(lambda: live_sqlite.running.service.loop.handles(job.id), "the task to start", 20)
    assert c.cancel(waiting.id).state == "STOPPED"
    assert _states(waiting)[-1] == ("WAITING", "STOPPED", "cancelled")
    (handle,) = live_sqlite.running.service.loop.handles(job.id).values()
    job.cancel()
    assert job.state == "STOPPED" and job.tasks[0]["state"] == "ENDED"
    with pytest.raises(ProcessLookupError):  # nothing of the task's process group is left
        os.killpg(handle.info["pgid"], 0)
    assert _states(job)[-1] == ("RUNNING", "STOPPED", "cancelled")
    with pytest.raises(Rejected, match="already ended"):
        c.cancel(job.id)


def test_users_see_only_their_own_jobs(live_sqlite) -> None:
    alice, bob, admin = (live_sqlite.client(t) for t in (ALICE, BOB, None))
    blocker = bob.submit(command="sleep 30", vc="default", gpus=4, name="blocker")
    mine = alice.submit(command="echo secret", vc="vc1", gpus=1, name="mine")
    with pytest.raises(NotFoundError, match=f"no job {mine.id} of yours"):  # as if missing
        bob.logs(mine.id)
    with pytest.raises(NotFoundError):
        bob.job(mine.id)
    with pytest.raises(PermissionDenied, match="may not submit to VC 'default'"):
        alice.submit(command="true", vc="default", name="x")
    assert [j.id for j in alice.jobs()] == [mine.id]
    assert {j.id for j in admin.jobs()} == {mine.id, blocker.id}
    queue = bob.queue()
    assert [e["id"] for e in queue["waiting"] + queue["running"]] == [blocker.id]  # his alone
    (counted,) = queue["others"].values()  # alice's job, in vc1, as a count: no id, no name
    assert list(queue["others"]) == ["vc1"] and counted["running"] + counted["waiting"] == 1
    assert admin.cancel(blocker.id).state == "STOPPED"


def test_openpai_v2_job_submits_unchanged(live_sqlite) -> None:
    spec = {
        "protocolVersion": 2,
        "name": "pai",
        "taskRoles": {
            "worker": {
                "instances": 1,
                "resourcePerInstance": {"gpu": 1, "cpu": 1, "memoryMB": 512},
                "commands": ["echo from openpai"],
            }
        },
        "defaults": {"virtualCluster": "vc1"},
    }
    job = live_sqlite.client(ALICE).submit(spec).wait(30, 0.05)
    assert job.state == "SUCCEEDED" and "from openpai" in job.logs().data


def test_malformed_requests_get_4xx_with_a_message_and_store_nothing(live) -> None:
    url = live.url
    auth = {"Authorization": f"Bearer {ALICE}"}
    raw = {"headers": {**auth, "Content-Type": "application/json"}}
    text = {"headers": {**auth, "Content-Type": "text/plain"}}  # a job is JSON, nothing else
    big = b"{" + b" " * (2 << 20) + b"}"

    def j(doc: object, headers: dict | None = None) -> dict:
        return {"json": doc, "headers": auth if headers is None else headers}

    cases = [
        ("POST", "/jobs", {**raw, "content": b"{not json"}, 400, "malformed JSON"),
        ("POST", "/jobs", j({"name": "x", "gpus": "two"}), 422, "gpus"),
        ("POST", "/jobs", j([1, 2]), 422, "JSON object"),
        ("POST", "/jobs", {**raw, "content": b""}, 422, "JSON object"),
        ("POST", "/jobs", {**text, "content": b'{"name": "x", "vc": "vc1"}'}, 422, "JSON object"),
        ("POST", "/jobs", j({"name": "x", "vc": "nope"}), 422, "nope"),
        ("POST", "/jobs", j({"name": "x", "vc": "vc1", "gpus": 64}), 422, "64"),
        ("POST", "/jobs", j({"name": "x", "vc": "vc1", "gpu": 1}), 422, "gpu"),
        ("POST", "/jobs", j({"name": "x", "vc": "vc1", "priority": "urgent"}), 422, "urgent"),
        ("POST", "/jobs", {**raw, "content": big}, 413, "too large"),
        ("POST", "/jobs", {**raw, "content": iter([big])}, 413, "too large"),  # chunked
        (
            "POST",
            "/jobs",
            j({"name": "x"}, {"Authorization": "Bearer wrong"}),
            401,
            "invalid token",
        ),
        ("POST", "/jobs", j({"name": "x"}, {}), 401, "missing bearer token"),
        ("GET", "/jobs/abc", {"headers": auth}, 422, "job_id"),
        ("GET", "/jobs/999", {"headers": auth}, 404, "no job 999"),
        ("GET", "/jobs", {"params": {"limit": 0}, "headers": auth}, 422, "limit"),
    ]
    with httpx.Client(base_url=url) as http:
        for method, path, kw, status, words in cases:
            r = http.request(method, path, **kw)
            assert r.status_code == status, (path, kw.get("json"), r.text)
            assert words in r.json()["detail"], r.json()
    with live.running.service.store.read() as conn:
        assert conn.execute(select(func.count()).select_from(jobs)).scalar() == 0


def test_cluster_views_metrics_and_health(live_sqlite) -> None:
    c = live_sqlite.client()
    cluster = c.cluster()
    assert cluster["virtual"] is True and len(c.gpus()) == 8
    assert set(c.vcs()) == {"default", "vc1"}
    assert c.health()["status"] == "ok"
    c.submit(command="sleep 5", vc="vc1", gpus=1, name="m")
    text = httpx.get(live_sqlite.url + "/metrics").text
    assert 'labhive_jobs{state="WAITING",vc="vc1"} 1.0' in text or "labhive_jobs{" in text
    assert "labhive_gpus" in text and "labhive_queue_length" in text
    doc = httpx.get(live_sqlite.url + "/openapi.json").json()
    assert {"/api/v1/jobs", "/api/v1/jobs/{job_id}/logs", "/api/v1/metrics"} <= set(doc["paths"])


def test_client_errors_carry_the_service_message(live_sqlite) -> None:
    with pytest.raises(AuthenticationError, match="invalid token"):
        Client(live_sqlite.url, "nope-nope-nope").jobs()
    with pytest.raises(Rejected, match="unknown"):
        live_sqlite.client(ALICE).submit(command="true", vc="vc9", name="x")
    assert json.dumps(live_sqlite.client().health())


def test_preemption_requeues_without_spending_a_retry(live_sqlite) -> None:
    """Opportunistic jobs on every idle GPU yield to vc1's own guaranteed job: the one preempted
    waits again with reason 'preempted', a new attempt, no retry spent, its processes gone."""
    c = live_sqlite.client(ALICE)
    loop = live_sqlite.running.service.loop
    oppo = [
        c.submit(command="sleep 60", vc="vc1", gpus=4, priority="oppo", retries=1, name=f"o{i}")
        for i in range(2)
    ]
    deadline = time.monotonic() + 30
    while not all(loop.handles(j.id) for j in oppo):
        assert time.monotonic() < deadline, "the opportunistic jobs never started"
        time.sleep(0.05)
    handles = {j.id: next(iter(loop.handles(j.id).values())) for j in oppo}
    prod = c.submit(command="sleep 60", vc="vc1", gpus=4, priority="prod", name="p")
    while not any(j.refresh().state == "WAITING" for j in oppo):
        assert time.monotonic() < deadline, "no opportunistic job was preempted"
        time.sleep(0.05)
    (victim,) = [j for j in oppo if j.state == "WAITING"]
    assert (victim.attempt, victim.retries_used) == (2, 0)
    assert _states(victim)[-1][1:] == ("WAITING", "preempted")
    assert f"job {prod.id}" in victim.events()[-1]["why"]
    with pytest.raises(ProcessLookupError):
        os.killpg(handles[victim.id].info["pgid"], 0)
    for job in (prod, *oppo):
        c.cancel(job.id)


def test_logs_are_served_in_chunks_by_offset(live_sqlite) -> None:
    c = live_sqlite.client(ALICE)
    job = c.submit(command="seq 1 3000", vc="vc1", gpus=1, name="seq").wait(30, 0.05)
    expected = "".join(f"{i}\n" for i in range(1, 3001))
    text, offset = "", 0
    while True:
        chunk = c.logs(job.id, offset, limit=1000)
        text += chunk.data
        offset = chunk.next_offset
        if chunk.complete:
            break
    assert text == expected and offset == len(expected)
    assert "".join(c.follow_logs(job.id)) == expected


def test_strace_observations_are_listed(live_sqlite) -> None:
    c = live_sqlite.client(ALICE)
    job = c.submit(command="ls /", vc="vc1", gpus=1, name="obs", observe="strace").wait(30, 0.05)
    assert job.state == "SUCCEEDED", job.events()
    (obs,) = c.observations(job.id)
    assert obs["kind"] == "strace" and obs["task"] == "main-0" and obs["size"] > 0


def test_a_slow_identity_check_does_not_hold_up_other_callers(live_sqlite) -> None:
    """Under JupyterHub the identity check may ask the hub over HTTP (a cache miss); while it
    waits, everyone else must still be served, so it must not run on the event loop."""
    service = live_sqlite.running.service
    inner, entered, release = service.auth, threading.Event(), threading.Event()
    timed_out: list[bool] = []

    class SlowHub:
        blocking = True  # as the hub's: it may wait, so the API must call it off the loop

        def identify(self, request):
            if request.headers.get("authorization") == f"Bearer {ALICE}":
                entered.set()
                timed_out.append(not release.wait(20))
            return inner.identify(request)

    service.auth = SlowHub()
    slow = threading.Thread(target=lambda: live_sqlite.client(ALICE).queue())
    slow.start()
    try:
        assert entered.wait(30), "alice's request never reached the identity check"
        assert live_sqlite.client(BOB).queue() is not None  # served while alice's check waits
        assert timed_out == [], "bob was served only after alice's check gave up"
    finally:
        release.set()
        slow.join(30)
    assert timed_out == [False]
