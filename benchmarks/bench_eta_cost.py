"""What the ETA thread costs the service's submissions: ``bench_service``'s measurement with
ETAs on and off, alternately in one sitting (a shared machine's load drifts; alternating pairs
see the same drift), and the ratio of each pair.

    python benchmarks/bench_eta_cost.py [--pairs 3] [--seconds 10] [--backend sqlite]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_service import measure  # noqa: E402


def measured(eta: str, backend: str, clients: int, seconds: float) -> dict:
    """One run of bench_service with ``LABHIVE_ETA`` set (``labhive serve`` inherits it)."""
    os.environ["LABHIVE_ETA"] = eta
    try:
        return measure(backend, clients, seconds)
    finally:
        del os.environ["LABHIVE_ETA"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--backend", default="sqlite")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"{'pair':>4} {'eta':>4} {'subs/s':>8} {'cpu ms':>7} {'load':>5}")
    rate_ratios, cpu_ratios = [], []
    for pair in range(args.pairs):
        runs = {}
        order = ("off", "on") if pair % 2 == 0 else ("on", "off")  # neither always goes first
        for eta in order:
            r = runs[eta] = measured(eta, args.backend, args.clients, args.seconds)
            load = os.getloadavg()[0]
            print(f"{pair:>4} {eta:>4} {r['per_second']:>8} {r['cpu_ms']:>7} {load:>5.1f}", flush=True)
        rate_ratios.append(runs["on"]["per_second"] / runs["off"]["per_second"])
        cpu_ratios.append(runs["on"]["cpu_ms"] / runs["off"]["cpu_ms"])
    print(
        f"on/off ({args.backend}, median of {args.pairs} pairs): "
        f"subs/s {statistics.median(rate_ratios):.3f} "
        f"(pairs {', '.join(f'{x:.3f}' for x in rate_ratios)}), "
        f"cpu ms per submission {statistics.median(cpu_ratios):.3f} "
        f"(pairs {', '.join(f'{x:.3f}' for x in cpu_ratios)})"
    )
    print(f"load average afterwards {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
