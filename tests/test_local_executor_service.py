"""Given the real service driving the local executor on the virtual 2 x 4 GPU cluster (VCs
``default`` and ``vc1``, one node each), expect real processes to follow the job lifecycle:
preemption stops an opportunistic job within the grace period and requeues it, cancel leaves
nothing behind, and a kill -9 of the service loses no task: after a restart the running ones are
re-adopted (same processes) and finish with their real exit codes."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from local_exec_util import processes_under
from service_process import spawn_service
from waiting import wait_until

from labhive.scheduler.client import Client
from labhive.scheduler.executors.env import free_port

pytest_plugins = ["service_fixtures"]

GRACE_S = 1.0
#: A task that ignores SIGTERM and leaves children that ignore it too, one in its own session.
STUBBORN = (
    "trap '' TERM; (trap '' TERM; sleep 60) & setsid sh -c 'trap \"\" TERM; sleep 60' & "
    "echo up; wait"
)


def state(job) -> str:
    return job.refresh().state


@pytest.fixture
def service(tmp_path: Path):
    from service_fixtures import live_service

    with live_service(tmp_path / "data", grace_s=GRACE_S) as live:
        yield live


def test_a_prod_job_preempts_an_oppo_job_within_the_grace_period_and_it_is_requeued(service):
    c = service.client()
    jobs_dir = service.data_dir / "jobs"
    oppo = c.submit(command=STUBBORN, vc="default", gpus=4, tasks=2, priority="oppo", name="o")
    wait_until(lambda: state(oppo) == "RUNNING", what="the oppo job to run")
    wait_until(lambda: len(processes_under(jobs_dir)) >= 8, what="the oppo job's processes")
    t0 = time.monotonic()
    prod = c.submit(command="sleep 1; echo prod ran", vc="vc1", gpus=4, priority="prod")
    wait_until(lambda: processes_under(jobs_dir / str(oppo.id)) == [], what="oppo to stop")
    # Killed after the grace period, not left running: the bound is loose because CI is shared.
    assert time.monotonic() - t0 < GRACE_S + 15.0
    wait_until(lambda: state(prod) == "RUNNING", what="the prod job to start")
    assert state(oppo) == "WAITING"
    moves = [(e["from_state"], e["to_state"], e["reason"]) for e in oppo.events()]
    assert moves[-1] == ("RUNNING", "WAITING", "preempted")
    assert oppo.retries_used == 0
    assert prod.wait(20, 0.05).state == "SUCCEEDED"
    wait_until(lambda: state(oppo) == "RUNNING", what="the oppo job to run again")
    assert oppo.attempt == 2


def test_cancel_leaves_no_process_behind(service):
    c = service.client()
    job = c.submit(command=STUBBORN, vc="vc1", gpus=1, name="stubborn")
    workdir = service.data_dir / "jobs" / str(job.id)
    wait_until(lambda: len(processes_under(workdir)) >= 5, what="the job's processes")
    job.cancel()
    assert job.state == "STOPPED"
    assert processes_under(workdir) == []


def test_an_straced_job_lists_its_system_call_log_as_an_observation(service):
    c = service.client()
    job = c.submit(command="cat /etc/hostname", vc="vc1", gpus=1, observe="strace", memory_mb=512)
    assert job.wait(20, 0.05).state == "SUCCEEDED"
    (obs,) = c.observations(job.id)
    assert (obs["task"], obs["kind"]) == ("main-0", "strace") and obs["size"] > 0
    assert "/etc/hostname" in Path(obs["path"]).read_text()
    memory = job.tasks[0]["limits"]["memory"]  # what was enforced is on the job
    assert memory["enforced"] and memory["bytes"] == 512 << 20
    assert job.tasks[0]["address"] == "127.0.0.1"  # where a server in it is reached


# ---- kill -9 of the service --------------------------------------------------------------


def supervisor_pid(data_dir: Path, job_id: int) -> int:
    (handle,) = (data_dir / "jobs" / str(job_id)).glob("*/*/handle.json")
    return int(json.loads(handle.read_text())["pid"])


@pytest.fixture
def data_dir(tmp_path: Path):
    data = tmp_path / "data"
    yield data
    for leftover in processes_under(data):  # a failed test must not leave its tasks running
        leftover.kill()


def test_after_kill_9_of_the_service_its_jobs_are_readopted_and_finish_normally(data_dir):
    go, go_early = data_dir.parent / "go", data_dir.parent / "go-early"
    wait_for = "while [ ! -e {0} ]; do sleep 0.05; done; "
    port = free_port()
    first = spawn_service(data_dir, port, GRACE_S)
    c = Client(f"http://127.0.0.1:{port}/api/v1", (data_dir / "admin.token").read_text().strip())
    ok = c.submit(command=wait_for.format(go) + "echo done", vc="vc1", gpus=1, name="ok")
    bad = c.submit(command=wait_for.format(go) + "exit 4", vc="vc1", gpus=1, name="bad")
    early = c.submit(command=wait_for.format(go_early) + "exit 0", vc="vc1", gpus=1, name="early")
    jobs = (ok, bad, early)
    wait_until(lambda: all(state(j) == "RUNNING" for j in jobs), what="the jobs to run")
    wait_until(lambda: all(list(data_dir.glob(f"jobs/{j.id}/*/*/handle.json")) for j in jobs))
    pids = {j.id: supervisor_pid(data_dir, j.id) for j in jobs}

    first.send_signal(signal.SIGKILL)
    first.wait()
    go_early.touch()  # "early" ends while no service is watching
    wait_until(lambda: list(data_dir.glob(f"jobs/{early.id}/*/*/exit.json")), what="early's end")
    wait_until(
        lambda: len(processes_under(data_dir / "jobs" / str(ok.id))) >= 2,
        what="ok's supervisor and command, unaffected by the kill",
    )

    second = spawn_service(data_dir, port, GRACE_S)
    try:
        assert state(ok) == "RUNNING" and state(bad) == "RUNNING"
        go.touch()
        assert ok.wait(20, 0.05).state == "SUCCEEDED"
        assert (bad.wait(20, 0.05).state, bad.exit_code) == ("FAILED", 4)
        assert early.wait(20, 0.05).state == "SUCCEEDED"
        assert c.logs(ok.id).data == "done\n"
        for job in jobs:  # the same processes carried on: one start each, nothing relaunched
            assert [e["reason"] for e in job.events()].count("started") == 1
            assert supervisor_pid(data_dir, job.id) == pids[job.id]
        assert processes_under(data_dir / "jobs") == []
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=20)
