"""Given a cgroup v2 hierarchy (pure, or the empty unified one of a hybrid host) and fake NVIDIA
device nodes (``mknod c 195 N``, mode 0666, in a temp dir under /dev), expect a task's eBPF
device filter to refuse with EPERM every NVIDIA node that is not its own: a 0-GPU task opens
none, a 1-GPU task only its own minor (plus the control node), a virtual-cluster task none; other
devices still open. A node the filter lets through gets to the (absent) driver: ENXIO. Also: the
program lives exactly as long as the task's cgroup, and the record says "not enforced" and why
where no filter can be attached. And a service's tasks together stop at its pids cap."""

from __future__ import annotations

import dataclasses
import errno
import os
import shlex
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from isolation_util import UID_A, needs_root, open_tmp_dir, parse_probe, probe_command, probe_env
from local_exec_util import launch_one, task, wait_exits
from waiting import wait_until

from labhive.scheduler.executors import bpf, devfilter, limits
from labhive.scheduler.executors.base import TaskKey
from labhive.scheduler.executors.local import LocalExecutor

SUPPORT = limits.detect()
FILTER_HERE = SUPPORT.device_parent is not None or (
    SUPPORT.cgroup_parent is not None and not SUPPORT.why_not_filter
)
#: Skipped only where no cgroup v2 hierarchy exists at all; where one does (and we are root), a
#: filter the kernel refuses is a failure, not a skip.
V2_HERE = any(
    (limits.CGROUP_ROOT / sub / "cgroup.procs").exists()
    and (limits.CGROUP_ROOT / sub / "cgroup.controllers").exists()
    for sub in ("", "unified")
)
_skip_without_v2 = pytest.mark.skipif(not V2_HERE, reason="no cgroup v2 hierarchy here")


def needs_filter(test):
    """Run the test where a v2 hierarchy is, after asserting the filter could be attached."""
    import functools

    @functools.wraps(test)
    def run(*args, **kwargs):
        assert FILTER_HERE, f"no device filter though cgroup v2 is here: {SUPPORT.why_not_filter}"
        return test(*args, **kwargs)

    return _skip_without_v2(run)


pytestmark = needs_root

#: (label, kind, major, minor): NVIDIA GPUs 0..2, nvidia-modeset and nvidiactl, made-up
#: uvm (240) and nvidia-caps (239) majors, and a block device of major 195 (not NVIDIA's).
NODES = [
    ("nvidia0", "c", 195, 0),
    ("nvidia1", "c", 195, 1),
    ("nvidia2", "c", 195, 2),
    ("modeset", "c", 195, 254),
    ("ctl", "c", 195, 255),
    ("uvm", "c", 240, 0),
    ("caps", "c", 239, 1),
    ("block195", "b", 195, 0),
]
FAKE_MAJORS = devfilter.NvidiaMajors(uvm=240, others=(239,))


@pytest.fixture
def nodes() -> Iterator[Path]:
    """The fake nodes in a dir of the host's /dev every uid may pass through (a task's /tmp is
    its own), removed afterwards."""
    with open_tmp_dir("/dev") as path:
        for label, kind, major, minor in NODES:
            mode = stat.S_IFCHR if kind == "c" else stat.S_IFBLK
            os.mknod(path / label, 0o666 | mode, os.makedev(major, minor))
            os.chmod(path / label, 0o666)
        yield path


def tries(nodes: Path, labels: list[str]) -> list[tuple[str, str, Path]]:
    return [(label, "read", nodes / label) for label in labels] + [
        ("null", "read", Path("/dev/null"))
    ]


def opened(ex: LocalExecutor, handle) -> dict[str, int | str]:
    wait_exits(ex, 1)
    return parse_probe(ex.read_log(handle, "stdout", 0, 65536))["tries"]


GPUS = ["nvidia0", "nvidia1", "nvidia2", "modeset", "ctl"]


@needs_filter
def test_a_task_without_gpus_opens_no_nvidia_node(nodes: Path) -> None:
    ex = LocalExecutor(nodes / "data")
    launch = task("cpu", probe_command(), uid=UID_A, gid=UID_A, env=probe_env(tries(nodes, GPUS)))
    (h,) = ex.launch([dataclasses.replace(launch, gpus=(), virtual=False)])
    record = h.info["limits"]["devices"]
    assert opened(ex, h) == {**dict.fromkeys(GPUS, errno.EPERM), "null": "ok"}
    assert (record["enforced"], record["by"], record["granted_gpus"]) == (
        True, "cgroup-v2-bpf", [],
    )  # fmt: skip
    assert "every NVIDIA device" in record["denied"]
    made = [c for c in [h.info["limits"].get("cgroup"), *h.info["limits"]["cgroups"]] if c]
    assert record["cgroup"] in made
    assert not [c for c in made if Path(c).exists()], "cgroups left after the task"


@needs_filter
def test_a_one_gpu_task_opens_its_own_minor_and_no_other(nodes: Path) -> None:
    ex = LocalExecutor(nodes / "data")
    launch = task("gpu1", probe_command(), uid=UID_A, gid=UID_A, env=probe_env(tries(nodes, GPUS)))
    (h,) = ex.launch([dataclasses.replace(launch, gpus=(1,), virtual=False)])
    # its own GPU and the shared control nodes get through to the (absent) driver
    assert opened(ex, h) == {
        "nvidia0": errno.EPERM, "nvidia1": errno.ENXIO, "nvidia2": errno.EPERM,
        "modeset": errno.ENXIO, "ctl": errno.ENXIO, "null": "ok",
    }  # fmt: skip
    assert h.info["limits"]["devices"]["granted_gpus"] == [1]


@needs_filter
def test_a_virtual_cluster_task_has_no_real_gpu_to_open(nodes: Path) -> None:
    ex = LocalExecutor(nodes / "data")
    launch = task("slot1", probe_command(), uid=UID_A, gid=UID_A, env=probe_env(tries(nodes, GPUS)))
    (h,) = ex.launch([dataclasses.replace(launch, gpus=(1,), virtual=True)])
    assert opened(ex, h) == {**dict.fromkeys(GPUS, errno.EPERM), "null": "ok"}
    assert h.info["limits"]["devices"]["granted_gpus"] == []


PROBE_IN_CGROUP = """
import errno, json, os, sys
cgroup, nodes = sys.argv[1], sys.argv[2:]
open(os.path.join(cgroup, "cgroup.procs"), "w").write(str(os.getpid()))
out = {}
for node in nodes:
    try:
        os.close(os.open(node, os.O_RDONLY))
        out[os.path.basename(node)] = "ok"
    except OSError as err:
        out[os.path.basename(node)] = errno.errorcode[err.errno]
print(json.dumps(out))
"""


@needs_filter
@pytest.mark.parametrize("gpus", [(), (0,), (1, 2)], ids=["no GPU", "GPU 0", "GPUs 1 and 2"])
def test_the_kernel_decides_as_the_rules_say_for_uvm_caps_and_block_nodes(
    nodes: Path, gpus: tuple[int, ...]
) -> None:
    """A process in a cgroup with the filter (made-up uvm and caps majors) tries every node:
    what the kernel lets through is exactly what ``DeviceRules.allows`` says."""
    import json
    import subprocess

    rules = devfilter.DeviceRules(gpus, FAKE_MAJORS)
    parent = SUPPORT.device_parent or SUPPORT.cgroup_parent
    assert parent is not None
    cgroup = parent / f"rules-{os.getpid()}-{len(gpus)}"
    cgroup.mkdir()
    try:
        devfilter.attach(cgroup, rules)
        paths = [str(nodes / label) for label, *_ in NODES]
        run = subprocess.run(
            [sys.executable, "-c", PROBE_IN_CGROUP, str(cgroup), *paths],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    finally:
        cgroup.rmdir()
    seen = json.loads(run.stdout)
    expected = {
        label: "ENXIO" if rules.allows(kind, major, minor) else "EPERM"
        for label, kind, major, minor in NODES
    }
    assert seen == expected
    assert seen["block195"] == "ENXIO" and seen["caps"] == "EPERM"
    assert seen["uvm"] == ("ENXIO" if gpus else "EPERM")


@needs_filter
def test_the_program_stays_while_the_task_runs_and_goes_with_its_cgroup(nodes: Path) -> None:
    ex = LocalExecutor(nodes / "data")
    h = launch_one(ex, "held", "sleep 2", virtual=False)
    ident = h.info["limits"]["devices"]["prog_id"]
    assert bpf.prog_loaded(ident), "the attachment should hold the program (our fd is closed)"
    wait_exits(ex, 1)
    wait_until(lambda: not bpf.prog_loaded(ident), "the kernel to free the program", 10)


def test_where_no_filter_can_be_attached_the_record_says_not_enforced_and_why(
    nodes: Path,
) -> None:
    """A plain directory is no cgroup: the kernel refuses the attachment; without a v1
    devices controller to fall back on, the task runs with devices not enforced, and says so,
    as does the service's banner line."""
    plain = nodes / "not-a-cgroup"
    plain.mkdir()
    support = limits.LimitSupport(None, "test", {}, device_parent=plain)
    record = limits.apply(support, TaskKey("n", 0, "w", 0), 1.0, 64, gpus=(0,), virtual=False)
    devices = record["devices"]
    assert devices["enforced"] is False
    assert devices["why"].startswith(f"cannot attach the device filter to {plain}/"), devices
    assert not list(plain.iterdir()), "the refused task cgroup dir is removed"
    why = limits._probe_filter(plain)
    banner = limits.LimitSupport(None, "test", {}, None, why).devices_enforced()
    assert banner.startswith("NOT enforced (the kernel refused a cgroup v2 device filter"), banner


@pytest.mark.skipif("pids" not in limits.detect_v1() and SUPPORT.cgroup_parent is None,
                    reason="no pids controller here")  # fmt: skip
def test_the_services_tasks_together_stop_at_its_pids_cap(nodes: Path) -> None:
    """Each task may have 40 processes, the service 20 in all: the first task takes what it
    can and holds it, the second gets what is left; together they stay under 20."""
    hold = (
        "import os, subprocess, sys, time\nkids = []\n"
        "try:\n    while len(kids) < 60:\n        kids.append(subprocess.Popen(['sleep', '30']))\n"
        "except OSError as err:\n    print(len(kids), err.errno, flush=True)\n"
        "while not os.path.exists(sys.argv[1]):\n    time.sleep(0.05)\n"
        "for k in kids:\n    k.kill()\n"
    )
    done = nodes / "done"
    command = f"exec {sys.executable} -c {shlex.quote(hold)} {done}"
    ex = LocalExecutor(nodes / "data", pids_max=40, pids_service_max=20)
    first = launch_one(ex, "first", command)
    counts = [wait_until(lambda: ex.read_log(first, "stdout", 0, 100), "the first's forks", 60)]
    second = launch_one(ex, "second", command)
    counts.append(wait_until(lambda: ex.read_log(second, "stdout", 0, 100), "the second's", 60))
    done.touch()
    assert [e.exit_code for e in wait_exits(ex, 2, timeout_s=60).values()] == [0, 0]
    (first_kids, first_err), (second_kids, _) = [map(int, c.split()) for c in counts]
    pids = first.info["limits"]["pids"]
    assert (pids["max"], pids["service_max"]) == (40, 20)
    assert first_err == errno.EAGAIN
    # the first python and its children fill the service's 20 (not its own 40); the second
    # python joins its cgroup by migration, which pids.max does not count, and can fork none
    assert (first_kids, second_kids) == (19, 0)
    assert not Path(pids["service_cgroup"]).exists(), "the service's parent is removed when idle"


def test_the_service_banner_says_how_gpu_devices_are_kept_apart(nodes: Path) -> None:
    from labhive.scheduler.service.server import gpu_devices

    here = gpu_devices(LocalExecutor(nodes / "a"), virtual=False)
    nothing = limits.LimitSupport(None, "test", {}, None, "not root")
    unguarded = gpu_devices(LocalExecutor(nodes / "b", limit_support=nothing), virtual=True)
    if FILTER_HERE:
        assert here.startswith("enforced by a cgroup v2 device filter (eBPF)"), here
    assert unguarded.startswith("virtual cluster, no task may open an NVIDIA device: NOT enforced")
    assert "(not root; and no writable cgroup v1 devices controller)" in unguarded
