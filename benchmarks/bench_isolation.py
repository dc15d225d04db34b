"""What isolation costs at task start: bare as the service's user, as another uid, with cgroup
limits, and the cgroup setup alone.

Start latency is from ``Executor.launch`` to the task's first output (``echo``), polled every
0.5 ms; each mode starts ``--starts`` tasks one after another (default 20) and reports p50 and
p95. The cgroup setup row times ``limits.apply`` + ``limits.release`` alone (v2 where it has
controllers, else v1: memory, cpu, pids, devices), for a task without GPUs and for one with a
GPU (which writes one devices rule per other NVIDIA minor).

The container rows run a busybox image through podman (``executors/container.py``; the
container's cgroup is podman's, so the executor's own cgroups are off there). To add a mode, add
an entry to ``MODES``: a name, a function that
makes the executor for a data dir, and the extra ``TaskLaunch`` fields its tasks get.

    python benchmarks/bench_isolation.py [--starts 20]

Switching uids needs root; rows that cannot run here say why.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labhive.scheduler import images
from labhive.scheduler.errors import UserError
from labhive.scheduler.executors import limits
from labhive.scheduler.executors.base import Executor, TaskKey, TaskLaunch
from labhive.scheduler.executors.local import LocalExecutor

OTHER_UID = 200999
IMAGE = "labhive/bench-busybox"
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
    out = []
    for i in range(starts):
        launch = TaskLaunch(
            TaskKey(f"b{i}", 1, "main", 0), "bench", "exec echo up", "node0", (), **mode.launch
        )
        t0 = time.perf_counter()
        (handle,) = ex.launch([launch])
        while not ex.read_log(handle, "stdout", 0, 8):
            time.sleep(0.0005)
        out.append(time.perf_counter() - t0)
        deadline = time.monotonic() + 30
        while not ex.poll() and time.monotonic() < deadline:
            time.sleep(0.002)
    return out


def cgroup_setup(starts: int, gpus: tuple[int, ...]) -> tuple[list[float], str]:
    support = limits.detect()
    how = "cgroup v2" if support.cgroup_parent else f"cgroup v1 {'/'.join(support.v1)}"
    if support.cgroup_parent is None and not support.v1:
        return [], f"no cgroups here: {support.why_not_cgroup}"
    out = []
    for i in range(starts):
        key = TaskKey(f"setup{i}", 1, "main", 0)
        t0 = time.perf_counter()
        record = limits.apply(
            support, key, 1.0, 512, gpus=gpus, virtual=not gpus, scope=f"bench{os.getpid()}"
        )
        limits.release(record)
        out.append(time.perf_counter() - t0)
    return out, how


def row(name: str, samples: list[float], note: str = "") -> str:
    if not samples:
        return f"{name:<38} {'-':>9} {'-':>9}  {note}"
    ms = sorted(s * 1000 for s in samples)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return f"{name:<38} {statistics.median(ms):>7.1f}ms {p95:>7.1f}ms  {note}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=20)
    args = ap.parse_args()
    print(f"{'task start (launch -> first output)':<38} {'p50':>9} {'p95':>9}")
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
    print(f"\n{'cgroup setup + removal alone':<38} {'p50':>9} {'p95':>9}")
    for label, gpus in (("task without GPUs", ()), ("task with 1 GPU", (0,))):
        samples, how = cgroup_setup(args.starts, gpus)
        print(row(label, samples, how))


if __name__ == "__main__":
    sys.exit(main())
