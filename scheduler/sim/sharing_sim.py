"""Replaying the Alibaba trace in virtual time on the GPU-sharing cluster model.

Pods arrive at their ``creation_time`` and wait in one queue; at each instant every completion
and arrival is applied first, then one pass tries the waiting pods in queue order (FIFO by
arrival, or SJF by duration), each placed by the placement rule or left waiting (a pod that
does not fit does not block the others: pods of other shapes may fit elsewhere, as in
Kubernetes). Pods that fit on no node of the empty cluster are rejected at arrival.

Metrics: JCT and wait per pod, GPU capacity allocated and the fragmentation measure
(``sharing.Fragmentation``) integrated over time, both as shares of the cluster's GPU capacity.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from labhive.scheduler.sim.openb import NodeSpec, Pod
from labhive.scheduler.sim.sharing import PLACEMENTS, SharingCluster, workload

#: ``--policy`` names for the trace: (queue order, placement).
SHARING_POLICIES = {
    "fifo": ("fifo", "firstfit"),
    "sjf": ("sjf", "firstfit"),
    "firstfit": ("fifo", "firstfit"),
    "bestfit": ("fifo", "bestfit"),
    "fgd": ("fifo", "fgd"),
}


@dataclass
class SharingResult:
    policy: str
    pods: int = 0
    rejected: int = 0
    started: int = 0
    unfinished: int = 0
    jct: list[float] = field(default_factory=list)
    wait: list[float] = field(default_factory=list)
    end_time: float = 0.0
    allocated_avg: float = 0.0  # share of GPU capacity, time-averaged
    frag_avg: float = 0.0  # fragmentation share of GPU capacity, time-averaged
    ever_waited: int = 0
    series: list[tuple[float, float, float, int]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        def avg(xs: list[float]) -> float:
            return sum(xs) / len(xs) if xs else 0.0

        waits = sorted(self.wait)
        p95 = waits[min(len(waits) - 1, int(0.95 * len(waits)))] if waits else 0.0
        return {
            "policy": self.policy,
            "pods": self.pods,
            "rejected": self.rejected,
            "finished": len(self.jct),
            "unfinished": self.unfinished,
            "avg_jct_s": round(avg(self.jct), 1),
            "avg_wait_s": round(avg(self.wait), 1),
            "p95_wait_s": round(p95, 1),
            "ever_waited": self.ever_waited,
            "gpu_allocated": round(self.allocated_avg, 4),
            "fragmentation": round(self.frag_avg, 4),
            "makespan_s": round(self.end_time, 1),
        }


def sharing_policy(text: str) -> tuple[str, str]:
    """(queue order, placement) for a ``--policy`` name on the Alibaba trace."""
    from labhive.scheduler.core.errors import UserError

    name, _, rest = text.partition(":")
    if name not in SHARING_POLICIES:
        raise UserError(
            f"policy {name!r} does not apply to the Alibaba trace (GPU sharing); choose one of "
            f"{', '.join(SHARING_POLICIES)} (placements {', '.join(PLACEMENTS)})"
        )
    order, placement = SHARING_POLICIES[name]
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key.strip() != "order" or value.strip() not in ("fifo", "sjf"):
            raise UserError(f"option {item!r} of {name}: only order=fifo or order=sjf")
        order = value.strip()
    return order, placement


def simulate_sharing(
    specs: list[NodeSpec],
    pods: list[Pod],
    policy: str,
    *,
    progress: Callable[[int], None] | None = None,
    series: bool = False,
) -> SharingResult:
    """Replay ``pods`` (sorted by arrival) on ``specs`` under ``policy``."""
    order, placement = sharing_policy(policy)
    cluster = SharingCluster(specs, workload(pods), placement)
    result = SharingResult(policy, pods=len(pods))
    cap = cluster.capacity or 1
    key: Callable[[Pod], Any] = (
        (lambda p: (p.duration, p.submit, p.line)) if order == "sjf" else (lambda p: 0)
    )
    waiting = Waiting()
    ends: list[tuple[float, int, Pod]] = []
    i, n, seq = 0, len(pods), 0
    now = last = 0.0 if not pods else pods[0].submit
    alloc_int = frag_int = 0.0
    while i < n or ends:
        now = min(pods[i].submit if i < n else float("inf"), ends[0][0] if ends else float("inf"))
        alloc_int += cluster.allocated * (now - last)
        frag_int += cluster.frag * (now - last)
        last = now
        freed = 0
        while ends and ends[0][0] <= now:
            _, _, pod = heapq.heappop(ends)
            cluster.release(pod)
            result.jct.append(now - pod.submit)
            freed += 1
        arrived: list[Pod] = []
        while i < n and pods[i].submit <= now:
            pod = pods[i]
            i += 1
            if not cluster.fits_empty(pod):
                result.rejected += 1
                continue
            arrived.append(pod)
        for pod in arrived:
            waiting.add(key(pod), pod)
        if freed or arrived:
            seq = _pass(cluster, waiting, ends, now, result, seq)
        if progress is not None and freed:
            progress(freed)
        if series:
            result.series.append((now, cluster.allocated / cap, cluster.frag / cap, waiting.n))
    result.unfinished = waiting.n
    result.end_time = now
    span = now - (pods[0].submit if pods else 0.0)
    if span > 0:
        result.allocated_avg = alloc_int / span / cap
        result.frag_avg = frag_int / span / cap
    return result


class Waiting:
    """The waiting pods, one line per shape (pods of one shape fit exactly where each other
    fit), each line in queue order: a pass visits each line's head, not every pod."""

    def __init__(self) -> None:
        self.lines: dict[Any, list[tuple[Any, int, Pod]]] = {}
        self.n = 0
        self._seq = 0

    def add(self, key: Any, pod: Pod) -> None:
        self._seq += 1
        self.n += 1
        heapq.heappush(self.lines.setdefault(pod.shape, []), (key, self._seq, pod))

    def heads(self) -> list[tuple[Any, int, Any]]:
        return [(line[0][0], line[0][1], shape) for shape, line in self.lines.items()]

    def pop(self, shape: Any) -> tuple[Any, int, Any] | None:
        """Take the head of ``shape``'s line; the line's next head, if any."""
        line = self.lines[shape]
        heapq.heappop(line)
        self.n -= 1
        if not line:
            del self.lines[shape]
            return None
        return (line[0][0], line[0][1], shape)


def _pass(
    cluster: SharingCluster,
    waiting: Waiting,
    ends: list[tuple[float, int, Pod]],
    now: float,
    result: SharingResult,
    seq: int,
) -> int:
    """Try the heads of the waiting lines in queue order; a line whose head found no room is
    passed over for the rest of the pass (nothing is freed during it)."""
    heads = waiting.heads()
    heapq.heapify(heads)
    while heads:
        _, _, shape = heapq.heappop(heads)
        pod = waiting.lines[shape][0][2]
        if cluster.place(pod) is None:
            continue
        nxt = waiting.pop(shape)
        if nxt is not None:
            heapq.heappush(heads, nxt)
        result.started += 1
        wait = now - pod.submit
        result.wait.append(wait)
        result.ever_waited += wait > 0
        seq += 1
        heapq.heappush(ends, (now + pod.duration, seq, pod))
    return seq
