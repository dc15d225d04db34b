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

``--contended`` (issue 34) replays on a squeezed cluster instead, where jobs queue: the first
``--machines`` machines (default 360 = 954 GPUs, against the trace's average demand of 817
GPUs, so utilization runs high and the queue grows in bursts yet drains) split into Helios' VC
weights, under the policies whose cost grows with the queue (default DRF, DRF with backfill,
Capacity, LAS). Printed besides: the average queuing delay, to show jobs did wait.

    .venv/bin/python benchmarks/bench_simulator.py [--policies fifo,hived] [--shares 10,25,50,100]
    .venv/bin/python benchmarks/bench_simulator.py --policies fifo,hived --jobs 100000,1000000
    .venv/bin/python benchmarks/bench_simulator.py --contended --jobs 20000 [--machines 360]
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
VCS = DATA / "philly_vc_nodes_helios.csv"
CONTENDED_POLICIES = "drf,drf:backfill=true,capacity,las"
CONTENDED_MACHINES = 360


def one(
    policy: str,
    share: int,
    trace: Path,
    cluster: Path,
    machines: int | None = None,
    vcs: Path | None = None,
) -> dict[str, object]:
    """Load, then replay the first ``share`` % of the trace's jobs under ``policy``."""
    from labhive.scheduler.sim.machines import load_sim_cluster
    from labhive.scheduler.sim.runner import run_policy
    from labhive.scheduler.sim.traces import iter_trace, load_trace

    t0 = time.perf_counter()
    config, _ = load_sim_cluster(cluster, vcs, machines)
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
        "queue_delay_avg": overall["queue_delay_avg"],
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
    parser.add_argument(
        "--contended",
        action="store_true",
        help=f"a squeezed cluster with Helios' VCs; policies {CONTENDED_POLICIES} by default",
    )
    parser.add_argument("--machines", type=int, help="only the first N machines")
    parser.add_argument("--one", nargs=2, metavar=("POLICY", "SHARE"), help=argparse.SUPPRESS)
    parser.add_argument("--write", nargs=2, metavar=("JOBS", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.contended:
        args.machines = args.machines or CONTENDED_MACHINES
        if args.policies == "fifo,hived":
            args.policies = CONTENDED_POLICIES
    vcs = VCS if args.contended else None
    if args.write:
        _write(args.trace, int(args.write[0]), Path(args.write[1]))
        return 0
    if args.one:
        result = one(args.one[0], int(args.one[1]), args.trace, args.cluster, args.machines, vcs)
        print(json.dumps(result))
        return 0
    if not args.trace.is_file():
        print(f"no trace at {args.trace}; give --trace", file=sys.stderr)
        return 2
    from labhive.scheduler.sim.traces import file_is_synthetic

    synthetic = file_is_synthetic(args.trace)
    print(f"trace: {args.trace}" + (" (SYNTHETIC: not Philly results)" if synthetic else ""))
    squeezed = f" (first {args.machines} machines, Helios' VCs)" if args.contended else ""
    print(
        f"cluster: {args.cluster}{squeezed}; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    from labhive.scheduler.native import install

    print(f"code: {install()}")  # the runs below are children: they load what this one would
    header = f"{'policy':18} {'share':>5} {'jobs':>8} {'events':>8} {'load s':>7} {'wall s':>7}"
    header += f" {'CPU s':>7} {'jobs/CPU s':>10} {'peak MB':>8} {'util':>6} {'wait s':>8}"
    print(header)
    print("-" * len(header))
    results: dict[tuple[str, int], dict[str, float]] = {}
    sizes = [-int(n) for n in args.jobs.split(",")] if args.jobs else None
    for policy in args.policies.split(","):
        for share in sizes or [int(s) for s in args.shares.split(",")]:
            trace = write_repeated(args.trace, -share) if share < 0 else args.trace
            cmd = [sys.executable, __file__, "--one", policy, str(share)]
            cmd += ["--trace", str(trace), "--cluster", str(args.cluster)]
            if args.contended:
                cmd += ["--contended", "--machines", str(args.machines)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(f"{policy:18} {share:>5} failed: {out.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(out.stdout)
            results[(policy, share)] = r
            print(
                f"{policy:18} {_share(share):>5} {r['jobs']:>8,} {r['events']:>8,} "
                f"{r['load_s']:>7.1f} "
                f"{r['wall_s']:>7.1f} {r['cpu_s']:>7.1f} {r['jobs'] / r['cpu_s']:>10,.0f} "
                f"{r['peak_mb']:>8.0f} {r['utilization']:>6.1%} {r['queue_delay_avg']:>8.0f}",
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
