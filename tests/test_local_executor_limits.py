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
    if memory["by"] == "cgroup-v2":
        assert exit.exit_code == 137 and "memory limit of 150 MB" in exit.reason
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
    assert Path(h.info["limits"]["cgroup"], "cpu.max").read_text().split() == ["25000", "100000"]
    assert wait_exits(ex, 1, timeout_s=20)[h.key].exit_code == 0
    share = float(ex.read_log(h, "stdout", 0, 100))
    assert share < 0.35, f"the task got {share:.2f} of a core with a quota of 0.25"
