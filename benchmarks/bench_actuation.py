"""Other users' submit-to-start latency while jobs that ignore SIGTERM are being cancelled.

Starts ``labhive serve`` on loopback (a virtual 2 x 4 GPU cluster, the local executor, a 10 s
grace period), runs 4 one-GPU tasks in VC ``vc1`` that ignore SIGTERM, cancels all 4, and during
the next ``--window`` seconds (the grace period the stops take) another user submits one-GPU
jobs to VC ``default``, one after another, each once the last has ended (so that they never
queue for each other's GPUs). Reported per probe: the store's submit-to-start time
(``started_at - submitted_at``: the scheduling pass) and what the client saw (submit until
``GET /jobs/{id}`` no longer says WAITING, polled every 20 ms). Before the stops moved off the
scheduling pass each cancel froze the loop for the whole grace period (the issue measured
~30 s). Runs against whichever ``labhive`` the Python running it imports.

    python benchmarks/bench_actuation.py [--grace 10] [--window 12] [--stubborn 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from service_process import serve_process  # noqa: E402

CLUSTER = ROOT / "tests" / "data" / "cluster-2x4.yaml"
STUBBORN = "trap '' TERM; echo ready; while true; do sleep 0.2; done"
USERS = """
users:
  alice: {token: alice-token-123, groups: [a]}
  bob: {token: bob-token-4567, groups: [b]}
groups:
  a: {vcs: [vc1]}
  b: {vcs: [default]}
"""


@contextmanager
def service(tmp: Path, grace: float) -> Iterator[str]:
    (tmp / "users.yaml").write_text(USERS)
    (tmp / "users.yaml").chmod(0o600)  # it holds tokens: the service refuses a readable one
    args = ["--grace-s", str(grace), "--users", str(tmp / "users.yaml"), "--stop-tasks-on-exit"]
    with serve_process(tmp, CLUSTER, *args) as served:
        yield served.url


def _http(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120)


def _until(check, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while not (got := check()):
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.02)
    return got


def stubborn_jobs(alice: httpx.Client, n: int) -> list[int]:
    ids = []
    for i in range(n):
        doc = {"name": f"stubborn{i}", "vc": "vc1", "gpus": 1, "command": STUBBORN}
        ids.append(alice.post("/jobs", json=doc).raise_for_status().json()["id"])
    for job_id in ids:
        _until(lambda j=job_id: "ready" in alice.get(f"/jobs/{j}/logs").json().get("data", ""))
    return ids


def probe(bob: httpx.Client, i: int) -> tuple[float, float]:
    """One job of the other user: (store submit-to-start, client-seen submit-to-start)."""
    began = time.perf_counter()
    doc = {"name": f"probe{i}", "vc": "default", "gpus": 1, "command": "true"}
    job_id = bob.post("/jobs", json=doc).raise_for_status().json()["id"]
    job = _until(lambda: (j := bob.get(f"/jobs/{job_id}").json())["state"] != "WAITING" and j)
    seen = time.perf_counter() - began
    # Its end, before the next probe: probes must not queue for each other's GPUs.
    job = _until(lambda: (j := bob.get(f"/jobs/{job_id}").json())["state"] == "SUCCEEDED" and j)
    return job["started_at"] - job["submitted_at"], seen


def measure(grace: float, window: float, n: int) -> dict:
    with (
        tempfile.TemporaryDirectory(prefix="labhive-bench-") as tmp,
        service(Path(tmp), grace) as url,
        _http(url, "alice-token-123") as alice,
        _http(url, "bob-token-4567") as bob,
    ):
        for i in range(3):  # warm up: the first launches pay for imports
            probe(bob, -1 - i)
        ids = stubborn_jobs(alice, n)
        began = time.perf_counter()
        for job_id in ids:
            alice.post(f"/jobs/{job_id}/cancel", params={"wait": 0}).raise_for_status()
        cancel_s = time.perf_counter() - began
        store: list[float] = []
        seen: list[float] = []
        at: list[float] = []
        while time.perf_counter() - began < window:
            at.append(time.perf_counter() - began)
            a, b = probe(bob, len(store))
            store.append(a)
            seen.append(b)
        stopping = sum(
            alice.get(f"/jobs/{j}").json()["reason"] == "stopping" for j in ids
        )  # still draining when the window closed: the probes ran inside the grace period
        _until(lambda: all(alice.get(f"/jobs/{j}").json()["state"] == "STOPPED" for j in ids))
        stopped_s = time.perf_counter() - began
    return {"probes": len(store), "store": store, "seen": seen, "at": at, "cancel_s": cancel_s,
            "stopping_at_end": stopping, "stopped_s": stopped_s}  # fmt: skip


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--grace", type=float, default=10)
    parser.add_argument("--window", type=float, default=12)
    parser.add_argument("--stubborn", type=int, default=4)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    r = measure(args.grace, args.window, args.stubborn)
    print(
        f"{args.stubborn} jobs ignoring SIGTERM cancelled (grace {args.grace:g} s); "
        f"the {args.stubborn} cancel requests took {r['cancel_s'] * 1000:.0f} ms; "
        f"all STOPPED after {r['stopped_s']:.1f} s"
    )
    print(
        f"another user's jobs during the stops: {r['probes']} probes "
        f"({r['stopping_at_end']} of the cancelled jobs still stopping when they ended)"
    )
    for name in ("store", "seen"):
        v = r[name]
        print(
            f"  submit-to-start ({name:<5}) p50 {statistics.median(v) * 1000:7.1f} ms   "
            f"p99 {_p(v, 0.99) * 1000:7.1f} ms   max {max(v) * 1000:7.1f} ms"
        )
    worst = max(range(r["probes"]), key=lambda i: r["seen"][i])
    print(f"  the slowest probe was submitted {r['at'][worst]:.1f} s after the cancels")
    print("store: started_at - submitted_at; seen: the client's submit until not WAITING")
    print(f"load average afterwards {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
