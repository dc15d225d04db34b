"""Placement decisions per second of the HiveD core with 10,000 waiting jobs.

Clusters of 1,024 / 2,048 / 4,096 GPUs (racks of 8 nodes x 8 GPUs, four VCs owning 40/30/20/10%
of the nodes). The queue is filled with 10,000 waiting jobs of mixed sizes (1-8 GPUs, 2- and
4-node gangs) and priorities (prod, test, oppo); then, in steady state, a running job finishes
and a new one is submitted, again and again. Printed: decisions (start, preempt, downgrade,
stop) per second and microseconds per event, in CPU time of this one process (a loaded machine
slows the wall clock, not this figure).

Every job belongs to one of ``--users`` users (drawn from a random stream of its own, so the
workload is the same whatever the count) and the events are ``--gap`` seconds apart, so each
size runs twice on one workload: fair share off (first come, first served: users are ignored)
and on (``fairShare`` with ``--fair-share`` as its half-life: classes ordered by their users'
decayed usage, docs/policies.md). The issue asks the second to be within 10% of the first.

    python benchmarks/bench_scheduler.py
    python benchmarks/bench_scheduler.py --sizes 4096 --users 20 --fair-share 7d
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from labhive.scheduler.core.config import ClusterConfig, FairShare, load_cluster_config
from labhive.scheduler.core.jobs import JobSpec, RoleSpec
from labhive.scheduler.core.model import Finish, Start, Submit
from labhive.scheduler.hived.core import HivedScheduler

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


def job(rng: random.Random, i: int, user: str | None = None) -> JobSpec:
    vc = rng.choices(list(SHARES), weights=list(SHARES.values()))[0]
    priority = rng.choices([100, 10, -1], weights=[3, 5, 2])[0]
    shape = rng.choices([(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (4, 8)], [30, 20, 20, 15, 10, 5])[
        0
    ]
    role = RoleSpec("main", instances=shape[0], gpu=shape[1])
    return JobSpec(f"j{i}", vc, priority, (role,), user=user)


def bench(
    gpus: int,
    seed: int = 1,
    users: int = 20,
    half_life: float | None = None,
    gap: float = 1.0,
    events: int = EVENTS,
    trace: Callable[..., Any] | None = None,
) -> tuple[float, float, int]:
    """Decisions/s, microseconds per event and jobs waiting at the end, for one run; fair
    share on when ``half_life`` is given. ``trace``: a ``sys.settrace`` function set for the
    steady-state part alone (``count_bytecodes.py --bench``: the exact count of this run)."""
    rng = random.Random(seed)
    who = random.Random(seed + 1)  # users from a stream of their own: the same jobs either way
    config: ClusterConfig = load_cluster_config(cluster(gpus))
    if half_life is not None:
        config = replace(config, fair_share=FairShare(half_life))
    sched = HivedScheduler(config)
    running: list[str] = []
    n = 0

    def new_job(n: int) -> JobSpec:
        return job(rng, n, f"u{who.randrange(users)}" if users else None)

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
        feed(Submit(f"j{n}", new_job(n)))
    decisions = 0
    t = 0.0
    if trace is not None:
        sys.settrace(trace)
    start = time.process_time()
    for _ in range(events):
        victim = running.pop(rng.randrange(len(running)))
        placed.discard(victim)
        t += gap
        if victim in sched._jobs and sched._jobs[victim].placed:  # not preempted meanwhile
            decisions += feed(Finish(victim, t))
        n += 1
        decisions += feed(Submit(f"j{n}", new_job(n), t))
    elapsed = time.process_time() - start
    sys.settrace(None)
    waiting = sum(1 for j in sched._jobs.values() if not j.placed)
    return decisions / elapsed, elapsed / (2 * events) * 1e6, waiting


def main() -> None:
    from labhive.scheduler.core.time_limits import parse_time_limit

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1024,2048,4096", help="GPU counts, comma-separated")
    parser.add_argument("--users", type=int, default=20, help="users the jobs belong to")
    parser.add_argument("--fair-share", default="7d", help="half-life of the fair-share run")
    parser.add_argument("--gap", type=float, default=1.0, help="seconds between events")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args = parser.parse_args()
    half_life = parse_time_limit(args.fair_share)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"HiveD core, {WAITING:,} waiting jobs of {args.users} users, {EVENTS:,} finish+submit")
    print(f"pairs per size, {args.gap:g} s apart (best of {args.repeats} runs, CPU time of this")
    print(f"process; off and on in turns). Fair share on: halfLife {args.fair_share}")
    print(f"{'GPUs':>6} {'fair share':>10} {'decisions/s':>12} {'us/event':>9} {'waiting':>8}")
    for gpus in sizes:
        runs: dict[str, list[tuple[float, float, int]]] = {"off": [], "on": []}
        for _ in range(args.repeats):  # in turns, so that a change of load hits both
            runs["off"].append(bench(gpus, users=args.users, gap=args.gap))
            runs["on"].append(bench(gpus, users=args.users, half_life=half_life, gap=args.gap))
        best = {mode: max(r) for mode, r in runs.items()}
        for mode, (rate, per_event, waiting) in best.items():
            print(f"{gpus:>6} {mode:>10} {rate:>12,.0f} {per_event:>9.0f} {waiting:>8,}")
        print(f"{gpus:>6} {'on/off':>10} {best['on'][0] / best['off'][0]:>12.1%}")


if __name__ == "__main__":
    main()
