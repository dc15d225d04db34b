"""Queue policies on a contended replay: does DRF's and Capacity's cost grow like FIFO's?

The first N jobs of the SYNTHETIC Philly-format trace (``../shared/data/philly/synthetic``;
its figures measure the simulator, not Philly; the jobs the trace's rules and the cluster let
run are replayed, counted in "replayed") on a small slice of Philly's machine list
(``--machines``, 150 machines = 300 GPUs by default) split into Helios' VC weights, so the
queue grows long and many users and VCs wait at once. FIFO is the yardstick: its pass tries
one line. DRF ranks a line per waiting user and Capacity one per VC; issue 20 asks their cost
to stay linear in jobs like FIFO's, i.e. the DRF/FIFO and Capacity/FIFO ratios to stay flat as
the job count grows instead of growing with the queue.

Each (policy, size) runs in a fresh process; the figure is its CPU seconds for the replay
(``time.process_time``; the trace is loaded before the clock starts). The load average is
printed before and after: the machine may be shared.

    .venv/bin/python benchmarks/bench_queue_policies.py [--jobs 10000,30000,100000]
        [--policies fifo,drf,capacity] [--machines 150]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "philly"
TRACE = DATA / "synthetic" / "synthetic_jobs.csv.gz"
CLUSTER = DATA / "cluster_machine_list"
VCS = DATA / "philly_vc_nodes_helios.csv"


def one(policy: str, jobs: int, machines: int) -> dict[str, float]:
    """Replay the trace's first ``jobs`` jobs under ``policy``; CPU seconds of the replay."""
    from labhive.scheduler.sim.machines import load_sim_cluster
    from labhive.scheduler.sim.runner import run_policy
    from labhive.scheduler.sim.traces import load_trace

    config, _ = load_sim_cluster(CLUSTER, VCS, machines)
    trace = load_trace(TRACE, limit=jobs).jobs
    cpu = time.process_time()
    run = run_policy(policy, config, trace, keep_jobs=False)
    cpu = time.process_time() - cpu
    overall = run.summary["overall"]
    return {"jobs": overall["jobs"], "events": run.result.events, "cpu_s": cpu}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", default="10000,30000,100000")
    parser.add_argument("--policies", default="fifo,drf,capacity")
    parser.add_argument("--machines", type=int, default=150)
    parser.add_argument("--one", nargs=2, metavar=("POLICY", "JOBS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.machines)))
        return 0
    print(f"trace: {TRACE} (SYNTHETIC); {args.machines} machines of {CLUSTER.name}, VCs {VCS.name}")
    import labhive

    print(f"code: {Path(labhive.__file__).parent} (PYTHONPATH=/work/main measures main)")
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    policies = args.policies.split(",")
    header = f"{'limit':>8} {'replayed':>8} " + " ".join(f"{p + ' CPU s':>14}" for p in policies)
    header += "".join(f" {p + '/' + policies[0]:>14}" for p in policies[1:])
    print(header)
    print("-" * len(header))
    for size in (int(n) for n in args.jobs.split(",")):
        cpu: dict[str, float] = {}
        replayed = 0
        for policy in policies:
            cmd = [sys.executable, __file__, "--one", policy, str(size)]
            cmd += ["--machines", str(args.machines)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            result = json.loads(out.stdout)
            cpu[policy], replayed = result["cpu_s"], int(result["jobs"])
        row = f"{size:>8,} {replayed:>8,} " + " ".join(f"{cpu[p]:>14.2f}" for p in policies)
        row += "".join(f" {cpu[p] / cpu[policies[0]]:>14.2f}" for p in policies[1:])
        print(row, flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
