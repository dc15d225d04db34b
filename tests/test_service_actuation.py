"""Given a live service with a 10 s grace period and jobs whose tasks ignore SIGTERM, expect
stopping them to hold up nobody: they show as stopping (RUNNING, reason "stopping") while their
GPUs stay reserved, other users' jobs start meanwhile, a start onto their GPUs waits until
their processes are gone, and cancel?wait= requests park no request thread."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from service_fixtures import Live, live_service
from sqlalchemy import select
from waiting import wait_until

from labhive.scheduler.client import Job
from labhive.scheduler.service.store import tasks

pytest_plugins = ["service_fixtures"]

ALICE, BOB = "alice-token-123", "bob-token-4567"
#: A task that ignores SIGTERM: only the SIGKILL after the grace period ends it.
STUBBORN = "trap '' TERM; echo ready; while true; do sleep 0.2; done"


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with live_service(tmp_path / "data", grace_s=10) as service:
        yield service


def _running(live: Live, token: str, **short: Any) -> Job:
    job = live.client(token).submit(command=STUBBORN, **short)
    wait_until(lambda: "ready" in job.logs().data, "the stubborn job to ignore SIGTERM")
    return job


def _stopping(job: Job) -> Job:
    return wait_until(
        lambda: job if job.refresh().reason == "stopping" else None, "it to be stopping"
    )


def _pids(live: Live, job_id: int) -> list[int]:
    """The job's task supervisors, once their handles are recorded."""

    def recorded() -> list[int]:
        with live.running.service.store.read() as conn:
            rows = conn.execute(select(tasks.c.handle).where(tasks.c.job_id == job_id)).all()
        return [int(h["pid"]) for (h,) in rows if h] if rows and all(h for (h,) in rows) else []

    return wait_until(recorded, "the task handles to be recorded")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_cancelled_job_that_ignores_sigterm_holds_up_only_its_own_gpus(live: Live) -> None:
    stubborn = _running(live, ALICE, vc="vc1", gpus=4, name="stubborn")
    live.client(ALICE).cancel(stubborn.id, wait=0)
    shown = _stopping(stubborn)
    assert shown.state == "RUNNING" and "grace 10 s" in shown.why and "cancel" in shown.why
    # Its VC's GPUs stay reserved: alice's next job waits for them ...
    queued = live.client(ALICE).submit(command="true", vc="vc1", gpus=1, name="queued")
    # ... while bob's, in another VC, starts and ends within the stubborn job's grace period.
    other = live.client(BOB).submit(command="true", vc="default", gpus=1, name="other")
    assert other.wait(timeout=30, poll_s=0.05).state == "SUCCEEDED"
    assert stubborn.refresh().reason == "stopping"
    assert queued.refresh().state == "WAITING"
    ended = stubborn.wait(timeout=60, poll_s=0.1)
    assert (ended.state, ended.reason) == ("STOPPED", "cancelled")
    assert queued.wait(timeout=60, poll_s=0.1).state == "SUCCEEDED"
    assert queued.started_at >= ended.finished_at


def test_a_preemptor_starts_only_once_its_victims_processes_are_gone(live: Live) -> None:
    """Opportunistic jobs that ignore SIGTERM on every GPU; vc1's own guaranteed job preempts
    one of them."""
    oppo = [
        _running(live, ALICE, vc="vc1", gpus=4, priority="oppo", name=f"o{i}") for i in range(2)
    ]
    pids = {job.id: _pids(live, job.id) for job in oppo}
    preemptor = live.client(ALICE).submit(
        command="sleep 1", vc="vc1", gpus=4, priority="prod", name="preemptor"
    )
    victim = wait_until(
        lambda: next((j for j in oppo if j.refresh().reason == "stopping"), None),
        "a victim to be stopping",
    )
    assert "preempted by job" in victim.why and victim.state == "RUNNING"
    assert preemptor.refresh().state == "WAITING"
    assert f"once the tasks of job {victim.id} have exited" in preemptor.why
    wait_until(lambda: preemptor.refresh().state != "WAITING", "the preemptor to start", 60)
    assert not any(_alive(p) for p in pids[victim.id]), "the preemptor started beside its victim"
    assert victim.refresh().state == "WAITING" and victim.reason == "preempted"
    assert preemptor.wait(timeout=60, poll_s=0.1).state == "SUCCEEDED"
    for job in oppo:
        live.client(ALICE).cancel(job.id, wait=0)


def test_cancel_requests_waiting_for_a_slow_stop_park_no_request_thread(tmp_path: Path) -> None:
    """More waiting cancels than the server has request threads (40): another user's request
    is still answered while every one of them waits (a 20 s grace, waits of 15 s: room for a
    slow machine)."""
    with live_service(tmp_path / "data", grace_s=20) as live:
        stubborn = _running(live, ALICE, vc="vc1", gpus=1, name="stubborn")
        url = f"{live.url}/jobs/{stubborn.id}/cancel"
        auth = {"Authorization": f"Bearer {ALICE}"}
        with ThreadPoolExecutor(60) as pool:
            waits = [
                pool.submit(httpx.post, url, params={"wait": 15}, headers=auth, timeout=60)
                for _ in range(60)
            ]
            _stopping(stubborn)
            listed = httpx.get(
                f"{live.url}/jobs", headers={"Authorization": f"Bearer {BOB}"}, timeout=60
            )
            assert listed.status_code == 200
            assert not any(w.done() for w in waits), "a cancel wait ended before the grace did"
            answers = [w.result() for w in waits]
        assert all(a.status_code == 200 for a in answers)
        assert {a.json()["reason"] for a in answers} <= {"started", "stopping", "cancelled"}
