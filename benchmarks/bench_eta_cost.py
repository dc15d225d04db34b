"""What the ETA thread costs the service's submissions: ``bench_service``'s load with ETAs on
and off, alternately in one sitting (a shared machine's load drifts; alternating pairs see the
same drift), and the ratio of each pair; with ETAs on, also the ETA thread's own CPU seconds
(``/metrics``) as a share of the service's, which the machine's load hardly moves.

    python benchmarks/bench_eta_cost.py [--pairs 3] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_service import drive, service


def measured(eta: str, clients: int, seconds: float) -> dict:
    """One bench_service run on SQLite with ``LABHIVE_ETA`` set (``labhive serve`` inherits
    it): submissions/s, the service's CPU ms per submission, the ETA thread's CPU seconds."""
    os.environ["LABHIVE_ETA"] = eta
    try:
        with (
            tempfile.TemporaryDirectory(prefix="labhive-bench-") as tmp,
            service(Path(tmp), None) as (port, token, pid),
        ):
            asyncio.run(drive(port, token, clients, 1.0))  # warm up
            before = _cpu(pid), _eta_cpu(port)
            latencies, _, elapsed = asyncio.run(drive(port, token, clients, seconds))
            after = _cpu(pid), _eta_cpu(port)
    finally:
        del os.environ["LABHIVE_ETA"]
    used = after[0] - before[0]
    return {
        "per_second": round(len(latencies) / elapsed, 1),
        "cpu_ms": round(used / len(latencies) * 1000, 3),
        "eta_share": (after[1] - before[1]) / used,
    }


def _cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def _eta_cpu(port: int) -> float:
    """The ETA thread's CPU seconds so far, from the service's /metrics (0 when it is off)."""
    page = httpx.get(f"http://127.0.0.1:{port}/api/v1/metrics", timeout=30).text
    for line in page.splitlines():
        if line.startswith("labhive_eta_forecast_cpu_seconds_total "):
            return float(line.split()[1])
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"{'pair':>4} {'eta':>4} {'subs/s':>8} {'cpu ms':>7} {'eta cpu':>8} {'load':>5}")
    rate_ratios, cpu_ratios, shares = [], [], []
    for pair in range(args.pairs):
        runs = {}
        order = ("off", "on") if pair % 2 == 0 else ("on", "off")  # neither always goes first
        for eta in order:
            r = runs[eta] = measured(eta, args.clients, args.seconds)
            load, share = os.getloadavg()[0], f"{100 * r['eta_share']:.1f}%"
            print(f"{pair:>4} {eta:>4} {r['per_second']:>8} {r['cpu_ms']:>7} {share:>8} "
                  f"{load:>5.1f}", flush=True)  # fmt: skip
        rate_ratios.append(runs["on"]["per_second"] / runs["off"]["per_second"])
        cpu_ratios.append(runs["on"]["cpu_ms"] / runs["off"]["cpu_ms"])
        shares.append(runs["on"]["eta_share"])
    print(
        f"on/off (sqlite, median of {args.pairs} pairs): "
        f"subs/s {statistics.median(rate_ratios):.3f} "
        f"(pairs {', '.join(f'{x:.3f}' for x in rate_ratios)}), "
        f"cpu ms per submission {statistics.median(cpu_ratios):.3f} "
        f"(pairs {', '.join(f'{x:.3f}' for x in cpu_ratios)}); "
        f"the ETA thread's share of the service's CPU {100 * statistics.median(shares):.1f}%"
    )
    print(f"load average afterwards {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
