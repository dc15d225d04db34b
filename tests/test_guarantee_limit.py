"""Given tasks that declare a guarantee (what placement counts) and a limit (what the cgroup
enforces), expect a classroom of idle notebook servers to fit on a 2-core machine, a task to
burst to its limit and no further, and one that asks for a limit below its guarantee to be
refused with a message saying what to ask for."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from local_exec_util import launch_one, wait_exits
from service_fixtures import live_service
from waiting import wait_until

from labhive.client import LabHiveError
from labhive.hub_extension.spawner import LabHiveSpawner
from labhive.scheduler.core.detect import machine_resources
from labhive.scheduler.core.jobs import SpecError, parse_job
from labhive.scheduler.executors.local import LocalExecutor


def alloc(mb: int) -> str:
    """A command that really writes ``mb`` MB (resident memory grows, not just reservations)."""
    return f"{sys.executable} -c \"x = b'x' * ({mb} << 20); print('survived')\""


def cpu_quota_cores(info: dict) -> float:
    """The quota the task's cgroup holds, in cores (cgroup v2 cpu.max or v1 cfs quota)."""
    record = info["limits"]
    if record["cpu"]["by"] == "cgroup-v2":
        quota, period = Path(record["cgroup"], "cpu.max").read_text().split()
    else:
        (cpu,) = [c for c in record["cgroups"] if "/cpu/" in c or "/cpu," in c]
        quota = Path(cpu, "cpu.cfs_quota_us").read_text().strip()
        period = Path(cpu, "cpu.cfs_period_us").read_text().strip()
    return int(quota) / int(period)


# ---- the executor: the limit is what the cgroup holds --------------------------------------


def test_a_task_guaranteed_a_tenth_of_a_core_with_a_limit_of_two_gets_a_quota_of_two_cores(
    tmp_path: Path,
):
    ex = LocalExecutor(tmp_path)
    h = launch_one(ex, "server", "sleep 30", cpu=0.1, cpu_limit=2.0)
    try:
        if not h.info["limits"]["cpu"]["enforced"]:
            pytest.skip(f"CPU limits cannot be enforced here: {h.info['limits']['cpu']['why']}")
        assert cpu_quota_cores(h.info) == 2.0
        assert h.info["limits"]["cpu"]["cores"] == 2.0
    finally:
        ex.stop([h], grace_s=0)


def test_a_tasks_memory_limit_not_its_guarantee_is_what_oom_kills_it(tmp_path: Path):
    """Guaranteed 64 MB, limited to 300 MB: 150 MB is fine (the guarantee is no ceiling),
    400 MB is killed, and the reason names the limit."""
    ex = LocalExecutor(tmp_path)
    within = launch_one(ex, "within", alloc(150), memory_mb=64, memory_limit_mb=300)
    if within.info["limits"]["memory"]["by"] not in ("cgroup-v2", "cgroup-v1"):
        pytest.skip(f"no memory cgroup here: {within.info['limits']['memory']}")
    assert within.info["limits"]["memory"]["bytes"] == 300 << 20
    assert wait_exits(ex, 1, timeout_s=30)[within.key].exit_code == 0
    assert ex.read_log(within, "stdout", 0, 100) == b"survived\n"

    over = launch_one(ex, "over", alloc(400), memory_mb=64, memory_limit_mb=300)
    ended = wait_exits(ex, 1, timeout_s=30)[over.key]
    assert ended.exit_code == 137, ended
    assert ended.reason.startswith("killed: over its memory limit of 300 MiB"), ended.reason
    assert b"survived" not in ex.read_log(over, "stdout", 0, 100)


# ---- the spec: limits default to the guarantee; never below it ----------------------------


def test_a_limit_defaults_to_the_guarantee_and_may_not_be_below_it():
    plain = parse_job({"name": "a", "cpu": 2, "memory_mb": 100}).roles[0]
    assert (plain.cpu_limit, plain.memory_limit_mb) == (None, None)
    assert (plain.cpu_max, plain.memory_max_mb) == (2.0, 100)
    burst = parse_job({"name": "b", "cpu": 0.1, "cpu_limit": 2, "memory_limit_mb": 4096}).roles[0]
    assert (burst.cpu, burst.cpu_max, burst.memory_mb, burst.memory_max_mb) == (
        0.1,
        2.0,
        1024,
        4096,
    )
    with pytest.raises(SpecError, match=r"cpu_limit: 0.5 is below the guarantee cpu = 1"):
        parse_job({"name": "c", "cpu": 1, "cpu_limit": 0.5})
    with pytest.raises(SpecError, match=r"memoryLimitMB: 10 is below the guarantee memoryMB"):
        parse_job(
            {
                "protocolVersion": 2,
                "name": "d",
                "taskRoles": {"w": {"resourcePerInstance": {"cpu": 1, "memoryMB": 512}}},
                "extras": {"labhive": {"taskRoles": {"w": {"memoryLimitMB": 10}}}},
            }
        )
    openpai = parse_job(
        {
            "protocolVersion": 2,
            "name": "e",
            "taskRoles": {"w": {"resourcePerInstance": {"gpu": 0, "cpu": 1, "memoryMB": 512}}},
            "extras": {"labhive": {"taskRoles": {"w": {"cpuLimit": 4, "memoryLimitMB": 2048}}}},
        }
    )
    assert (openpai.roles[0].cpu_max, openpai.roles[0].memory_max_mb) == (4.0, 2048)


# ---- the service: a classroom of servers on a 2-core machine --------------------------------


@contextmanager
def two_cores() -> Iterator[None]:
    """This process (and the service built in it) sees a 2-core machine, as a class does."""
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs and sched_setaffinity")
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, sorted(before)[:2])
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def test_forty_idle_servers_and_a_lab_job_all_run_on_the_default_cluster_of_a_two_core_machine(
    tmp_path: Path,
):
    """Sized as the spawner sizes a server by default (0.1 CPU and 512 MiB guaranteed, 2 CPUs
    and 4 GiB limit), 40 servers run at once, and a lab's 1-CPU cell still starts beside them
    (before: 1 CPU each, the 5th login waited)."""
    if machine_resources()[1] < 20 * 512 + 1024:  # 20 servers a virtual node, and the lab job
        pytest.skip("this machine has less memory than 20 servers' guarantees and a lab job")
    server = LabHiveSpawner()._resources({})
    assert server == {"cpu": 0.1, "memory_mb": 512, "cpu_limit": 2.0, "memory_limit_mb": 4096}
    with two_cores(), live_service(tmp_path / "data", grace_s=0.5) as live:
        client = live.client()
        servers = [
            client.submit(name=f"server-{i}", command="sleep 600", gpus=0, vc="default", **server)
            for i in range(40)
        ]
        lab = client.submit(name="lab3-cell", command="echo done", gpus=0, vc="vc1", cpu=1)

        def running() -> int:
            return sum(1 for j in client.jobs(state="RUNNING", limit=100))

        wait_until(lambda: running() == 40, "all 40 servers RUNNING", 240)
        assert {j.refresh().state for j in servers} == {"RUNNING"}
        assert lab.wait(timeout=60).state == "SUCCEEDED"
        (task,) = servers[0].data["tasks"]
        assert task["limits"]["cpu"]["cores"] == 2.0  # the limit, enforced (guarantee: 0.1)
        for job in servers:
            client.cancel(job.id)


def test_a_limit_below_the_guarantee_is_refused_at_submit(tmp_path: Path):
    with live_service(tmp_path / "data") as live:
        with pytest.raises(LabHiveError, match="memory_limit_mb: 100 is below the guarantee"):
            live.client().submit(
                name="x", command="true", gpus=0, memory_mb=512, memory_limit_mb=100
            )
        assert live.client().jobs() == []


# ---- replay: placement counts guarantees, whatever the limits --------------------------------


def test_replay_places_by_guarantees_so_jobs_whose_limits_overlap_run_together(tmp_path: Path):
    """Two nodes of 4 GPU slots (32 CPUs each: 8 per GPU when the config says nothing): three
    jobs guaranteed 20 CPUs with a limit of 32 fill both nodes, the third waits; limits never
    count."""
    from labhive.scheduler.drivers.replay import replay
    from labhive.scheduler.drivers.scenario import load_scenario

    path = tmp_path / "s.yaml"
    path.write_text(
        """\
events:
  - {at: 0, submit: {name: a, gpus: 0, cpu: 20, cpu_limit: 32, duration: 100}}
  - {at: 0, submit: {name: b, gpus: 0, cpu: 20, cpu_limit: 32, duration: 100}}
  - {at: 0, submit: {name: c, gpus: 0, cpu: 20, cpu_limit: 32, duration: 100}}
expect:
  - {at: 0, job: a, state: RUNNING}
  - {at: 0, job: b, state: RUNNING}
  - {at: 0, job: c, state: WAITING}
  - {at: 100, job: c, state: RUNNING}
"""
    )
    result = replay(load_scenario(path))
    assert result.failures == []
