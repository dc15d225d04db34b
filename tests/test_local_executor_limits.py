"""Given a task's memory and CPU request, expect the machine to hold it to them where it can,
and the handle to say what was enforced and how."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from local_exec_util import launch_one, wait_exits

from labhive.scheduler.executors.local import LocalExecutor


def alloc(mb: int) -> str:
    """A command that really writes ``mb`` MB (so resident memory grows, not just reservations)."""
    return f"{sys.executable} -c \"x = b'x' * ({mb} << 20); print('survived')\""


def test_a_task_over_its_memory_limit_does_not_get_the_memory(tmp_path: Path):
    ex = LocalExecutor(tmp_path)
    h = launch_one(ex, "hog", alloc(400), memory_mb=150)
    memory = h.info["limits"]["memory"]
    print("memory limit enforced by", memory)
    if not memory["enforced"]:
        pytest.skip(f"memory limits cannot be enforced here: {memory['why']}")
    assert memory["bytes"] == 150 << 20
    exit = wait_exits(ex, 1, timeout_s=20)[h.key]
    assert exit.exit_code not in (0, None)
    assert b"survived" not in ex.read_log(h, "stdout", 0, 4096)
    if memory["by"] in ("cgroup-v2", "cgroup-v1"):
        assert exit.exit_code == 137, exit
        assert exit.reason.startswith("killed: over its memory limit of 150 MiB"), exit.reason
    else:
        assert b"MemoryError" in ex.read_log(h, "stderr", 0, 65536)


def test_a_task_within_its_memory_limit_runs_normally(tmp_path: Path):
    ex = LocalExecutor(tmp_path)
    h = launch_one(ex, "modest", alloc(30), memory_mb=150)
    assert wait_exits(ex, 1, timeout_s=20)[h.key].exit_code == 0
    assert ex.read_log(h, "stdout", 0, 100) == b"survived\n"


SPIN = (
    f'{sys.executable} -c "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass\n'
    'print(time.process_time() / (time.time() - t))"'
)


def test_cpu_is_capped_where_cgroups_allow_and_the_record_says_why_not_elsewhere(tmp_path):
    ex = LocalExecutor(tmp_path)
    h = launch_one(ex, "spin", SPIN, cpu=0.25)
    cpu = h.info["limits"]["cpu"]
    print("cpu limit:", cpu)
    if not cpu["enforced"]:
        assert "no cgroup" in cpu["why"]
        ex.stop([h], grace_s=0)
        pytest.skip(f"CPU limits cannot be enforced here: {cpu['why']}")
    if cpu["by"] == "cgroup-v2":
        quota = Path(h.info["limits"]["cgroup"], "cpu.max").read_text().split()
        assert quota == ["25000", "100000"]
    else:
        (cpu_cgroup,) = [c for c in h.info["limits"]["cgroups"] if "/cpu/" in c]
        assert Path(cpu_cgroup, "cpu.cfs_quota_us").read_text().strip() == "25000"
    assert wait_exits(ex, 1, timeout_s=20)[h.key].exit_code == 0
    share = float(ex.read_log(h, "stdout", 0, 100))
    assert share < 0.35, f"the task got {share:.2f} of a core with a quota of 0.25"


def test_the_cgroup_record_and_files_carry_the_requested_limits(tmp_path: Path):
    # cgroupfs cannot be had here, so a plain directory stands in for the parent: this checks
    # what is written (the kernel's enforcement is checked by the tests above where it exists).
    from labhive.scheduler.executors import limits
    from labhive.scheduler.executors.base import TaskKey

    support = limits.LimitSupport(tmp_path)
    record = limits.apply(support, TaskKey("7", 1, "work er", 0), cpu=1.5, memory_mb=256)
    cgroup = Path(record["cgroup"])
    assert cgroup == tmp_path / "7-1-work_er-0"
    assert (cgroup / "memory.max").read_text() == str(256 << 20)
    assert (cgroup / "cpu.max").read_text() == "150000 100000"
    assert (cgroup / "memory.oom.group").read_text() == "1"
    assert record["memory"] == {"enforced": True, "by": "cgroup-v2", "bytes": 256 << 20}
    assert record["cpu"] == {"enforced": True, "by": "cgroup-v2", "cores": 1.5}
    (cgroup / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert limits.oom_killed(record)


def test_without_cgroups_memory_falls_back_to_an_rlimit_and_cpu_says_why():
    from labhive.scheduler.executors import limits
    from labhive.scheduler.executors.base import TaskKey

    support = limits.LimitSupport(None, "no v2 here")
    record = limits.apply(support, TaskKey("7", 1, "w", 0), cpu=2, memory_mb=64)
    assert record["rlimits"] == {"RLIMIT_DATA": 64 << 20}
    assert record["cpu"] == {"enforced": False, "why": "no cgroup: no v2 here"}
    assert not limits.oom_killed(record)


def test_the_pids_budget_leaves_the_host_a_quarter_and_shares_the_rest_by_slots():
    from labhive.scheduler.executors import limits

    # this machine's pid_max with 2 and 8 task slots: two tasks can no longer take every pid
    assert limits.pids_budget(32768, 2) == limits.PidsBudget(task=12288, service=24576)
    assert limits.pids_budget(32768, 8) == limits.PidsBudget(task=3072, service=24576)
    # a modern default pid_max: the per-task ceiling; a tiny one: the floor, reserve kept
    assert limits.pids_budget(4194304, 16) == limits.PidsBudget(16384, 3145728)
    assert limits.pids_budget(8192, 64) == limits.PidsBudget(256, 4096)


def test_the_nvidia_majors_are_read_from_proc_devices_and_named_in_the_record():
    from labhive.scheduler.executors import devfilter

    proc_devices = (
        "Character devices:\n  1 mem\n195 nvidia-frontend\n234 nvidia-nvswitch\n"
        "236 nvidia-caps\n237 nvidia-uvm\n\nBlock devices:\n  7 loop\n238 nvidia-fake-block\n"
    )
    majors = devfilter.nvidia_majors(proc_devices)
    assert majors == devfilter.NvidiaMajors(uvm=237, others=(234, 236))
    none = devfilter.DeviceRules((), majors)
    assert none.denied() == "every NVIDIA device (char major 195, nvidia-uvm 237, 234, 236)"
    one = devfilter.DeviceRules((3,), majors)
    assert one.denied() == (
        "/dev/nvidia* (major 195) but its own GPUs; every device of major 234, 236"
    )
    assert one.allows("c", 237, 0) and not none.allows("c", 237, 0)
    assert one.allows("c", 195, 255) and not one.allows("c", 195, 2)


def test_on_cgroup_v2_a_services_tasks_sit_under_its_parent_with_the_pids_cap(tmp_path: Path):
    # as above, plain files stand in for cgroupfs (no pure v2 host here): this checks what is
    # written; the kernel's enforcement of the same files is the v1 tests' (pids.max alike)
    from labhive.scheduler.executors import limits
    from labhive.scheduler.executors.base import TaskKey

    service = tmp_path / "dsvc"
    service.mkdir()
    (service / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (service / "cgroup.subtree_control").write_text("")
    budget = limits.PidsBudget(task=300, service=1200)
    record = limits.apply(
        limits.LimitSupport(tmp_path), TaskKey("7", 1, "w", 0), 1.0, 64, scope="dsvc", pids=budget
    )
    cgroup = Path(record["cgroup"])
    assert cgroup.parent == service and record["parents"] == [str(service)]
    assert (service / "cgroup.subtree_control").read_text() == "+memory +cpu +pids"
    assert (service / "pids.max").read_text() == "1200"
    assert (cgroup / "pids.max").read_text() == "300"
    assert record["pids"] == {
        "enforced": True, "by": "cgroup-v2", "max": 300, "service_max": 1200,
        "service_cgroup": str(service),
    }  # fmt: skip
    # a plain directory is no cgroup: the device filter cannot be attached, and the record says so
    assert record["devices"]["enforced"] is False
    assert record["devices"]["why"].startswith(f"cannot attach the device filter to {cgroup}")
