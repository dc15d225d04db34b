"""What the disk limits cost: a task's output through the supervisor's relay, the quota
watcher's walk of a work dir, and the disk guard's check before each store write and each
submission (docs/local-executor.md and docs/service.md, "Disk").

- relay: a task writing ``--gib`` GiB to its stdout (relayed, capped at 100 MiB or not), and the
  same written by the task straight into a file in its work dir (no relay), on ``--dir``'s file
  system; wall time from launch to its exit being seen;
- walk: ``quota.usage`` over ``--files`` small files in 100 directories (the watcher's cost per
  look), beside ``du -s`` on the same tree;
- overshoot: a task writing at full speed (``dd``, at most 4 GiB) under a 64 MiB work-dir
  quota and a 5 s interval: how much it held when its watcher stopped it;
- guard: ``DiskGuard.make_room`` (before every store write) and ``check_submission``.

    python benchmarks/bench_disk.py [--dir /var/tmp] [--gib 1] [--files 100000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

from labhive.scheduler.core.sizes import MIB
from labhive.scheduler.executors.base import TaskKey, TaskLaunch
from labhive.scheduler.executors.local import LocalExecutor
from labhive.scheduler.executors.quota import usage
from labhive.scheduler.service.diskspace import DiskGuard


def run_task(ex: LocalExecutor, name: str, command: str) -> float:
    start = time.perf_counter()
    ex.launch([TaskLaunch(TaskKey(name, 0, "main", 0), name, command, "node0", (0,))])
    while not ex.poll():
        time.sleep(0.01)
    return time.perf_counter() - start


def relay(base: Path, gib: int) -> None:
    size = f"{gib}G"
    for cap in (None, 100 * MIB):
        ex = LocalExecutor(base / f"relay-{cap}", grace_s=1.0, output_cap=cap, work_quota=None)
        for what, cmd in (
            ("to stdout (relayed)", f"head -c {size} /dev/zero"),
            ("to a file (no relay)", f"head -c {size} /dev/zero > direct"),
            ("nothing", "true"),
        ):
            dt = run_task(ex, f"b{len(what)}", cmd)
            print(f"relay  cap={cap and f'{cap // MIB} MiB'}  {gib} GiB {what}: {dt:.2f} s")


def walk(base: Path, files: int) -> None:
    root = base / "tree"
    for i in range(100):
        sub = root / f"d{i}"
        sub.mkdir(parents=True)
        for j in range(files // 100):
            (sub / f"f{j}").write_bytes(b"x")
    for _ in range(2):
        t = time.perf_counter()
        used = usage([root])
        mine = time.perf_counter() - t
        t = time.perf_counter()
        subprocess.run(["du", "-s", "-B1", str(root)], capture_output=True, check=True)
        du = time.perf_counter() - t
        print(f"walk   {files} files ({used / MIB:.0f} MiB): usage {mine:.2f} s, du -s {du:.2f} s")


def overshoot(base: Path, runs: int = 3) -> None:
    quota = 64 * MIB
    for i in range(runs):
        ex = LocalExecutor(base / f"quota-{i}", grace_s=1.0, work_quota=quota, quota_interval_s=5)
        cmd = "dd if=/dev/zero of=big bs=1M count=4096 2>/dev/null; sleep 600"
        dt = run_task(ex, f"q{i}", cmd)
        held = usage([base / f"quota-{i}" / "jobs"])
        print(f"quota  64 MiB, 5 s interval, dd at full speed: stopped after {dt:.2f} s holding "
              f"{held / MIB:.0f} MiB ({(held - quota) / MIB:.0f} MiB past the quota)")  # fmt: skip


def guard(base: Path) -> None:
    g = DiskGuard(base, 8 * MIB)
    n = 20000
    room = timeit.timeit(g.make_room, number=n) / n * 1e6
    check = timeit.timeit(g.check_submission, number=n) / n * 1e6
    print(f"guard  make_room {room:.1f} us per store write, check_submission {check:.1f} us")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/var/tmp", help="where to work (its file system)")
    parser.add_argument("--gib", type=int, default=1, help="GiB a task writes (default 1)")
    parser.add_argument("--files", type=int, default=100000, help="files to walk (100000)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        relay(Path(d), args.gib)
        walk(Path(d), args.files)
        overshoot(Path(d))
        guard(Path(d))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
