"""What a container costs a task's start: latency from ``launch`` until the task's command runs,
bare process vs podman container (runc here), p50 and p95 of 20 starts each; and what settling a
container costs (``podman inspect`` + ``podman rm``). The container column of
``bench_isolation.py`` (same harness shape), kept apart so that the two merge trivially.

    python benchmarks/bench_isolation_container.py [--starts 20]

Needs podman, runc and busybox-static, as root. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from labhive.scheduler import images
from labhive.scheduler.executors.base import TaskKey, TaskLaunch
from labhive.scheduler.executors.local import LocalExecutor

IMAGE = "labhive/bench-busybox"
#: The command marks the moment it runs with a file in its own directory (the workdir).
COMMAND = "touch started"


def start_latency(ex: LocalExecutor, job: str, image: str | None) -> tuple[float, float]:
    """Seconds from launch() to the command running, and from its end to its exit being seen."""
    launch = TaskLaunch(TaskKey(job, 0, "w", 0), job, COMMAND, "n0", (), image=image)
    t0 = time.perf_counter()
    (handle,) = ex.launch([launch])
    marker = Path(handle.info["workdir"]) / "started"
    while not marker.exists():
        time.sleep(0.001)
    started = time.perf_counter() - t0
    t1 = time.perf_counter()
    while not ex.poll():
        time.sleep(0.001)
    return started, time.perf_counter() - t1


def ms(values: list[float]) -> str:
    qs = statistics.quantiles(values, n=100)
    return f"p50 {qs[49] * 1e3:7.1f} ms   p95 {qs[94] * 1e3:7.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=20)
    n = parser.parse_args().starts
    images.busybox_image(IMAGE)
    ex = LocalExecutor(Path(tempfile.mkdtemp(prefix="labhive-bench-")), grace_s=5)
    for label, image in (("bare process", None), ("container (podman, runc)", IMAGE)):
        runs = [start_latency(ex, f"{'c' if image else 'b'}{i}", image) for i in range(n)]
        print(f"task start, {label:26s} {ms([r[0] for r in runs])}")
        print(f"  end -> exit settled{'':17s} {ms([r[1] for r in runs])}")
    images.remove(IMAGE)


if __name__ == "__main__":
    main()
