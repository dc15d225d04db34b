"""ETA accuracy: replay a slice of a Philly-format trace through the simulator, forecast each
waiting job's start at its submission from the state at that moment (as the service does), and
compare with its start in the replay.

The trace is the SYNTHETIC Philly-format log in ``../shared/data/philly/synthetic`` (its figures
measure the method, they are not Philly results): its first ``--jobs`` jobs on a small cluster
(``--nodes`` x 8 GPUs, one VC) so that jobs queue. ``--trace`` may also name an Alibaba v2023
pod list (``../shared/data/alibaba-gpu-v2023/openb_pod_list_default.csv``): its whole-GPU pods.
Printed for the run without declared limits
(durations learnt from the jobs ended so far) and with limits of each job's real duration x a
random overestimate in [1, 3]: jobs scored, median and p90 absolute error of the estimated start,
the share of starts inside the predicted p10-p90 range (nominal: 80%) and its median width, as
forecast (raw) and as shown (calibrated from the starts seen so far, ``eta_calibration``), and
the waiting jobs given no estimate because they waited for a job with no grounds.

    .venv/bin/python benchmarks/bench_eta.py [--jobs 300] [--nodes 8] [--policy hived]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "data" / "philly" / "synthetic" / "synthetic_jobs.csv.gz"


def main(argv: list[str] | None = None) -> int:
    from labhive.scheduler.core.config import load_cluster_config
    from labhive.scheduler.forecast.eta_replay import replay, with_limits
    from labhive.scheduler.sim.machines import Machine, cluster_dict
    from labhive.scheduler.sim.openb import is_pod_list
    from labhive.scheduler.sim.traces import load_trace
    from labhive.scheduler.sim.workload import sim_jobs

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--policy", default="hived")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not args.trace.is_file():
        print(f"no trace at {args.trace}: give --trace", file=sys.stderr)
        return 2
    config = load_cluster_config(cluster_dict([Machine(f"n{i}", 8) for i in range(args.nodes)]))
    if is_pod_list(args.trace):
        trace_jobs = whole_gpu_pods(args.trace, args.jobs)
    else:
        trace_jobs = load_trace(args.trace, limit=args.jobs).jobs
    jobs, _ = sim_jobs(trace_jobs, config)
    print(f"{len(jobs)} jobs of {args.trace.name} on {args.nodes} x 8 GPUs, policy {args.policy}")
    print(f"{'limits':<18}{'range':<6}{'scored':>7}{'no est.':>8}{'median |err|':>14}"
          f"{'p90 |err|':>12}{'in p10-p90':>12}{'median width':>14}{'wall s':>8}")  # fmt: skip
    for label, batch in (
        ("none (history)", jobs),
        ("duration x U(1,3)", with_limits(jobs, seed=args.seed)),
    ):
        t0 = time.perf_counter()
        got = replay(args.policy, config, batch)
        wall = time.perf_counter() - t0
        for kind, score in (("raw", got.raw), ("calib", got.calibrated)):
            print(f"{label:<18}{kind:<6}{score.jobs:>7}{score.blocked:>8}"
                  f"{score.median_abs_error_s / 60:>10.1f} min"
                  f"{score.p90_abs_error_s / 60:>8.1f} min"
                  f"{100 * score.coverage:>11.0f}%{score.median_width_s / 60:>10.1f} min"
                  f"{wall:>8.1f}")  # fmt: skip
    return 0


def whole_gpu_pods(path: Path, n: int) -> list:
    """The first ``n`` timed pods of an Alibaba v2023 pod list that ask for whole GPUs (the
    sharing ones need the sharing simulator), as trace jobs of one VC (no users in the trace)."""
    from labhive.scheduler.sim.openb import load_pods
    from labhive.scheduler.sim.traces import TraceJob

    pods = [p for p in load_pods(path).pods if p.gpus >= 1 and not p.sharing and p.duration > 0]
    pods.sort(key=lambda p: (p.submit, p.line))
    return [TraceJob(p.name, p.submit, "default", "", p.gpus, p.duration, line=p.line)
            for p in pods[:n]]  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
