"""What a task's private mounts (``executors/sandbox_mounts.py``) cost at its start.

``start_cost`` times, as the supervisor does it, fork -> (private mounts) -> become the user ->
exec ``/bin/true`` -> reaped, with and without the mounts (a mount namespace, one tmpfs bound on
/tmp and /dev/shm, a procfs with hidepid), alternating the two so that a machine's load
weighs on both alike. The namespace's teardown at exit is inside the figure too. Needs root.

    sudo .venv/bin/python benchmarks/isolation_mounts.py [N]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from labhive.scheduler.executors import sandbox_mounts
from labhive.scheduler.executors.workdir import become, run_as

UID = 200199


def _one_start(record: dict[str, Any] | None, uid: int) -> float:
    """Seconds from fork to reaping a child that set up ``record`` and ran /bin/true."""
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            if record is not None:
                sandbox_mounts.enter(record)
            become(uid, uid)
            os.execv("/bin/true", ["/bin/true"])
        finally:
            os._exit(127)
    _, status = os.waitpid(pid, 0)
    elapsed = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"a measured start failed: wait status {status}")
    return elapsed


def _summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    return {
        "p50_ms": round(statistics.median(ms), 3),
        "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 3),
        "mean_ms": round(statistics.fmean(ms), 3),
    }


def start_cost(
    n: int = 200, memory_mb: int = 1024, uid: int = UID, data_dir: str = "/srv/labhive"
) -> dict[str, Any]:
    """p50/p95/mean of ``n`` task starts with the private mounts and ``n`` without. A
    ``data_dir`` under /tmp adds its bind back into the private /tmp to the cost."""
    if os.geteuid() != 0:
        raise PermissionError("measuring the private mounts needs root")
    record = sandbox_mounts.plan(run_as(uid, uid), memory_mb << 20, Path(data_dir), "bench")
    if not record["enforced"]:
        raise RuntimeError(record["why"])
    with_mounts, without = [], []
    for _ in range(n):
        with_mounts.append(_one_start(record, uid))
        without.append(_one_start(None, uid))
    plain, mounted = _summary(without), _summary(with_mounts)
    cost = {k: round(mounted[k] - plain[k], 3) for k in plain}
    return {"n": n, "without": plain, "with": mounted, "cost": cost}


if __name__ == "__main__":
    import json

    print(json.dumps(start_cost(int(sys.argv[1]) if len(sys.argv) > 1 else 200), indent=1))
