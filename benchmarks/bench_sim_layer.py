"""The simulator's own cost per job, without a policy's: every job of a trace replayed under a
policy that starts each job as it arrives, on a cluster without limits, and does nothing else.

What it measures is what every policy pays around its own work (reading the trace, the jobs,
records and events, the clock, the timeline, the job table), issue 20's "layer". CPU time per
job is printed; for a figure that load does not move, count instructions, e.g. the difference
between two trace heads under cachegrind, divided by their difference in jobs:

    valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \\
        .venv/bin/python benchmarks/bench_sim_layer.py TRACE.csv 1
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

from labhive.scheduler.core.model import Decision, Event, Start, Submit, TaskPlacement
from labhive.scheduler.sim.engine import Simulation
from labhive.scheduler.sim.machines import load_sim_cluster
from labhive.scheduler.sim.traces import iter_trace
from labhive.scheduler.sim.workload import iter_sim_jobs

CLUSTER = Path(__file__).resolve().parents[1].parent / "shared/data/philly/cluster_machine_list"


class StartAtOnce:
    """A policy that starts every job as it arrives (one task per GPU, on one node)."""

    name = "start-at-once"

    def __init__(self) -> None:
        self.tasks: dict[int, tuple[TaskPlacement, ...]] = {}

    def check(self, spec: object) -> None:
        pass

    def handle(self, event: Event) -> list[Decision]:
        if not isinstance(event, Submit):
            return []
        gpus = event.spec.total_gpus
        tasks = self.tasks.get(gpus)
        if tasks is None:
            tasks = self.tasks[gpus] = tuple(
                TaskPlacement("worker", i, "n", (i,)) for i in range(gpus)
            )
        return [Start(event.job_id, tasks)]

    def handle_batch(self, events: list[Event]) -> list[Decision]:
        return [d for e in events for d in self.handle(e)]

    def next_wakeup(self) -> float | None:
        return None


def main() -> int:
    trace = Path(sys.argv[1])
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    config, _ = load_sim_cluster(CLUSTER)
    for _ in range(repeats):
        cpu = time.process_time()
        jobs = iter_sim_jobs(iter_trace(trace), config, Counter())
        sim = Simulation(StartAtOnce(), jobs, total_gpus=10**9, keep_jobs=False)  # type: ignore[arg-type]
        result = sim.run()
        n = len(result.table)
        print(f"{(time.process_time() - cpu) / n * 1e6:.2f} us/job ({n:,} jobs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
