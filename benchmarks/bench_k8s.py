"""What the Kubernetes executor costs per gang, against the in-memory API server on loopback.

Launches gangs (create every pod, the headless Service, then bind each pod), waits for every
task's exit through the watch, and stops the gangs; prints gangs per second, p50/p99 launch
latency and the API requests per gang. The API server is tests/k8s_fake.py, so the figures
measure LabHive and the ``kubernetes`` client, not a real API server or kubelet (a real one adds
its own latency per request; the request count tells how much).

    python benchmarks/bench_k8s.py [--gangs 200] [--tasks 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client as k8s

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from k8s_fake import FakeServer, Kubelet  # noqa: E402

from labhive.scheduler.executors.base import TaskKey, TaskLaunch  # noqa: E402
from labhive.scheduler.executors.kubernetes import KubernetesExecutor  # noqa: E402


@dataclass(frozen=True)
class Node:
    name: str
    gpus: int


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gangs", type=int, default=200)
    ap.add_argument("--tasks", type=int, default=4)
    args = ap.parse_args()
    nodes = {f"node-{i}": 8 for i in range(args.tasks)}
    with FakeServer(nodes, history=100_000) as server:
        kubelet = Kubelet(server.api).start(0.005)
        conf = k8s.Configuration(host=server.url)
        config = [Node(n, g) for n, g in nodes.items()]
        lh = KubernetesExecutor(k8s.ApiClient(conf), "labhive", nodes=config, watch_timeout_s=5)
        latencies, handles = [], []
        start = time.perf_counter()
        for g in range(args.gangs):
            tasks = [
                TaskLaunch(TaskKey(str(g), 0, "worker", i), f"g{g}", "exit 0", f"node-{i}", (0,))
                for i in range(args.tasks)
            ]
            t0 = time.perf_counter()
            handles.extend(lh.launch(tasks))
            latencies.append(time.perf_counter() - t0)
        launched = time.perf_counter() - start
        want, seen = args.gangs * args.tasks, 0
        deadline = time.monotonic() + 120
        while seen < want and time.monotonic() < deadline:
            seen += len(lh.poll())
            time.sleep(0.01)
        settled = time.perf_counter() - start
        requests = len(server.api.requests)
        lh.close()
        kubelet.close()
    latencies.sort()
    print(f"gangs: {args.gangs} x {args.tasks} pods (create all, Service, bind all)")
    print(f"  launch: {args.gangs / launched:8.1f} gangs/s   {want / launched:8.1f} pods/s")
    p50 = statistics.median(latencies) * 1e3
    p99 = latencies[int(0.99 * (len(latencies) - 1))] * 1e3
    print(f"  launch latency per gang: p50 {p50:.1f} ms   p99 {p99:.1f} ms")
    print(f"  all {want} exits seen through the watch after {settled:.2f} s ({seen} seen)")
    print(f"  API requests per gang (launch and watch): {requests / args.gangs:.1f}")


if __name__ == "__main__":
    main()
