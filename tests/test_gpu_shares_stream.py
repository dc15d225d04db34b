"""Given one GPU, a stream of half-GPU jobs (one a second, each running 2 s) and one whole-GPU
job submitted into it, expect the whole-GPU job to start within a few seconds, in ``labhive
replay``, ``labhive simulate`` and the live service alike: the shares queued after it stop
joining the GPU, whose last two halves end, and it gets the GPU. Before, each new half joined
the GPU beside the one still running, so the GPU was never whole while the stream lasted."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from isolation_util import isolated_service, needs_root
from sim_helpers import ONE_GPU
from waiting import job_done, wait_until

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.jobs import PRIORITY_CLASSES, JobSpec, RoleSpec
from labhive.scheduler.core.model import Start, Submit
from labhive.scheduler.drivers.replay import replay, snapshot
from labhive.scheduler.drivers.scenario import load_scenario
from labhive.scheduler.policies import get_policy
from labhive.scheduler.sim.engine import Simulation
from labhive.scheduler.sim.machines import Machine, cluster_dict
from labhive.scheduler.sim.runner import run_scenario

STREAM_S = 120  # halves arrive for two minutes
WHOLE_AT = 10.5  # the whole-GPU job arrives while two halves run
#: It waits for the halves on the GPU to end (2 s), and for no half queued after it.
BOUND_S = 3.0
#: The live stream: halves for 30 s, the whole-GPU job 5 s in; on the loaded shared machine a
#: task's start takes up to a few seconds, so the live bound is wider (the stream lasts longer).
LIVE_STREAM, LIVE_WHOLE_AT, LIVE_BOUND_S = 30, 5, 12.0


def scenario(tmp_path: Path) -> Path:
    lines = [f"  - {{at: {t}, submit: {{name: h{t}, vc: vc1, gpus: 0.5, duration: 2}}}}"
             for t in range(STREAM_S)]  # fmt: skip
    lines.append(f"  - {{at: {WHOLE_AT}, submit: {{name: whole, vc: vc1, gpus: 1, duration: 5}}}}")
    cluster = tmp_path / "one-gpu.yaml"
    cluster.write_text(ONE_GPU)
    path = tmp_path / "stream.yaml"
    path.write_text(f"cluster: {cluster}\nevents:\n" + "\n".join(lines) + "\n")
    return path


def first_running(steps: list[dict[str, Any]], name: str) -> float | None:
    for step in steps:
        for job in step["jobs"]:
            if job["name"] == name and job["state"] == "RUNNING":
                return float(step["t"])
    return None


def test_a_stream_of_halves_does_not_hold_a_whole_gpu_job_back_in_replay_and_simulate(
    tmp_path: Path,
) -> None:
    loaded = load_scenario(scenario(tmp_path))
    replayed = replay(loaded).steps
    simulated: list[dict[str, Any]] = []

    def observe(sim: Simulation, label: str) -> None:
        simulated.append(snapshot(sim, label))

    run_scenario("hived", loaded, observe=observe)
    for steps in (replayed, simulated):
        start = first_running(steps, "whole")
        assert start is not None and start - WHOLE_AT <= BOUND_S, start
        # halves queued after it waited for it; those queued before it ran at once
        assert first_running(steps, "h11") is not None
        assert first_running(steps, "h11") >= start  # type: ignore[operator]
        assert first_running(steps, "h10") == 10.0
        at_11 = [s for s in steps if s["t"] == 11.0][-1]
        (h11,) = [j for j in at_11["jobs"] if j["name"] == "h11"]
        assert h11["state"] == "WAITING"
        assert h11["reason"].startswith("waits for 0.5 GPU: job whole, queued ahead of it")
    assert simulated == replayed


@needs_root
def test_the_live_service_starts_the_whole_gpu_job_amid_a_stream_of_halves(
    tmp_path: Path,
) -> None:
    """The same on the real service: alice's halves (``sleep 2``) arrive every second for
    30 s, the whole-GPU job 5 s in; it starts within ``LIVE_BOUND_S`` (the halves on the GPU
    end, plus the service's start-up of tasks on a loaded machine), not when the stream ends,
    and every half queued after it starts after it."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(ONE_GPU)
    with isolated_service(tmp_path / "data", cluster=str(cluster)) as live:
        alice = live.client("alice-token-123")
        halves, whole = [], None
        began = time.monotonic()
        for n in range(LIVE_STREAM):
            if n == LIVE_WHOLE_AT:
                whole = alice.submit(name="whole", command="sleep 3", vc="vc1", gpus=1)
            halves.append(alice.submit(name=f"h{n}", command="sleep 2", vc="vc1", gpus=0.5))
            time.sleep(max(0.0, began + n + 1 - time.monotonic()))
        assert whole is not None
        for job in (whole, *halves):
            wait_until(job_done(job), f"job {job.id} done", 120)
            assert job.state == "SUCCEEDED", job.data
        started = whole.data["started_at"]
        assert started - whole.data["submitted_at"] <= LIVE_BOUND_S, whole.data
        for half in halves[LIVE_WHOLE_AT:]:
            assert half.data["started_at"] >= started, (half.data, whole.data)


def test_a_whole_gpu_job_its_users_cap_keeps_waiting_holds_no_share() -> None:
    """A VC of two GPUs that lets one user run one: bob runs one, so his second whole-GPU job
    waits for his cap, not for a GPU; alice's second half still joins her first's GPU."""
    raw = cluster_dict([Machine("n0", 2)])
    raw["virtualClusters"]["default"]["userLimits"] = {"maxRunningGpus": 1}
    sched = get_policy("hived", load_cluster_config(raw))

    def submit(name: str, user: str, share: int) -> list[str]:
        role = RoleSpec("main", 1, gpu=1, share_milli=share)
        prod = PRIORITY_CLASSES["prod"]
        spec = JobSpec(name=name, vc="default", priority=prod, roles=(role,), user=user)
        return [d.job_id for d in sched.handle(Submit(name, spec, 0.0)) if isinstance(d, Start)]

    assert submit("b0", "bob", 0) == ["b0"]
    assert submit("a0", "alice", 500) == ["a0"]
    assert submit("b1", "bob", 0) == []  # his cap
    assert submit("a1", "alice", 500) == ["a1"]
