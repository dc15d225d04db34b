"""What the local executor costs: launch latency, time until an exit is seen, stop latency, and
the price of one poll with many tasks running (own children and adopted ones).

    python benchmarks/bench_local_executor.py [--tasks 32]

Prints figures; asserts nothing (speed is judged by people reading them, not by a timed test).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from labhive.scheduler.executors.base import TaskHandle, TaskKey, TaskLaunch
from labhive.scheduler.executors.local import LocalExecutor


def launches(job: str, n: int, command: str) -> list[TaskLaunch]:
    return [TaskLaunch(TaskKey(job, 0, "w", i), job, command, "n0", ()) for i in range(n)]


def wait_all(ex: LocalExecutor, n: int) -> float:
    t0, seen = time.perf_counter(), 0
    while seen < n:
        seen += len(ex.poll())
        time.sleep(0.001)
    return time.perf_counter() - t0


def ms(values: list[float]) -> str:
    qs = statistics.quantiles(values, n=100) if len(values) > 1 else values * 99
    return f"p50 {qs[49] * 1e3:7.1f} ms   p99 {qs[98] * 1e3:7.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=32)
    n = parser.parse_args().tasks
    data = Path(tempfile.mkdtemp(prefix="labhive-bench-"))
    ex = LocalExecutor(data, grace_s=5)

    per_launch = []
    for i in range(n):
        t0 = time.perf_counter()
        ex.launch(launches(f"one-{i}", 1, "true"))
        per_launch.append(time.perf_counter() - t0)
    wait_all(ex, n)
    print(f"launch one task (returns before it runs):   {ms(per_launch)}")

    t0 = time.perf_counter()
    ex.launch(launches("gang", n, "true"))
    gang_launch = time.perf_counter() - t0
    until_exit = wait_all(ex, n)
    print(f"launch a gang of {n}:  {gang_launch * 1e3:.1f} ms; all {n} exits seen after "
          f"{until_exit * 1e3:.0f} ms more (supervisor start, command, exit record)")  # fmt: skip

    handles = ex.launch(launches("sleepers", n, "sleep 600"))
    time.sleep(1.0)
    polls = []
    for _ in range(50):
        t0 = time.perf_counter()
        ex.poll()
        polls.append(time.perf_counter() - t0)
    print(f"poll with {n} running children:           {ms(polls)}")

    adopter = LocalExecutor(data, grace_s=5)
    adopter.adopt([TaskHandle(h.key, dict(h.info)) for h in handles])
    polls = []
    for _ in range(50):
        t0 = time.perf_counter()
        adopter.poll()
        polls.append(time.perf_counter() - t0)
    print(f"poll with {n} adopted tasks:               {ms(polls)}")

    stops = []
    for h in handles:
        t0 = time.perf_counter()
        adopter.stop([h], grace_s=5)
        stops.append(time.perf_counter() - t0)
    print(f"stop a task that honours SIGTERM:          {ms(stops)}")
    ex.poll()


if __name__ == "__main__":
    main()
