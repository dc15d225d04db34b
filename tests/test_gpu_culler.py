"""The GPU culler's rounds against the real LabHive service, whose GPU is the recorded H100
read through the real sampler (metrics_service.py). The hub's side is given as the JSON the
hub's and Jupyter server's APIs answer (users with servers, kernels), so each case sets it.

Given alice's 1-GPU server job: a busy kernel is never culled however long; a GPU whose job
process reads 37 % SM is never culled; idle kernels and a GPU at 0 % get a notice after the idle
time, then a stop after the notice (the job ends STOPPED, culled, on /metrics); activity during
the notice withdraws it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from metrics_service import labhive_service

from labhive.hub_extension.cull_rule import Action, Rule
from labhive.hub_extension.gpu_culler import (
    Culler,
    job_utilisation,
    kernel_view,
    servers_from_hub,
)


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


class Clock:
    def __init__(self) -> None:
        import time

        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world(tmp_path):
    with labhive_service(tmp_path) as w:
        yield w


def culler_for(world, clock: Clock, kernels: list[dict[str, Any]], started: float):
    hub_posts: list[tuple[str, Any]] = []
    users = [
        {
            "name": "admin",
            "servers": {"": {"ready": True, "url": "/user/admin/", "last_activity": iso(started)}},
        }
    ]

    def service_get(path: str) -> Any:
        r = world.client.get("/api/v1" + path, headers=world.headers)
        r.raise_for_status()
        return r.json()

    def service_post(path: str, body: Any) -> Any:
        r = world.client.post("/api/v1" + path, json=body, headers=world.headers)
        r.raise_for_status()
        return r.json()

    culler = Culler(
        Rule(gpu_idle_s=900, notice_s=60),
        hub_get=lambda path: users,
        hub_post=lambda path, body: hub_posts.append((path, body)),
        service_get=service_get,
        service_post=service_post,
        kernels_of=lambda server: kernels,
        clock=clock,
    )
    return culler, hub_posts


def server_job(world, sm: int) -> int:
    # the job "jupyter-admin" as the spawner names the admin's default server
    job, _ = world.running_on_the_gpu("jupyter-admin", sm=sm)
    world.nvml.recording["devices"][0]["utilization"]["gpu"] = sm
    world.wait_samples()
    return job


def test_idle_kernels_and_a_gpu_at_zero_get_a_notice_then_are_culled(world):
    clock = Clock()
    job = server_job(world, sm=0)
    kernels = [{"execution_state": "idle", "last_activity": iso(clock.now - 1)}]
    culler, _ = culler_for(world, clock, kernels, clock.now - 1)
    assert culler.round()[("admin", "")].action is Action.KEEP  # GPU idle from now on
    clock.now += 899
    assert culler.round()[("admin", "")].action is Action.KEEP
    clock.now += 1
    assert culler.round()[("admin", "")].action is Action.NOTICE
    shown = world.client.get(f"/api/v1/jobs/{job}", headers=world.headers).json()
    assert shown["stopping"]["kind"] == "culled" and "15 min" in shown["stopping"]["reason"]
    assert shown["stopping"]["deadline"] == pytest.approx(clock.now + 60)
    clock.now += 60
    assert culler.round()[("admin", "")].action is Action.STOP
    ended = world.wait_state(job, "STOPPED")
    assert ended["reason"] == "culled"
    assert "labhive_culled_jobs_total 1" in world.metrics()


def test_a_busy_kernel_is_never_culled_and_keeps_the_idle_culler_off(world):
    clock = Clock()
    job = server_job(world, sm=0)
    kernels = [{"execution_state": "busy", "last_activity": iso(clock.now - 86400)}]
    culler, hub_posts = culler_for(world, clock, kernels, clock.now - 86400)
    for _ in range(5):
        assert culler.round()[("admin", "")].action is Action.KEEP
        clock.now += 3600
    assert world.client.get(f"/api/v1/jobs/{job}", headers=world.headers).json()["state"] == (
        "RUNNING"
    )
    assert hub_posts and hub_posts[0][0] == "/users/admin/activity"


def test_a_working_gpu_is_never_culled_even_with_idle_kernels(world):
    clock = Clock()
    job = server_job(world, sm=37)
    kernels = [{"execution_state": "idle", "last_activity": iso(clock.now - 86400)}]
    culler, hub_posts = culler_for(world, clock, kernels, clock.now - 86400)
    for _ in range(4):
        decision = culler.round()[("admin", "")]
        assert decision.action is Action.KEEP and "working" in decision.why
        clock.now += 3600
    shown = world.client.get(f"/api/v1/jobs/{job}", headers=world.headers).json()
    assert shown["state"] == "RUNNING" and shown["stopping"] is None
    assert hub_posts  # it told the hub the server is active


def test_activity_during_the_notice_withdraws_it(world):
    clock = Clock()
    job = server_job(world, sm=0)
    kernels = [{"execution_state": "idle", "last_activity": iso(clock.now - 1)}]
    culler, _ = culler_for(world, clock, kernels, clock.now - 1)
    culler.round()
    clock.now += 900
    assert culler.round()[("admin", "")].action is Action.NOTICE
    clock.now += 30
    kernels[0]["execution_state"] = "busy"  # the student ran a cell after seeing the banner
    assert culler.round()[("admin", "")].action is Action.WITHDRAW
    shown = world.client.get(f"/api/v1/jobs/{job}", headers=world.headers).json()
    assert shown["state"] == "RUNNING" and shown["stopping"] is None


def test_hub_and_server_answers_are_read_as_servers_kernels_and_utilisation():
    users = [
        {"name": "a", "servers": {"": {"ready": True, "url": "/user/a/", "last_activity": None}}},
        {"name": "b", "servers": {"x": {"ready": False, "url": "/user/b/x/"}}},  # starting
    ]
    (only,) = servers_from_hub(users)
    assert (only.user, only.name, only.last_activity) == ("a", "", None)
    states, newest = kernel_view(
        [
            {"execution_state": "idle", "last_activity": "2026-11-27T08:00:00.000000Z"},
            {"execution_state": "busy", "last_activity": "2026-11-27T09:00:00Z"},
        ]
    )
    assert (
        states == ("idle", "busy") and newest == datetime(2026, 11, 27, 9, tzinfo=UTC).timestamp()
    )
    assert job_utilisation([]) is None
    assert job_utilisation([{"gpu_util": 0, "processes": []}]) == 0
    assert job_utilisation([{"gpu_util": 90, "processes": [{"pid": 1, "sm_util": 0}]}]) == 0
    assert job_utilisation([{"gpu_util": None, "processes": []}]) == 100  # unknown: busy
    stale = [{"gpu_util": 0, "processes": [], "time": 1000.0}]
    assert job_utilisation(stale, now=1100.0) == 0
    assert job_utilisation(stale, now=1121.0) is None  # the sampler stopped: unknown


def test_labhive_up_config_runs_both_cullers_with_the_scopes_they_need(tmp_path):
    from traitlets.config import Config

    from labhive.hub_extension.up import prepare

    culling = {"idle_s": 7200.0, "gpu_idle_s": 900.0, "notice_s": 60.0}
    plan, config, _ = prepare(tmp_path / "data", culling=culling)
    c = Config()
    exec(compile(config.read_text(), str(config), "exec"), {"c": c})
    services = {s["name"]: s for s in c.JupyterHub.services}
    idle = services["idle-culler"]["command"]
    assert idle[1:3] == ["-m", "jupyterhub_idle_culler"] and "--timeout=7200" in idle
    gpu = services["labhive-gpu-culler"]["command"]
    assert "--gpu-idle=900" in gpu and "--notice=60" in gpu
    assert f"--service-url={plan.service_url}" in gpu
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert set(roles["idle-culler"]["scopes"]) == {
        "list:users", "read:users:activity", "read:servers", "delete:servers",
    }  # fmt: skip
    assert {"users:activity", "access:servers", "custom:labhive:admin"} <= set(
        roles["labhive-gpu-culler"]["scopes"]
    )
    _, off, _ = prepare(tmp_path / "data2", culling=None)
    assert "add_culling" not in off.read_text()


def test_the_real_hub_starts_both_cullers_and_their_scopes_let_them_work(tmp_path):
    """labhive up's culling block on a real JupyterHub: the idle culler and the GPU culler run
    as its services, and the GPU culler's first round reads the hub and the LabHive service
    with the token the hub gave it (a missing scope would be a 403 in the hub's log)."""
    import psutil
    from hub_support import real_hub, wait_for

    culling = {"idle_s": 7200.0, "gpu_idle_s": 900.0, "notice_s": 8.0}
    lines = (
        "from labhive.hub_extension.culling import add_culling",
        "add_culling(c, c.LabHiveSpawner.service_url, c.JupyterHub.bind_url, "
        f"**{culling!r})  # noqa: F821",
    )
    with real_hub(tmp_path, *lines) as hub:
        assert hub.proc is not None

        def cullers() -> set[str]:
            found = set()
            for p in psutil.Process(hub.proc.pid).children(recursive=True):
                try:
                    cmd = " ".join(p.cmdline())
                except psutil.Error:  # a child that ended meanwhile (the proxy's helpers)
                    continue
                found |= {n for n in ("jupyterhub_idle_culler", "gpu_culler") if n in cmd}
            return found

        wait_for(lambda: cullers() == {"jupyterhub_idle_culler", "gpu_culler"}, 60, "cullers")
        wait_for(lambda: "first round done" in hub.log.read_text(), 60, "the GPU culler's round")
        log = hub.log.read_text()
        assert "round failed" not in log
        # a refused request, as the hub logs it ("] 403 GET /hub/api/...") or the culler's
        # HTTP client does; a bare "403" also matches ports and timestamps in the log
        assert re.search(r"\] 403 [A-Z]+ |HTTP/1\.1 403 ", log) is None, log
