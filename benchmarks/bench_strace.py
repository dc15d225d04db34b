"""Benchmark the strace parser: lines per second and peak memory on a 1,000,000-line log.

The log is made by repeating the real logs in ../shared/data/strace/ (the -f PyTorch CUDA
training log, the -tt SIGKILL log with signals and exits, the nvidia-smi logs) until it has
1,000,000 lines. Three figures, each on one core (times are the process's CPU time, so that
other work on a shared machine does not count; reading the file is included):

- parse: lines -> records (``iter_records``), streaming;
- summarize: parse + the streaming aggregates ``labhive strace parse`` prints;
- memory: peak Python heap (tracemalloc) while streaming 100k and 1M lines: the two must be
  about equal, i.e. memory independent of the log's length.

Run: .venv/bin/python benchmarks/bench_strace.py [--lines N]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import tempfile
import time
import tracemalloc
from pathlib import Path

from labhive.scheduler.observe.strace_observer import Observer
from labhive.scheduler.observe.strace_parse import LineStats, iter_records, open_log

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "strace"
SOURCES = [
    "torch_cuda_train_10steps.strace.gz",
    "torch_cuda_workers_sigkill.strace.gz",
    "nvidia_smi.strace",
    "nvidia_smi_L_ttt_X_verbose.strace",
]


def make_log(path: Path, n_lines: int) -> None:
    pool: list[str] = []
    for name in SOURCES:
        with open_log(DATA / name) as fh:
            pool.extend(fh)
    with path.open("w", encoding="utf-8", errors="surrogateescape") as out:
        out.writelines(itertools.islice(itertools.cycle(pool), n_lines))


def timed(path: Path, summarize: bool) -> tuple[float, LineStats]:
    stats = LineStats()
    observer = Observer()
    gc.collect()
    with path.open(encoding="utf-8", errors="surrogateescape") as fh:
        t0 = time.process_time()
        if summarize:
            add = observer.add
            for rec in iter_records(fh, stats=stats):
                add(rec)
        else:
            for _ in iter_records(fh, stats=stats):
                pass
        return time.process_time() - t0, stats


def peak_memory(path: Path, limit: int) -> int:
    gc.collect()
    tracemalloc.start()
    observer = Observer()
    with path.open(encoding="utf-8", errors="surrogateescape") as fh:
        for rec in iter_records(itertools.islice(fh, limit)):
            observer.add(rec)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3, help="best of N timings")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "big.strace"
        make_log(log, args.lines)
        size_mb = log.stat().st_size / 2**20
        print(f"log: {args.lines:,} lines, {size_mb:.0f} MiB (repeated real logs)")
        for label, summarize in (("parse", False), ("parse+summarize", True)):
            best = min(timed(log, summarize)[0] for _ in range(args.repeat))
            _, stats = timed(log, summarize)
            assert stats.parsed + stats.unparsed == stats.total == args.lines
            print(
                f"{label:<16} {args.lines / best:>10,.0f} lines/s  ({best:.2f} s; "
                f"{stats.unparsed} unparsed)"
            )
        small = peak_memory(log, args.lines // 10)
        large = peak_memory(log, args.lines)
        print(
            f"peak heap while streaming: {small / 2**20:.2f} MiB for {args.lines // 10:,} lines, "
            f"{large / 2**20:.2f} MiB for {args.lines:,} lines"
        )


if __name__ == "__main__":
    main()
