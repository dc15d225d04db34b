"""Placement decisions per second of the HiveD core with 10,000 waiting jobs.

Clusters of 1,024 / 2,048 / 4,096 GPUs (racks of 8 nodes x 8 GPUs, four VCs owning 40/30/20/10%
of the nodes). The queue is filled with 10,000 waiting jobs of mixed sizes (1-8 GPUs, 2- and
4-node gangs) and priorities (prod, test, oppo); then, in steady state, a running job finishes
and a new one is submitted, again and again. Printed: decisions (start, preempt, downgrade,
stop) per second and microseconds per event, in CPU time of this one process (a loaded machine
slows the wall clock, not this figure). Run: python benchmarks/bench_scheduler.py
"""

from __future__ import annotations

import random
import time

from labhive.scheduler.config import load_cluster_config
from labhive.scheduler.hived.core import HivedScheduler
from labhive.scheduler.jobs import JobSpec, RoleSpec
from labhive.scheduler.model import Finish, Start, Submit

WAITING = 10_000
EVENTS = 4_000
REPEATS = 3
SHARES = {"vc0": 0.4, "vc1": 0.3, "vc2": 0.2, "vc3": 0.1}


def cluster(gpus: int) -> dict:
    nodes = gpus // 8
    racks = nodes // 8
    counts = {vc: int(racks * 8 * share) for vc, share in SHARES.items()}
    counts["vc0"] += racks * 8 - sum(counts.values())
    return {
        "physicalCluster": {
            "cellTypes": {
                "V100-NODE": {"childCellType": "V100", "childCellNumber": 8, "isNodeLevel": True},
                "RACK": {"childCellType": "V100-NODE", "childCellNumber": 8},
            },
            "physicalCells": [
                {
                    "cellType": "RACK",
                    "cellChildren": [{"cellAddress": f"n{r}-{i}"} for i in range(8)],
                }
                for r in range(racks)
            ],
        },
        "virtualClusters": {
            vc: {"virtualCells": [{"cellType": "RACK.V100-NODE", "cellNumber": n}]}
            for vc, n in counts.items()
        },
    }


def job(rng: random.Random, i: int) -> JobSpec:
    vc = rng.choices(list(SHARES), weights=list(SHARES.values()))[0]
    priority = rng.choices([100, 10, -1], weights=[3, 5, 2])[0]
    shape = rng.choices([(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (4, 8)], [30, 20, 20, 15, 10, 5])[
        0
    ]
    role = RoleSpec("main", instances=shape[0], gpu=shape[1])
    return JobSpec(f"j{i}", vc, priority, (role,))


def bench(gpus: int, seed: int = 1) -> tuple[float, float, int]:
    rng = random.Random(seed)
    sched = HivedScheduler(load_cluster_config(cluster(gpus)))
    running: list[str] = []
    n = 0

    def feed(event: object) -> int:
        decisions = sched.handle(event)  # type: ignore[arg-type]
        for d in decisions:
            if isinstance(d, Start) and d.job_id not in placed:
                placed.add(d.job_id)
                running.append(d.job_id)
        return len(decisions)

    placed: set[str] = set()
    while len(sched._jobs) - len(placed) < WAITING:  # fill the cluster, then the queue
        n += 1
        feed(Submit(f"j{n}", job(rng, n)))
    decisions = 0
    start = time.process_time()
    for _ in range(EVENTS):
        victim = running.pop(rng.randrange(len(running)))
        placed.discard(victim)
        if victim in sched._jobs and sched._jobs[victim].placed:  # not preempted meanwhile
            decisions += feed(Finish(victim))
        n += 1
        decisions += feed(Submit(f"j{n}", job(rng, n)))
    elapsed = time.process_time() - start
    waiting = sum(1 for j in sched._jobs.values() if not j.placed)
    return decisions / elapsed, elapsed / (2 * EVENTS) * 1e6, waiting


def main() -> None:
    print(f"HiveD core, {WAITING:,} waiting jobs, {EVENTS:,} finish+submit pairs per size")
    print(f"(best of {REPEATS} runs, CPU time of this process)")
    print(f"{'GPUs':>6} {'decisions/s':>12} {'us/event':>9} {'waiting at end':>15}")
    for gpus in (1024, 2048, 4096):
        runs = [bench(gpus) for _ in range(REPEATS)]
        rate, per_event, waiting = max(runs)
        print(f"{gpus:>6} {rate:>12,.0f} {per_event:>9.0f} {waiting:>15,}")


if __name__ == "__main__":
    main()
