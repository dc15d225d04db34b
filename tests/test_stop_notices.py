"""Stop notices for real: a live service with the local executor, real processes and signals.

Given a job with a time limit, expect its notice file ``stop_notice_s`` before the limit, then
SIGTERM, then SIGKILL only after the grace period. Given an announced cull, expect the job's
``stopping`` field, its event and the notice file; a withdrawal takes them back; the cull itself
ends the job STOPPED (culled), SIGTERM first, and counts on /metrics.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import httpx
import pytest
from waiting import wait_until

GRACE_S = 1.5
NOTICE_S = 2.0

#: A batch job that waits for its notice file, then ignores SIGTERM (a long checkpoint) so that
#: only SIGKILL ends it; it prints what it saw, with times, on stdout.
BATCH = r"""
import os, signal, time
path = os.environ["LABHIVE_NOTICE_FILE"]
def term(*_):
    seen = open(path).read() if os.path.exists(path) else "none"
    print(f"SIGTERM {time.time():.3f} {seen}", flush=True)
signal.signal(signal.SIGTERM, term)
print("READY", path, flush=True)
while not os.path.exists(path):
    time.sleep(0.02)
print(f"NOTICE {time.time():.3f} {open(path).read()}", flush=True)
while True:
    time.sleep(0.02)
"""


def python_job(source: str) -> str:
    code = base64.b64encode(source.encode()).decode()
    return f"python3 -u -c 'import base64; exec(base64.b64decode(\"{code}\"))'"


@pytest.fixture
def service(tmp_path: Path):
    from service_fixtures import live_service

    with live_service(tmp_path / "data", grace_s=GRACE_S, stop_notice_s=NOTICE_S) as live:
        yield live


def lines(job, word: str) -> list[str]:
    return [line for line in job.logs().data.splitlines() if line.startswith(word)]


def test_a_batch_job_reads_its_notice_then_gets_sigterm_and_sigkill_only_after_the_grace(
    service,
):
    c = service.client()
    job = c.submit(command=python_job(BATCH), vc="vc1", gpus=1, name="ckpt", time_limit=5)
    done = job.wait(90, 0.1)
    assert done.state == "FAILED" and "time limit" in done.data["reason"]
    started, finished = done.data["started_at"], done.data["finished_at"]
    (notice_line,) = lines(done, "NOTICE")
    term_line = lines(done, "SIGTERM")[0]  # (the supervisor may pass SIGTERM on again)
    noticed_at, notice = float(notice_line.split()[1]), json.loads(notice_line.split(" ", 2)[2])
    termed_at = float(term_line.split()[1])
    assert notice["kind"] == "time-limit" and notice["reason"] == "time limit of 5 s reached"
    assert notice["deadline"] == pytest.approx(started + 5, abs=0.01)
    # the notice came NOTICE_S before the limit (not earlier), SIGTERM at the limit, after it
    assert started + 5 - NOTICE_S - 0.05 <= noticed_at < termed_at
    assert termed_at >= started + 5 - 0.05
    assert finished - termed_at >= GRACE_S - 0.1  # SIGKILL only after the grace period
    assert any(e["reason"] == "stop-notice" for e in done.events())


#: A server-like job that runs until it is stopped (SIGTERM ends it at once).
SERVER = r"""
import os, signal, sys, time
def term(*_):
    print(f"SIGTERM {time.time():.3f}", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
os.write(1, b"READY\n")  # one write: SIGTERM cannot land between the word and its newline
while True:
    time.sleep(0.02)
"""


def notice_file(service, job) -> Path:
    (task,) = job.refresh().data["tasks"]
    assert task["state"] == "RUNNING"
    files = list((service.data_dir).rglob("notice.json"))
    return files[0] if files else Path("/nonexistent")


def test_an_announced_cull_shows_on_the_job_and_in_its_file_and_can_be_withdrawn(service):
    c = service.client()
    job = c.submit(command=python_job(SERVER), vc="vc1", gpus=1, name="jupyter-alice")
    wait_until(lambda: lines(job, "READY"), what="the job to run")
    why = "culled: idle kernels and 1 GPU(s) at 0 % for 15 min"
    noticed = c.stop_notice(job.id, why, 60, culled=True).data
    assert noticed["stopping"]["reason"] == why and noticed["stopping"]["kind"] == "culled"
    path = wait_until(lambda: [p for p in service.data_dir.rglob("notice.json")], what="file")[0]
    assert json.loads(path.read_text())["deadline"] == noticed["stopping"]["deadline"]
    assert path.stat().st_mode & 0o077 == 0  # the task's own file, 0600
    assert any(e["reason"] == "stop-notice" and why in e["why"] for e in job.events())
    # the server became busy again: withdrawn, it runs on
    back = c.withdraw_stop_notice(job.id).data
    assert back["stopping"] is None and not path.exists()
    assert job.refresh().state == "RUNNING"
    # idle through a second notice: the culler stops it now
    c.stop_notice(job.id, why, 60, culled=True)
    c.stop_notice(job.id, why, 0, culled=True, gpu_idle_s=1800)
    done = job.wait(60, 0.1)
    assert done.state == "STOPPED" and done.data["reason"] == "culled"
    assert lines(done, "SIGTERM")
    page = httpx.get(f"{service.url}/metrics").text
    assert "labhive_culled_jobs_total 1" in page
    assert "labhive_reclaimed_gpu_hours_total 0.500000" in page  # 1 GPU x 30 min idle


def test_only_admins_give_stop_notices_and_a_finished_job_has_nothing_to_stop(service):
    from labhive.scheduler.client import LabHiveError

    alice = service.client("alice-token-123")
    job = alice.submit(command="sleep 60", vc="vc1", gpus=1)
    with pytest.raises(LabHiveError, match="only admins"):
        alice.stop_notice(job.id, "mine", 10)
    job.cancel()
    job.wait(60, 0.1)
    with pytest.raises(LabHiveError, match="not running"):
        service.client().stop_notice(job.id, "late", 10)


def test_a_node_taken_down_gives_its_jobs_the_grace_period_as_notice_before_sigterm(service):
    c = service.client()
    job = c.submit(command=python_job(BATCH), vc="vc1", gpus=1, name="on-the-node")
    wait_until(lambda: lines(job, "READY"), what="the job to run")
    (node,) = {t["node"] for t in job.refresh().data["tasks"]}
    c.node_down(node, "replacing a fan")
    notice_line = wait_until(lambda: lines(job, "NOTICE"), what="the notice")[0]
    term_line = wait_until(lambda: lines(job, "SIGTERM"), what="SIGTERM")[0]
    notice = json.loads(notice_line.split(" ", 2)[2])
    assert notice["kind"] == "stopping" and "replacing a fan" in notice["reason"]
    termed_at = float(term_line.split()[1])
    assert float(notice_line.split()[1]) <= termed_at + 0.05  # written before SIGTERM
    assert notice["deadline"] == pytest.approx(termed_at + GRACE_S, abs=1.0)
    assert json.loads(term_line.split(" ", 2)[2])["kind"] == "stopping"  # there at SIGTERM
    c.node_up(node)


def test_a_drain_with_notice_tells_the_job_first_and_takes_the_node_down_after_it(service):
    c = service.client()
    job = c.submit(command=python_job(BATCH), vc="vc1", gpus=1, name="drained")
    wait_until(lambda: lines(job, "READY"), what="the job to run")
    (node,) = {t["node"] for t in job.refresh().data["tasks"]}
    asked = time.time()
    shown = c.node_down(node, "kernel update", notice_s=3)
    assert shown["healthy"]  # still in service during the notice
    stopping = job.refresh().data["stopping"]
    assert stopping["kind"] == "drain" and "kernel update" in stopping["reason"]
    notice_line = wait_until(lambda: lines(job, "NOTICE"), what="the notice")[0]
    assert json.loads(notice_line.split(" ", 2)[2])["kind"] == "drain"
    term_line = wait_until(lambda: lines(job, "SIGTERM"), what="SIGTERM", timeout=60)[0]
    assert float(term_line.split()[1]) >= asked + 3 - 0.05  # not before the notice ran out
    node_view = wait_until(
        lambda: [n for n in c.cluster()["nodes"] if n["name"] == node and not n["healthy"]],
        what="the node to be down",
    )
    assert "kernel update" in node_view[0]["reason"]
    c.node_up(node)


def test_a_node_put_back_during_its_notice_is_not_taken_down(service):
    c = service.client()
    job = c.submit(command="sleep 60", vc="vc1", gpus=1, name="stays")
    wait_until(lambda: job.refresh().state == "RUNNING", what="the job to run")
    (node,) = {t["node"] for t in job.data["tasks"]}
    c.node_down(node, "maybe", notice_s=2)
    c.node_up(node)
    time.sleep(3)
    assert job.refresh().state == "RUNNING"
    assert all(n["healthy"] for n in c.cluster()["nodes"] if n["name"] == node)
    job.cancel()
