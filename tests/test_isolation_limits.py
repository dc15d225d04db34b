"""Given cgroup v1 controllers (no v2 ones), expect a task's limits held by the kernel: memory
counted with shared memory and an OOM kill reported as such, a pids cap, a CPU quota that
throttles, NVIDIA device nodes other than the task's own denied; and every task cgroup removed
once the task ended, also after re-adoption by another executor."""

from __future__ import annotations

import dataclasses
import errno
import os
import shlex
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from isolation_util import (
    UID_A,
    needs_root,
    open_tmp_dir,
    parse_probe,
    probe_command,
    probe_env,
)
from local_exec_util import launch_one, task, wait_exits
from waiting import wait_until

from labhive.scheduler.executors import limits
from labhive.scheduler.executors.local import LocalExecutor

V1 = limits.detect_v1()
if limits.detect().cgroup_parent is not None:
    V1 = {}  # cgroup v2 is used where it works; these tests are about v1
pytestmark = [
    needs_root,
    pytest.mark.skipif(
        not V1, reason="no writable cgroup v1 controllers here (or cgroup v2 is used)"
    ),
]


def needs(*controllers: str) -> pytest.MarkDecorator:
    missing = [c for c in controllers if c not in V1]
    return pytest.mark.skipif(bool(missing), reason=f"no cgroup v1 {'/'.join(missing)} here")


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    with open_tmp_dir() as path:
        yield path


@needs("memory")
def test_shared_memory_over_the_limit_is_stopped_and_reported_as_oom(open_tmp: Path) -> None:
    shm = Path("/dev/shm") / f"labhive-test-{uuid.uuid4().hex}"
    ex = LocalExecutor(open_tmp / "data")
    try:
        h = launch_one(
            ex, "shm", f"exec dd if=/dev/zero of={shm} bs=1M count=400", memory_mb=64,
            uid=UID_A, gid=UID_A,
        )  # fmt: skip
        memory = h.info["limits"]["memory"]
        assert (memory["by"], memory["bytes"]) == ("cgroup-v1", 64 << 20)
        assert "shared memory" in memory["counts"]
        exit = wait_exits(ex, 1, timeout_s=60)[h.key]
    finally:
        shm.unlink(missing_ok=True)
    assert exit.exit_code == 137, (exit, ex.read_log(h, "stderr", 0, 2000))
    assert exit.reason.startswith("killed: over its memory limit of 64 MiB"), exit.reason
    assert not [c for c in h.info["limits"]["cgroups"] if Path(c).exists()], "cgroups left"


@needs("pids")
def test_a_task_cannot_fork_past_its_pids_limit(open_tmp: Path) -> None:
    forker = (
        "import subprocess\nkids = []\n"
        "try:\n    while len(kids) < 100:\n        kids.append(subprocess.Popen(['sleep', '30']))\n"
        "except OSError as err:\n    print(len(kids), err.errno)\n"
        "for k in kids:\n    k.kill()\n"
    )
    ex = LocalExecutor(open_tmp / "data", pids_max=12)
    h = launch_one(ex, "forks", f"{sys.executable} -c {shlex.quote(forker)}")
    pids = h.info["limits"]["pids"]
    assert (pids["enforced"], pids["by"], pids["max"]) == (True, "cgroup-v1", 12), pids
    assert wait_exits(ex, 1, timeout_s=60)[h.key].exit_code == 0
    started, err = ex.read_log(h, "stdout", 0, 100).split()
    assert int(started) < 12 and int(err) == errno.EAGAIN, (started, err)


@needs("cpu")
def test_a_busy_task_is_throttled_to_its_cpu_quota(open_tmp: Path) -> None:
    spin = (
        "import time\nt = time.time()\n"
        "while time.time() - t < 1.5 or time.process_time() < 0.3 and time.time() - t < 10:\n"
        "    pass\n"
        "print(time.process_time() / (time.time() - t), flush=True)\ntime.sleep(60)\n"
    )
    ex = LocalExecutor(open_tmp / "data")
    h = launch_one(ex, "spin", f"{sys.executable} -c {shlex.quote(spin)}", cpu=0.2)
    cpu = h.info["limits"]["cpu"]
    assert (cpu["by"], cpu["quota_us"], cpu["period_us"]) == ("cgroup-v1", 20000, 100000)
    share = float(wait_until(lambda: ex.read_log(h, "stdout", 0, 100), "the spin's share", 60))
    (cgroup,) = [c for c in h.info["limits"]["cgroups"] if c.startswith(str(V1["cpu"]))]
    stat = dict(line.split() for line in Path(cgroup, "cpu.stat").read_text().splitlines())
    ex.stop([h], grace_s=0)
    assert share < 0.35, f"the task got {share:.2f} of a core with a quota of 0.2"
    # the quota bit, or (on a machine too busy to give it even its quota) it got less anyway
    assert int(stat["nr_throttled"]) > 0 or share < 0.2, (stat, share)


@pytest.fixture
def dev_dir() -> Iterator[Path]:
    """A directory of our own in the host's /dev, where GPU nodes live: a task's /tmp is its
    own (``sandbox_mounts``), its /dev the host's."""
    with open_tmp_dir("/dev") as path:
        yield path


@needs("devices")
def test_nvidia_device_nodes_other_than_the_tasks_own_are_denied(
    open_tmp: Path, dev_dir: Path
) -> None:
    for minor in (0, 1):
        node = dev_dir / f"nvidia{minor}"
        os.mknod(node, 0o666 | 0o020000, os.makedev(limits.NVIDIA_MAJOR, minor))
        os.chmod(node, 0o666)
    targets = [(f"nvidia{m}", "read", dev_dir / f"nvidia{m}") for m in (0, 1)]
    # the v1 rules alone: no cgroup v2 device filter (which a hybrid host would use first)
    v1_only = dataclasses.replace(limits.detect(), device_parent=None, why_not_filter="test")
    ex = LocalExecutor(open_tmp / "data", limit_support=v1_only)
    mine = launch_one(
        ex, "gpu0", probe_command(), virtual=False, uid=UID_A, gid=UID_A,
        env=probe_env(targets),
    )  # fmt: skip
    cpu_only = task("cpu-only", probe_command(), uid=UID_A, gid=UID_A, env=probe_env(targets))
    (none,) = ex.launch([dataclasses.replace(cpu_only, gpus=())])
    wait_exits(ex, 2)
    granted = parse_probe(ex.read_log(mine, "stdout", 0, 65536))["tries"]
    refused = parse_probe(ex.read_log(none, "stdout", 0, 65536))["tries"]
    # its own GPU gets through the cgroup to the (absent) driver; the other is refused first
    assert granted == {"nvidia0": errno.ENXIO, "nvidia1": errno.EPERM}
    assert refused == {"nvidia0": errno.EPERM, "nvidia1": errno.EPERM}
    assert mine.info["limits"]["devices"]["granted_gpus"] == [0]
    assert mine.info["limits"]["devices"]["by"] == "cgroup-v1"


def test_a_re_adopted_tasks_cgroups_are_removed_when_it_ends(open_tmp: Path) -> None:
    first = LocalExecutor(open_tmp / "data")
    h = launch_one(first, "adopted", "sleep 1")
    made = h.info["limits"]["cgroups"]
    assert made and all(Path(c).is_dir() for c in made)
    second = LocalExecutor(open_tmp / "data")  # a restarted service
    ended = second.adopt([h])
    if not ended:
        ended = list(wait_exits(second, 1).values())
    assert [e.exit_code for e in ended] == [0]
    assert not [c for c in made if Path(c).exists()], "cgroups left after re-adoption"
