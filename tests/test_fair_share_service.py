"""Fair share and per-user caps through the live service (real HTTP, real processes, SQLite
and PostgreSQL), as a course would meet them: given a cluster config with ``fairShare`` and a
VC's ``userLimits``, bob floods the course's VC and dave submits one job; expect dave's job in
the next freed slot, bob's jobs over the running cap waiting with the cap as their reason, and
a submission over the waiting cap refused with a 422 that says the cap and the count. The
same events replayed (``labhive replay``'s policy) give the same order of starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from service_fixtures import BOB, DAVE, course_cluster, course_users
from waiting import wait_until

from labhive.scheduler.client import Rejected
from labhive.scheduler.drivers.replay import VirtualTimeDriver, scenario_action
from labhive.scheduler.drivers.scenario import load_scenario
from labhive.scheduler.policies import get_policy

pytest_plugins = ["service_fixtures"]

USERS = course_users("course", "capped")
#: ``course`` shares its node by fair share; ``capped`` holds a user to one running GPU.
CLUSTER = course_cluster(
    "1h",
    "capped:\n"
    "    virtualCells: [{cellType: POOL.VNODE, cellNumber: 1}]\n"
    "    userLimits: {maxRunningGpus: 1, maxWaitingJobs: 2}",
)


def serve(tmp_path: Path, db: str) -> Any:
    from service_fixtures import live_service

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    return live_service(tmp_path / "data", db, users=USERS, cluster=str(cluster))


def started_at(live: Any, job_id: int) -> float:
    return float(live.client().job(job_id).started_at)  # (the admin sees every job)


def test_another_users_job_starts_in_the_next_freed_slot(tmp_path: Path, db_url: str) -> None:
    """Given 2 GPUs, bob's 8 jobs (of 3 s and 4.5 s in turn) and then dave's: expect dave's to
    start when bob's first job ends, before any more of bob's; first come, first served would
    start all 8 of bob's first. (Ends 1.5 s apart: two ends seen in one pass would start dave's
    job and one of bob's at once, and the replay, ending them apart, could not match that.)"""
    with serve(tmp_path, db_url) as live:
        bob = [
            live.client(BOB).submit(
                command=f"sleep {4.5 if i % 2 else 3}", vc="course", gpus=1, name=f"b{i}"
            )
            for i in range(8)
        ]
        wait_until(lambda: bob[0].refresh().state != "WAITING", "bob's first job to start", 120)
        dave = live.client(DAVE).submit(command="true", vc="course", gpus=1, name="d")
        dave.wait(timeout=60)
        for job in bob:
            job.wait(timeout=60)
        dave_start = started_at(live, dave.id)
        before = [j.name for j in bob[2:] if started_at(live, j.id) < dave_start]
        assert before == [], f"bob's {before} started before dave's job"
        rows = [live.client().job(j.id).data for j in [*bob, dave]]
    assert users_in_start_order(rows) == replayed(tmp_path, rows)


def users_in_start_order(rows: list[dict[str, Any]]) -> list[str]:
    return [r["user"] for r in sorted(rows, key=lambda r: (r["started_at"], r["id"]))]


def replayed(tmp_path: Path, rows: list[dict[str, Any]]) -> list[str]:
    """The same submissions replayed in virtual time on ``labhive replay``'s driver (each job
    running as long as it ran live): whose jobs started in which order."""
    t0 = min(r["submitted_at"] for r in rows)
    events = [
        {
            "at": round(r["submitted_at"] - t0, 3),
            "submit": {
                "name": r["name"], "vc": r["vc"], "gpus": 1, "command": "true", "user": r["user"],
                "duration": round(r["finished_at"] - r["started_at"], 3),
            },
        }
        for r in rows
    ]  # fmt: skip
    scenario = load_scenario({"cluster": str(tmp_path / "cluster.yaml"), "events": events})
    driver = VirtualTimeDriver(get_policy("hived", scenario.cluster))
    for event in scenario.events:
        driver.at(event.at, scenario_action(driver, event))
    started: dict[str, tuple[float, float, str]] = {}  # job -> (start, submit, user)

    def note_starts(_: str) -> None:  # after each decision
        for r in driver.records.values():
            if r.started is not None and r.job_id not in started:
                started[r.job_id] = (r.started, r.submitted, r.spec.user or "")

    driver.drive(note_starts)
    return [user for _, _, user in sorted(started.values())]


def test_caps_hold_at_start_and_at_intake(tmp_path: Path, db_url: str) -> None:
    """Given a VC that lets one user run 1 GPU and keep 2 jobs waiting: bob's first job runs,
    his second and third wait (the second saying the running cap), his fourth is refused with
    a 422 naming the cap and how many wait; dave's job still runs beside bob's."""
    with serve(tmp_path, db_url) as live:
        bob = live.client(BOB)
        first = bob.submit(command="sleep 30", vc="capped", gpus=1, name="first")
        wait_until(lambda: first.refresh().state == "RUNNING", "bob's first job to run", 120)
        second = bob.submit(command="true", vc="capped", gpus=1, name="second")
        bob.submit(command="true", vc="capped", gpus=1, name="third")
        why = wait_until(lambda: second.refresh().data.get("why"), "a reason for the second")
        assert "bob already runs 1 GPUs in capped" in why
        assert "userLimits.maxRunningGpus" in why
        with pytest.raises(Rejected) as refused:
            bob.submit(command="true", vc="capped", gpus=1, name="fourth")
        text = str(refused.value)
        assert "already has 2 jobs waiting in VC capped" in text
        assert "allows 2 waiting jobs per user (userLimits.maxWaitingJobs)" in text
        assert [j.name for j in bob.jobs(vc="capped")].count("fourth") == 0  # nothing stored
        dave = live.client(DAVE).submit(command="true", vc="capped", gpus=1, name="dave")
        assert dave.wait(timeout=60).state == "SUCCEEDED"
        bob.cancel(first.id)
        assert second.wait(timeout=60).state == "SUCCEEDED"
