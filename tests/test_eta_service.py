"""ETAs in the live service: given the virtual 2 x 4 GPU cluster (VCs ``default`` and ``vc1``,
a node each) with one job running in vc1 under a declared limit and two queued behind it, expect
GET /jobs/{id} to carry the starts the limits imply, the first estimate and its error stored
when the job starts, and the accuracy on /metrics and in ``labhive eta-report``."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_until

from labhive.scheduler.client import Rejected
from labhive.scheduler.service.eta import stored_accuracy

pytest_plugins = ["service_fixtures"]


@pytest.fixture
def service(tmp_path: Path):
    from service_fixtures import live_service

    with live_service(tmp_path / "data", grace_s=0.5) as live:
        yield live


def test_waiting_jobs_get_the_starts_their_queue_implies(service, capsys):
    c = service.client()
    a = c.submit(command="sleep 600", vc="vc1", gpus=4, name="a", time_limit=1000)
    wait_until(lambda: a.refresh().state == "RUNNING", what="a to run")
    b = c.submit(command="sleep 600", vc="vc1", gpus=4, name="b", time_limit=30)
    d = c.submit(command="sleep 600", vc="vc1", gpus=4, name="d", time_limit=30)
    wait_until(lambda: d.refresh().data.get("eta") is not None, what="d's estimate")
    started = a.data["started_at"]
    b.refresh()
    # no history of how much of their limits jobs use: a tenth to all of it (p10/p50/p90 of
    # 0.1, 0.2 ... 1.0 are 0.19, 0.55, 0.91); a is under 100 s in, so no share is behind it
    ends = [started + x * 1000 for x in (0.55, 0.19, 0.91)]
    assert [b.data[k] for k in ("eta", "eta_low", "eta_high")] == pytest.approx(ends, abs=0.01)
    after = [e + x * 30 for e, x in zip(ends, (0.55, 0.19, 0.91), strict=True)]
    assert [d.data[k] for k in ("eta", "eta_low", "eta_high")] == pytest.approx(after, abs=0.01)
    assert "starts in ~" in cli(service, capsys, "show", str(d.id))[1]
    assert "starts in ~" in cli(service, capsys, "queue")[1]
    assert "starts in ~" in cli(service, capsys, "jobs", "--state", "WAITING")[1]
    queue = c._get("/queue")
    etas = {e["id"]: e["eta"] for e in queue["waiting"]}
    assert etas[b.id] == pytest.approx(ends[0], abs=0.01)
    a.cancel()
    wait_until(lambda: b.refresh().state == "RUNNING", what="b to run")

    def b_scored():
        return [x for x in stored_accuracy(service.running.service.store) if x.vc == "vc1"]

    (acc,) = wait_until(b_scored, what="b's error to be stored")
    assert acc.starts == 1 and acc.coverage == 0.0  # cancelled long before its limit
    assert acc.median_abs_error_s > 50
    code, out, _ = cli(service, capsys, "eta-report")
    assert code == 0 and "vc1" in out and "0%" in out
    metrics = httpx.get(service.url + "/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(metrics)}
    (ratio,) = families["labhive_eta_range_coverage_ratio"].samples
    assert ratio.labels == {"vc": "vc1"} and ratio.value == 0.0
    assert "labhive_eta_error_seconds" in families
    (forecasts,) = families["labhive_eta_forecasts"].samples  # what the ETA thread cost
    (cpu,) = families["labhive_eta_forecast_cpu_seconds"].samples
    assert forecasts.value >= 1 and cpu.value > 0


def cli(service, capsys, *argv: str) -> tuple[int, str, str]:
    from labhive.scheduler.cli import main

    code = main([argv[0], "--url", service.url, "--token", service.admin, *argv[1:]])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_suggestions_when_applied_start_the_job(service, capsys):
    """vc1 is full for 10 min; a 4-GPU job waits there. Moving it to the idle VC default, or
    making it opportunistic, starts it now; halving its GPUs does not (vc1 is full), so it is
    not offered (it was, with the job's own ETA)."""
    c = service.client()
    c.submit(command="sleep 600", vc="vc1", gpus=4, name="hog", time_limit="10m")
    waiting = c.submit(command="sleep 600", vc="vc1", gpus=4, name="mine", time_limit="5m")
    wait_until(lambda: waiting.refresh().data.get("eta") is not None, what="an estimate")
    tips = c._get(f"/jobs/{waiting.id}/suggest")["suggestions"]
    soon = {t["flags"]: t for t in tips if t["soon"]}
    assert set(soon) == {"--vc default", "--priority oppo"}
    assert soon["--priority oppo"]["risk"].startswith("preemptible")
    assert {t["flags"] for t in tips} == {"--vc default", "--priority oppo"}
    out = cli(service, capsys, "show", str(waiting.id), "--suggest")[1]
    assert "to start it now: submit to VC default (--vc default)" in out
    moved = c.submit(command="sleep 600", vc="default", gpus=4, name="mine2", time_limit="5m")
    wait_until(lambda: moved.refresh().state == "RUNNING", what="the suggested variant to run")
    assert cli(service, capsys, "show", str(moved.id), "--suggest")[0] == 2  # not waiting


#: A stand-in for a notebook server: it listens where the hub looks for it (the spawner's start
#: returns once its server listens), and never ends.
LISTENING_SERVER = (
    "import os, socket, time, urllib.parse as u;"
    "port = u.urlparse(os.environ['JUPYTERHUB_SERVICE_URL']).port;"
    "s = socket.create_server(('127.0.0.1', port));"
    "time.sleep(600)"
)


def spawner(service, tmp_path, name: str = "", gpus: int = 1):
    """Alice's spawner (her server ``name``) for a ``gpus``-GPU server, as the hub makes it."""
    import sys
    from types import SimpleNamespace

    from jupyterhub.objects import Hub

    from labhive.hub_extension.spawner import LabHiveSpawner

    made = LabHiveSpawner(
        user=SimpleNamespace(name="alice", escaped_name="alice", url="/user/alice/", id=1),
        hub=Hub(ip="127.0.0.1", port=1, base_url="/hub/"),
        name=name,
        api_token="alice-token-123",
        service_url=service.url,
        service_token=service.admin,
        cmd=[sys.executable, "-c", LISTENING_SERVER],
        secrets_dir=str(tmp_path / "secrets"),
        profiles=[{"slug": "gpus", "display_name": f"{gpus} GPUs", "gpus": gpus}],
        poll_s=0.1,
    )
    made.user_options = {"profile": "gpus"}
    return made


async def spawn_page(made, words: str) -> str:
    """The first progress message of a queued server's spawn page that holds ``words``."""
    import asyncio

    start = asyncio.ensure_future(made.start())
    try:
        async for event in made.progress():
            if words in event["message"]:
                return str(event["message"])
        raise AssertionError(f"progress ended without {words!r}")
    finally:
        start.cancel()
        await asyncio.gather(start, return_exceptions=True)
        await made.stop(now=True)


def test_a_queued_notebook_server_s_spawn_page_says_when_it_starts(service, tmp_path):
    """vc1 is held for up to 5 min by a job with a limit, a 1-min job waits first (both at the
    servers' priority, so neither is preempted): alice's 1-GPU server is second in vc1's queue
    and starts when both have ended, by 6 min at the latest; with no history of how much of
    their limits jobs use, ~55% of that (10-100%, p10-p90 19-91%)."""
    import asyncio

    c = service.client()
    prod = {"command": "sleep 600", "vc": "vc1", "gpus": 4, "priority": "prod"}  # as servers
    hog = c.submit(name="hog", time_limit="5m", **prod)
    wait_until(lambda: hog.refresh().state == "RUNNING", what="hog to run")
    c.submit(name="next", time_limit="1m", **prod)
    page = spawn_page(spawner(service, tmp_path), "expected to start")
    message = asyncio.run(asyncio.wait_for(page, 60))
    assert message.startswith(
        "WAITING: position 2 of 2 in vc1, expected to start in ~3 min (1-5) —"
    )


def test_a_queue_behind_a_running_server_says_no_estimate_and_what_it_waits_for(
    service, tmp_path, capsys
):
    """alice's 4-GPU notebook server holds vc1 (servers have no end: no limit, none ever
    ended, though other jobs did). A 4-GPU job queued there, and alice's second server behind
    it (ahead of it: servers run at prod), get no estimate: the REST fields, the CLI and the
    spawn page say what they wait for.
    Before, all jobs' durations made that "~16 min (1-48)"."""
    import asyncio

    c = service.client()
    for k in range(3):  # history, but of jobs unlike a server
        done = c.submit(command="true", vc="default", gpus=1, name=f"quick{k}")
        wait_until(lambda j=done: j.refresh().state == "SUCCEEDED", what="a quick job to end")
    first = spawner(service, tmp_path, gpus=4)

    async def run_server() -> None:
        await asyncio.wait_for(first.start(), 60)

    asyncio.run(run_server())
    try:
        job = c.submit(command="sleep 600", vc="vc1", gpus=4, name="behind", time_limit="5m")
        wait_until(lambda: job.refresh().data.get("waits_for"), what="what it waits for")
        assert job.data["waits_for"] == "a notebook server in VC vc1 to stop"
        assert job.data["eta"] is None and job.data["eta_low"] is None
        (entry,) = [e for e in c._get("/queue")["waiting"] if e["id"] == job.id]
        assert entry["waits_for"] == job.data["waits_for"] and entry["eta"] is None
        out = cli(service, capsys, "show", str(job.id))[1]
        assert "waits for a notebook server in VC vc1 to stop; no estimate" in out
        assert "starts in" not in out
        page = spawn_page(spawner(service, tmp_path, name="second", gpus=4), "no estimate")
        message = asyncio.run(asyncio.wait_for(page, 60))
        assert message.startswith(
            "WAITING: position 1 of 2 in vc1, waits for a notebook server in VC vc1 to stop; "
            "no estimate"
        ), message
    finally:
        asyncio.run(first.stop(now=True))


def test_a_job_that_can_never_run_is_refused_with_what_would_run_and_that_runs(service):
    """vc1 is one node of 4 GPUs: 8 GPUs there never fit, in one task or two; 4 do."""
    c = service.client()
    with pytest.raises(Rejected, match=r"4 GPUs") as err:
        c.submit(command="sleep 600", vc="vc1", gpus=8, name="big")
    message = str(err.value)
    assert err.value.status == 422
    assert "It would run if you ask for 4 GPUs per task instead of 8 (--gpus 4)" in message
    fixed = c.submit(command="sleep 600", vc="vc1", gpus=4, name="big")
    wait_until(lambda: fixed.refresh().state == "RUNNING", what="the suggested variant to run")


def test_published_ranges_are_calibrated_from_the_vc_s_own_starts(service):
    """vc1's last 20 waiting jobs all started a minute after their forecast, long before the
    low end of their ranges (10-30 min). Then hog runs there under a 1000 s limit and b waits:
    its range shown reaches down to the soonest hog can end (a tenth of its limit, with no
    history of limits) instead of the forecast's p10 (19%); its middle is the forecast's."""
    from sqlalchemy import delete, insert

    from labhive.scheduler.service.store import job_etas

    c = service.client()
    quick = [c.submit(command="true", vc="vc1", gpus=1, name=f"q{k}") for k in range(20)]
    for j in quick:
        wait_until(lambda j=j: j.refresh().state == "SUCCEEDED", what="a quick job to end")
    t0 = quick[0].data["submitted_at"] - 10_000
    rows = [
        {"job_id": j.id, "vc": "vc1", "predicted_at": t0 + k, "eta": t0 + k + 1200,
         "eta_low": t0 + k + 600, "eta_high": t0 + k + 1800, "started_at": t0 + k + 60,
         "error_s": -1140.0, "in_range": False}
        for k, j in enumerate(quick)
    ]  # fmt: skip
    store = service.running.service.store
    with store.write() as conn:
        conn.execute(delete(job_etas).where(job_etas.c.job_id.in_([j.id for j in quick])))
        conn.execute(insert(job_etas), rows)
    hog = c.submit(command="sleep 600", vc="vc1", gpus=4, name="hog", time_limit=1000)
    wait_until(lambda: hog.refresh().state == "RUNNING", what="hog to run")
    b = c.submit(command="sleep 600", vc="vc1", gpus=4, name="b", time_limit=30)
    wait_until(lambda: b.refresh().data.get("eta") is not None, what="b's estimate")
    started = hog.data["started_at"]
    assert b.data["eta"] == pytest.approx(started + 550, abs=0.01)  # 55% of 1000 s
    assert b.data["eta_low"] == pytest.approx(started + 100, abs=0.01)  # not + 190
    assert b.data["eta_high"] < started + 910  # the forecast's p90; its starts were early
