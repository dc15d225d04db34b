"""What fair share buys and costs on a trace: HiveD without and with ``fairShare``, per VC.

Per VC and run: Jain's index over its users of their mean queueing delay's inverse share
(``jain`` of each user's mean wait, so 1 means every user waited alike), the worst user's mean
wait, and for the cost the mean JCT and utilization overall. The simulator's own summary is
left as it is (its outputs stay byte-identical with fair share off); this script reads the
runs' jobs.

    .venv/bin/python benchmarks/fair_share_gain.py --limit 20000 --machines 48
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from labhive.scheduler.sim.machines import load_sim_cluster
from labhive.scheduler.sim.metrics import jain
from labhive.scheduler.sim.runner import run_policy
from labhive.scheduler.sim.traces import load_trace

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "philly"
TRACE = DATA / "synthetic" / "synthetic_jobs.csv.gz"
CLUSTER = DATA / "cluster_machine_list"


def per_vc(jobs: list[Any]) -> dict[str, dict[str, float | None]]:
    waits: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    demand: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for j in jobs:
        if j.first_start is not None:
            waits[j.spec.vc][j.user or ""].append(j.first_start - j.submit)
            demand[j.spec.vc][j.user or ""] += j.gpus * j.duration
    out = {}
    for vc, users in sorted(waits.items()):
        means = [statistics.fmean(w) for w in users.values()]
        # users by the GPU-seconds they asked for: the lighter half, the heavier half
        order = sorted(users, key=lambda u: demand[vc][u])
        light, heavy = order[: len(order) // 2], order[len(order) // 2 :]
        out[vc] = {
            "users": len(users),
            "jain_user_wait": jain(means),
            "worst_user_wait_h": max(means) / 3600,
            "mean_wait_h": statistics.fmean([w for ws in users.values() for w in ws]) / 3600,
            "light_wait_h": _mean([w for u in light for w in users[u]]) / 3600,
            "heavy_wait_h": _mean([w for u in heavy for w in users[u]]) / 3600,
        }
    return out


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--cluster", default=str(CLUSTER))
    parser.add_argument("--limit", type=int, default=20_000)
    parser.add_argument("--machines", type=int, default=48)
    parser.add_argument("--half-life", default="7d")
    parser.add_argument("--reserve-after", default="never")
    args = parser.parse_args()
    config, note = load_sim_cluster(args.cluster, None, args.machines)
    trace = load_trace(args.trace, limit=args.limit)
    policies = ["hived", f"hived:fair_share={args.half_life},reserve_after={args.reserve_after}"]
    print(f"{len(trace.jobs):,} jobs of {args.trace} on {note}")
    for policy in policies:
        started = time.process_time()
        run = run_policy(policy, config, trace.jobs)
        cpu = time.process_time() - started
        overall = run.summary["overall"]
        vcs = per_vc(run.result.jobs)
        jains = [v["jain_user_wait"] for v in vcs.values() if v["jain_user_wait"] is not None]
        print(
            f"\n{policy}: {cpu:.1f} CPU s; JCT avg {overall['jct_avg'] / 3600:.2f} h, "
            f"queue delay avg {overall['queue_delay_avg'] / 3600:.2f} h, "
            f"utilization {overall['utilization']:.3f}; mean over VCs of Jain's index of "
            f"users' mean waits {statistics.fmean(jains):.3f}"
        )
        for vc, v in vcs.items():
            print(
                f"  {vc:>8} users {v['users']:>3}  Jain {v['jain_user_wait'] or 0:.3f}  "
                f"worst user's wait {v['worst_user_wait_h']:.2f} h  "
                f"mean wait {v['mean_wait_h']:.2f} h  lighter half of users "
                f"{v['light_wait_h']:.2f} h, heavier half {v['heavy_wait_h']:.2f} h"
            )


if __name__ == "__main__":
    main()
