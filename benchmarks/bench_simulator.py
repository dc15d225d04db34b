"""Simulator speed: replay 10/25/50/100% of a Philly-format trace under FIFO and HiveD.

The trace is the SYNTHETIC Philly-format log in ``../shared/data/philly/synthetic`` (the real
``cluster_job_log`` is not available here); its figures measure the simulator, they are not
Philly results. The cluster is Philly's real machine list (552 machines, 2,490 GPUs), one VC.

Each (policy, share) runs in a fresh process so its peak memory (max RSS) is its own. Printed
per run: jobs, wall seconds, CPU seconds (the one-core cost; wall time also counts waiting for
the CPU on a shared machine), jobs per CPU second, peak memory; then the 100%/10% cost ratio.
Targets (issue 4): full trace < 20 s per policy on one core, 100%/10% <= 12, peak < 2 GB.

``--jobs 100000,1000000`` instead replays that many jobs: the trace repeated back to back
(each copy shifted by the trace's span, so the load stays the trace's), written once as a
generic CSV under /tmp (not kept in the repository) and *streamed*: read line by line, each
job's figures kept as a row and the job forgotten once done (``keep_jobs=False``). Its CPU
seconds cover reading the file too. Printed: jobs per CPU second and peak memory per size
(issue 20's target: 1M jobs < 60 s per policy on one core, < 2 GB). CPU time
(``time.process_time``), not wall time, is the figure: the machine may be shared.

    .venv/bin/python benchmarks/bench_simulator.py [--policies fifo,hived] [--shares 10,25,50,100]
    .venv/bin/python benchmarks/bench_simulator.py --policies fifo,hived --jobs 100000,1000000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "philly"
TRACE = DATA / "synthetic" / "synthetic_cluster_job_log.json.gz"
CLUSTER = DATA / "cluster_machine_list"


def one(policy: str, share: int, trace: Path, cluster: Path) -> dict[str, object]:
    """Load, then replay the first ``share`` % of the trace's jobs under ``policy``."""
    from labhive.scheduler.sim.machines import load_sim_cluster
    from labhive.scheduler.sim.runner import run_policy
    from labhive.scheduler.sim.traces import iter_trace, load_trace

    t0 = time.perf_counter()
    config, _ = load_sim_cluster(cluster)
    if share < 0:  # -N: N jobs streamed from a file written by ``write_repeated``
        jobs: Any = iter_trace(trace)
        load_s = 0.0  # read while replaying: in the CPU seconds
    else:
        jobs = load_trace(trace).jobs
        jobs = jobs[: max(1, len(jobs) * share // 100)]
        load_s = time.perf_counter() - t0
    wall, cpu = time.perf_counter(), time.process_time()
    run = run_policy(policy, config, jobs, keep_jobs=share >= 0)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    overall = run.summary["overall"]
    return {
        "policy": policy,
        "share": share,
        "jobs": overall["jobs"],
        "events": run.result.events,
        "load_s": load_s,
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "finished": overall["finished"],
        "utilization": overall["utilization"],
    }


def repeated(jobs: list[Any], n: int) -> Iterator[Any]:
    """``n`` jobs: copies of the trace back to back, each shifted by the trace's span."""
    from dataclasses import replace

    span = jobs[-1].submit - jobs[0].submit + 1.0
    for k in range(n):
        copy, j = divmod(k, len(jobs))
        yield replace(
            jobs[j], job_id=f"{jobs[j].job_id}#{copy}", submit=jobs[j].submit + copy * span
        )


def write_repeated(trace: Path, n: int) -> Path:
    """The ``n``-job trace as a generic CSV under /tmp (written once per size, reused), by a
    child process: a parent that loaded the trace would pass its peak memory on to the runs
    it forks (Linux keeps ``ru_maxrss`` across fork and exec)."""
    path = Path(tempfile.gettempdir()) / f"labhive_bench_{trace.name}_{n}.csv"
    if not path.is_file():
        cmd = [sys.executable, __file__, "--write", str(n), str(path), "--trace", str(trace)]
        subprocess.run(cmd, check=True)
    return path


def _write(trace: Path, n: int, path: Path) -> None:
    from labhive.scheduler.sim.traces import load_trace, write_generic_csv

    partial = path.with_suffix(".part")
    write_generic_csv(repeated(load_trace(trace).jobs, n), partial)
    partial.replace(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policies", default="fifo,hived")
    parser.add_argument("--shares", default="10,25,50,100")
    parser.add_argument("--jobs", help="job counts instead of shares, e.g. 100000,1000000")
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--cluster", type=Path, default=CLUSTER)
    parser.add_argument("--one", nargs=2, metavar=("POLICY", "SHARE"), help=argparse.SUPPRESS)
    parser.add_argument("--write", nargs=2, metavar=("JOBS", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write:
        _write(args.trace, int(args.write[0]), Path(args.write[1]))
        return 0
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.trace, args.cluster)))
        return 0
    if not args.trace.is_file():
        print(f"no trace at {args.trace}; give --trace", file=sys.stderr)
        return 2
    from labhive.scheduler.sim.traces import file_is_synthetic

    synthetic = file_is_synthetic(args.trace)
    print(f"trace: {args.trace}" + (" (SYNTHETIC: not Philly results)" if synthetic else ""))
    print(
        f"cluster: {args.cluster}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    header = f"{'policy':8} {'share':>5} {'jobs':>8} {'events':>8} {'load s':>7} {'wall s':>7}"
    header += f" {'CPU s':>7} {'jobs/CPU s':>10} {'peak MB':>8} {'util':>6}"
    print(header)
    print("-" * len(header))
    results: dict[tuple[str, int], dict[str, float]] = {}
    sizes = [-int(n) for n in args.jobs.split(",")] if args.jobs else None
    for policy in args.policies.split(","):
        for share in sizes or [int(s) for s in args.shares.split(",")]:
            trace = write_repeated(args.trace, -share) if share < 0 else args.trace
            cmd = [sys.executable, __file__, "--one", policy, str(share)]
            cmd += ["--trace", str(trace), "--cluster", str(args.cluster)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(f"{policy:8} {share:>5} failed: {out.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(out.stdout)
            results[(policy, share)] = r
            print(
                f"{policy:8} {_share(share):>5} {r['jobs']:>8,} {r['events']:>8,} "
                f"{r['load_s']:>7.1f} "
                f"{r['wall_s']:>7.1f} {r['cpu_s']:>7.1f} {r['jobs'] / r['cpu_s']:>10,.0f} "
                f"{r['peak_mb']:>8.0f} {r['utilization']:>6.1%}",
                flush=True,
            )
    for policy in args.policies.split(","):
        lo, hi = results.get((policy, 10)), results.get((policy, 100))
        if lo and hi:
            print(
                f"{policy}: 100%/10% cost ratio {hi['cpu_s'] / lo['cpu_s']:.1f} (CPU), "
                f"{hi['wall_s'] / lo['wall_s']:.1f} (wall); target <= 12"
            )
    return 0


def _share(share: int) -> str:
    return f"{share}%" if share >= 0 else "-"


if __name__ == "__main__":
    sys.exit(main())
