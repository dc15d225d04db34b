"""What isolation costs at task start: bare as the service's user, as another uid, with cgroup
limits, and the cgroup setup alone.

Start latency is from ``Executor.launch`` to the task's first output (``echo``), polled every
0.5 ms; each mode starts ``--starts`` tasks one after another (default 20) and reports p50 and
p95. The device filter table times ``limits.apply`` + ``limits.release`` alone (v2 where it
has controllers, else v1 memory, cpu, pids, plus the v2 device filter in the unified hierarchy
of a hybrid host), with the GPU device filter and without any device enforcement, taken in
turns over ``--filter-starts`` (default 200), for a task without GPUs and one with a GPU; and
the filter's own part (cgroup mkdir, program load + attach, rmdir).

Each table is one ``measure_*`` function listed in ``MEASUREMENTS`` (``--only NAME`` runs one);
the last times a bare task's private /tmp, /dev/shm and /proc (``isolation_mounts.py``).

The container rows run a busybox image through podman (``executors/container.py``; the
container's cgroup is podman's, so the executor's own cgroups are off there). To add a mode, add
an entry to ``MODES``: a name, a function that
makes the executor for a data dir, and the extra ``TaskLaunch`` fields its tasks get.

    python benchmarks/bench_isolation.py [--starts 20] [--filter-starts 200] [--only NAME]

Switching uids needs root; rows that cannot run here say why.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import isolation_mounts  # beside this file

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.executors import devfilter, images, limits
from labhive.scheduler.executors.base import Executor, TaskKey, TaskLaunch
from labhive.scheduler.executors.local import LocalExecutor

OTHER_UID = 200999
IMAGE = "labhive/bench-busybox"
W = 48  # the tables' first column
NO_CGROUPS = limits.LimitSupport(None, "turned off for this benchmark")


@dataclass(frozen=True)
class StartMode:
    make: Callable[[Path], Executor]
    launch: dict[str, Any] = field(default_factory=dict)  # extra TaskLaunch fields
    needs_root: bool = False


def in_containers(data_dir: Path) -> Executor:
    """The local executor with a busybox image made for it (podman, runc or crun)."""
    images.busybox_image(IMAGE)
    return LocalExecutor(data_dir, limit_support=NO_CGROUPS)


MODES: dict[str, StartMode] = {
    "bare, service's user": StartMode(lambda d: LocalExecutor(d, limit_support=NO_CGROUPS)),
    "bare, another uid": StartMode(
        lambda d: LocalExecutor(d, limit_support=NO_CGROUPS),
        {"uid": OTHER_UID, "gid": OTHER_UID},
        needs_root=True,
    ),
    "bare, service's user + cgroups": StartMode(lambda d: LocalExecutor(d)),
    "bare, service's user + cgroups, no GPU devices": StartMode(
        lambda d: LocalExecutor(d, limit_support=without_devices(limits.detect()))
    ),
    "bare, another uid + cgroups": StartMode(
        lambda d: LocalExecutor(d), {"uid": OTHER_UID, "gid": OTHER_UID}, needs_root=True
    ),
    "container, service's user": StartMode(in_containers, {"image": IMAGE}, needs_root=True),
    "container, another uid": StartMode(
        in_containers, {"image": IMAGE, "uid": OTHER_UID, "gid": OTHER_UID}, needs_root=True
    ),
}


def start_latencies(mode: StartMode, data_dir: Path, starts: int) -> list[float]:
    ex = mode.make(data_dir)
    return [one_start(ex, i, mode.launch) for i in range(starts)]


def one_start(ex: Executor, i: int, extra: dict[str, Any], gpus: tuple[int, ...] = ()) -> float:
    """Seconds from launch to the task's first output; then wait for its end."""
    launch = TaskLaunch(
        TaskKey(f"b{i}", 1, "main", 0), "bench", "exec echo up", "node0", gpus,
        virtual=not gpus, **extra,
    )  # fmt: skip
    t0 = time.perf_counter()
    (handle,) = ex.launch([launch])
    while not ex.read_log(handle, "stdout", 0, 8):
        time.sleep(0.0005)
    took = time.perf_counter() - t0
    deadline = time.monotonic() + 30
    while not ex.poll() and time.monotonic() < deadline:
        time.sleep(0.002)
    return took


def without_devices(support: limits.LimitSupport) -> limits.LimitSupport:
    """The same limits with no GPU device enforcement at all (no filter, no v1 devices)."""
    v1 = {c: p for c, p in support.v1.items() if c != "devices"}
    return dataclasses.replace(
        support, v1=v1, device_parent=None, why_not_filter="turned off for this benchmark"
    )


def setup_and_release(support: limits.LimitSupport, i: int, gpus: tuple[int, ...]) -> float:
    key = TaskKey(f"setup{i}", 1, "main", 0)
    t0 = time.perf_counter()
    record = limits.apply(
        support, key, 1.0, 512, gpus=gpus, virtual=not gpus, scope=f"bench{os.getpid()}"
    )
    limits.release(record)
    return time.perf_counter() - t0


def filter_alone(parent: Path, i: int, gpus: tuple[int, ...]) -> float:
    """mkdir, load + attach, rmdir: the device filter's own part of a start."""
    cgroup = parent / f"bench{os.getpid()}-{i}"
    t0 = time.perf_counter()
    cgroup.mkdir()
    devfilter.attach(cgroup, devfilter.DeviceRules(gpus, devfilter.host_nvidia_majors()))
    cgroup.rmdir()
    return time.perf_counter() - t0


# ---- measurements: each prints one table; add one by writing a function and listing it ------


def measure_task_starts(args: argparse.Namespace) -> None:
    """Launch -> first output, per mode in MODES."""
    print(f"{'task start (launch -> first output)':<{W}} {'p50':>9} {'p95':>9}")
    root = os.geteuid() == 0
    with tempfile.TemporaryDirectory(prefix="labhive-bench-iso-") as tmp:
        os.chmod(tmp, 0o755)
        for name, mode in MODES.items():
            if mode.needs_root and not root:
                print(row(name, [], "skipped: needs root"))
                continue
            try:
                samples = start_latencies(mode, Path(tmp) / name.replace(" ", "_"), args.starts)
            except UserError as err:  # podman or busybox-static missing, say
                print(row(name, [], f"skipped: {err}"))
                continue
            print(row(name, samples), flush=True)


def measure_device_filter(args: argparse.Namespace) -> None:
    """What the GPU device filter adds to a task's cgroup setup, with and without it taken in
    turns (so a change in the machine's load hits both alike), over ``--filter-starts``."""
    support = limits.detect()
    print(f"\n{'cgroup setup + removal (limits.apply)':<{W}} {'p50':>9} {'p95':>9}")
    parent = support.device_parent or support.cgroup_parent
    if parent is None or support.why_not_filter:
        print(row("device filter", [], f"not here: {support.why_not_filter}"))
        return
    how = "cgroup v2" if support.cgroup_parent else f"cgroup v1 {'/'.join(support.v1)} + v2 filter"
    variants = {"no device enforcement": without_devices(support)}
    if "devices" in support.v1:  # a hybrid host: what the v1 rules alone cost, for comparison
        variants["v1 devices rules"] = dataclasses.replace(
            support, device_parent=None, why_not_filter="v1 rules for this benchmark"
        )
    variants["v2 device filter"] = support
    n = args.filter_starts
    print(f"{how}; {n} setups per row, the rows taken in turns")
    for label, gpus in (("no GPU", ()), ("1 GPU", (0,))):
        samples: dict[str, list[float]] = {v: [] for v in variants}
        for i in range(n):
            for variant, chosen in variants.items():
                samples[variant].append(setup_and_release(chosen, i, gpus))
        for variant, got in samples.items():
            print(row(f"task with {label}, {variant}", got))
        added = statistics.median(samples["v2 device filter"]) - statistics.median(
            samples["no device enforcement"]
        )
        print(f"{'  added by the v2 filter (p50 difference)':<{W}} {added * 1000:>7.2f}ms")
        alone = [filter_alone(parent, i, gpus) for i in range(n)]
        print(row("  the filter alone: mkdir, load+attach, rmdir", alone))


def measure_device_filter_starts(args: argparse.Namespace) -> None:
    """Whole task starts (launch -> first output, a task with 1 GPU) with the v2 device filter,
    with the v1 rules and with no device enforcement, taken in turns, ``--starts`` each: the
    filter's cgroup is one more for the task's first process to join."""
    support = limits.detect()
    print(f"\n{'task start with 1 GPU, modes in turns':<{W}} {'p50':>9} {'p95':>9}")
    if support.device_parent is None and support.why_not_filter:
        print(row("device filter", [], f"not here: {support.why_not_filter}"))
        return
    variants = {"no device enforcement": without_devices(support)}
    if "devices" in support.v1:
        variants["v1 devices rules"] = dataclasses.replace(
            support, device_parent=None, why_not_filter="v1 rules for this benchmark"
        )
    variants["v2 device filter"] = support
    samples: dict[str, list[float]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="labhive-bench-dev-") as tmp:
        executors = {
            v: LocalExecutor(Path(tmp) / str(n), limit_support=chosen)
            for n, (v, chosen) in enumerate(variants.items())
        }
        for i in range(args.starts):
            for variant, ex in executors.items():
                samples[variant].append(one_start(ex, i, {}, gpus=(0,)))
    for variant, got in samples.items():
        print(row(f"task start, {variant}", got, f"{args.starts} starts"))


def measure_private_mounts(args: argparse.Namespace) -> None:
    """What a bare task's private /tmp, /dev/shm and /proc (``sandbox_mounts``) add to its
    start: fork -> mounts -> become the user -> exec -> reaped, with and without the mounts in
    turns, ``--filter-starts`` each (``isolation_mounts.start_cost``)."""
    print(f"\n{'private mounts (fork..exec..reap), in turns':<{W}} {'p50':>9} {'p95':>9}")
    try:
        got = isolation_mounts.start_cost(args.filter_starts)
    except (PermissionError, RuntimeError) as err:
        print(row("private /tmp, /dev/shm, /proc", [], f"not here: {err}"))
        return
    for label in ("without", "with"):
        took = got[label]
        print(
            f"{'  ' + label + ' the mounts':<{W}} {took['p50_ms']:>7.2f}ms {took['p95_ms']:>7.2f}ms"
        )
    cost = got["cost"]
    print(f"{'  added by the mounts':<{W}} {cost['p50_ms']:>7.2f}ms {cost['p95_ms']:>7.2f}ms")


MEASUREMENTS: list[Callable[[argparse.Namespace], None]] = [
    measure_task_starts,
    measure_device_filter,
    measure_device_filter_starts,
    measure_private_mounts,
]


def row(name: str, samples: list[float], note: str = "") -> str:
    if not samples:
        return f"{name:<{W}} {'-':>9} {'-':>9}  {note}"
    ms = sorted(s * 1000 for s in samples)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return f"{name:<{W}} {statistics.median(ms):>7.2f}ms {p95:>7.2f}ms  {note}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=20, help="task starts per mode")
    ap.add_argument("--filter-starts", type=int, default=200, help="cgroup setups per variant")
    ap.add_argument(
        "--only", choices=[m.__name__.removeprefix("measure_") for m in MEASUREMENTS],
        help="run one measurement",
    )  # fmt: skip
    args = ap.parse_args()
    for measure in MEASUREMENTS:
        if args.only in (None, measure.__name__.removeprefix("measure_")):
            measure(args)


if __name__ == "__main__":
    main()
