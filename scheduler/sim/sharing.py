"""GPU sharing on a heterogeneous cluster: the placement model of the Alibaba trace.

This is a world of its own beside HiveD's cells (the scheduling core stays whole-GPU): a node
has CPU (milli-CPUs), memory (MiB), a GPU model and GPUs each with 1000 thousandths free. A
task takes CPU and memory on one node and either whole GPUs or a share of one GPU; shares are
packed on a GPU up to 1000 (the trace's own model). A task runs only on a GPU model it names.

Fragmentation (Weng et al., ATC '23, from the paper's description): measured by a task class
``m``, a node's fragment ``F_n(m)`` is all of its unallocated GPU capacity when ``m`` cannot run
there (CPU, memory, model or GPUs short), else the free capacity of GPUs too small for ``m``
(GPUs with less than ``m``'s share free; for whole-GPU tasks, partly used GPUs). The node's
fragmentation for a workload ``M`` is the popularity-weighted sum over its classes, the
cluster's the sum over nodes. ``M`` is the GPU tasks of the trace (a CPU-only task uses no GPU,
so it would add the same share of every free GPU everywhere and is left out).

Placements (``PLACEMENTS``): ``firstfit`` (the first node that fits, in list order), ``bestfit``
(the node left with the least free GPU capacity, then CPU), and ``fgd`` (the node and GPU whose
expected fragmentation grows least: the paper's Fragmentation Gradient Descent). Within a node,
firstfit and bestfit give a share the fullest GPU it fits on. Nodes in the same state are
scored once per decision, so FGD costs one score per distinct node state, not per node.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from labhive.scheduler.sim.openb import MILLI, NodeSpec, Pod

#: A class of task for the fragmentation measure: (weight, cpu, memory, gpus, demand, models).
TaskClass = tuple[float, int, int, int, int, frozenset[str]]
Choice = tuple[int, ...]  # GPU indices a task takes on a node


class GpuNode:
    """A node's free CPU, memory and per-GPU capacity (thousandths)."""

    __slots__ = ("cpu", "frag", "free", "index", "memory", "model", "name", "spec")

    def __init__(self, spec: NodeSpec, index: int) -> None:
        self.spec = spec
        self.index = index
        self.name = spec.name
        self.model = spec.model
        self.cpu = spec.cpu
        self.memory = spec.memory
        self.free = [MILLI] * spec.gpus
        self.frag = 0.0

    def fits(self, pod: Pod) -> bool:
        if pod.models and self.model not in pod.models:
            return False
        if pod.cpu > self.cpu or pod.memory > self.memory:
            return False
        if pod.gpus == 0:
            return True
        if pod.sharing:
            return any(f >= pod.gpu_milli for f in self.free)
        return sum(1 for f in self.free if f == MILLI) >= pod.gpus

    def choices(self, pod: Pod) -> list[Choice]:
        """Distinct ways to take the pod's GPUs here (one per distinct free amount for a
        share, fullest first; the first whole GPUs free for whole-GPU tasks)."""
        if pod.gpus == 0:
            return [()]
        if pod.sharing:
            seen: dict[int, int] = {}
            for i, f in enumerate(self.free):
                if f >= pod.gpu_milli and f not in seen:
                    seen[f] = i
            return [(seen[f],) for f in sorted(seen)]
        whole = [i for i, f in enumerate(self.free) if f == MILLI]
        return [tuple(whole[: pod.gpus])]

    def take(self, pod: Pod, gpus: Choice, sign: int = 1) -> None:
        self.cpu -= sign * pod.cpu
        self.memory -= sign * pod.memory
        share = pod.gpu_milli if pod.sharing else MILLI
        for i in gpus:
            self.free[i] -= sign * share
            assert 0 <= self.free[i] <= MILLI, f"GPU {i} of {self.name} over-allocated"

    def state(self) -> tuple[str, int, int, tuple[int, ...]]:
        return (self.model, self.cpu, self.memory, tuple(sorted(self.free)))


class Fragmentation:
    """The paper's expected fragmentation of a node for a workload of task classes."""

    def __init__(self, classes: list[TaskClass]) -> None:
        by_demand: dict[tuple[int, int], list[tuple[float, int, int, frozenset[str]]]] = {}
        for w, cpu, mem, gpus, demand, models in classes:
            by_demand.setdefault((gpus, demand), []).append((w, cpu, mem, models))
        self.groups = list(by_demand.items())
        self._memo: dict[tuple[str, int, int, tuple[int, ...]], float] = {}

    def of(self, model: str, cpu: int, memory: int, free: list[int]) -> float:
        """Memoised by node state: nodes of one kind pass through the same states."""
        key = (model, cpu, memory, tuple(sorted(free)))
        value = self._memo.get(key)
        if value is None:
            if len(self._memo) > 500_000:
                self._memo.clear()
            value = self._memo[key] = self._of(model, cpu, memory, free)
        return value

    def _of(self, model: str, cpu: int, memory: int, free: list[int]) -> float:
        total = sum(free)
        if total == 0:
            return 0.0
        out = 0.0
        for (gpus, demand), members in self.groups:
            if gpus == 1 and demand < MILLI:
                small = sum(f for f in free if f < demand)
                runs = small < total  # some GPU has the share free
            else:
                small = sum(f for f in free if f < MILLI)
                runs = sum(1 for f in free if f == MILLI) >= gpus
            for w, c, m, models in members:
                ok = runs and c <= cpu and m <= memory and (not models or model in models)
                out += w * (small if ok else total)
        return out

    def node(self, node: GpuNode) -> float:
        return self.of(node.model, node.cpu, node.memory, node.free)

    def after(self, node: GpuNode, pod: Pod, gpus: Choice) -> float:
        free = list(node.free)
        share = pod.gpu_milli if pod.sharing else MILLI
        for i in gpus:
            free[i] -= share
        return self.of(node.model, node.cpu - pod.cpu, node.memory - pod.memory, free)


def workload(pods: Iterable[Pod]) -> list[TaskClass]:
    """The GPU tasks' classes, weighted by popularity (the fragmentation measure's ``M``)."""
    counts = Counter(p.shape for p in pods if p.gpus > 0)
    n = sum(counts.values())
    return [(k / n, cpu, mem, g, d, models) for (cpu, mem, g, d, models), k in counts.items()]


class SharingCluster:
    """The nodes, their fragmentation kept up to date, and a placement rule."""

    def __init__(self, specs: list[NodeSpec], classes: list[TaskClass], placement: str) -> None:
        if placement not in PLACEMENTS:
            raise ValueError(f"unknown placement {placement!r}")
        self.nodes = [GpuNode(s, i) for i, s in enumerate(specs)]
        self.measure = Fragmentation(classes)
        self.capacity = MILLI * sum(s.gpus for s in specs)
        self.allocated = 0  # thousandths of a GPU held
        self.frag = 0.0
        for node in self.nodes:
            node.frag = self.measure.node(node)
            self.frag += node.frag
        self._choose: Callable[[Pod], tuple[GpuNode, Choice] | None] = getattr(
            self, "_" + placement
        )
        self.placed: dict[str, tuple[GpuNode, Choice]] = {}

    def fits_empty(self, pod: Pod) -> bool:
        """Could the pod run on some node of this cluster with nothing else on it?"""
        for s in {(n.spec.cpu, n.spec.memory, n.spec.gpus, n.model) for n in self.nodes}:
            cpu, mem, gpus, model = s
            if pod.models and model not in pod.models:
                continue
            if pod.cpu <= cpu and pod.memory <= mem and (pod.gpus <= gpus):
                return True
        return False

    def place(self, pod: Pod) -> GpuNode | None:
        where = self._choose(pod)
        if where is None:
            return None
        node, gpus = where
        self._change(node, pod, gpus, +1)
        self.placed[pod.name] = where
        return node

    def release(self, pod: Pod) -> None:
        node, gpus = self.placed.pop(pod.name)
        self._change(node, pod, gpus, -1)

    def _change(self, node: GpuNode, pod: Pod, gpus: Choice, sign: int) -> None:
        node.take(pod, gpus, sign)
        self.allocated += sign * pod.demand
        self.frag -= node.frag
        node.frag = self.measure.node(node)
        self.frag += node.frag

    # ---- placement rules ------------------------------------------------------------------

    def _firstfit(self, pod: Pod) -> tuple[GpuNode, Choice] | None:
        for node in self.nodes:
            if node.fits(pod):
                return node, node.choices(pod)[0]
        return None

    def _bestfit(self, pod: Pod) -> tuple[GpuNode, Choice] | None:
        best = None
        best_key: tuple[int, int] | None = None
        for node in self.nodes:
            if node.fits(pod):
                key = (sum(node.free) - pod.demand, node.cpu - pod.cpu)
                if best_key is None or key < best_key:
                    best, best_key = node, key
        return None if best is None else (best, best.choices(pod)[0])

    def _fgd(self, pod: Pod) -> tuple[GpuNode, Choice] | None:
        scored: dict[tuple[str, int, int, tuple[int, ...]], tuple[float, int]] = {}
        best: tuple[float, int, GpuNode, Choice] | None = None
        for node in self.nodes:
            if not node.fits(pod):
                continue
            state = node.state()
            known = scored.get(state)
            if known is None:
                deltas = [
                    (self.measure.after(node, pod, c) - node.frag, k)
                    for k, c in enumerate(node.choices(pod))
                ]
                known = scored[state] = min(deltas)
            delta, k = known
            if best is None or delta < best[0] - 1e-9:
                best = (delta, node.index, node, node.choices(pod)[k])
        return None if best is None else (best[2], best[3])


PLACEMENTS = ("firstfit", "bestfit", "fgd")


@dataclass(frozen=True, slots=True)
class FillPoint:
    load: float  # GPU demand arrived so far / cluster GPU capacity
    unallocated: float  # share of GPU capacity left unallocated
    fragmentation: float  # the measure, as a share of GPU capacity
    failed: int  # tasks that found no node


def fill(
    specs: list[NodeSpec],
    pods: list[Pod],
    placement: str,
    *,
    loads: tuple[float, ...] = (0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2),
    seed: int = 0,
) -> list[FillPoint]:
    """The paper's experiment: GPU tasks drawn from the trace (with replacement) arrive and
    never leave; each is placed or fails. Where arrived demand crosses each of ``loads``,
    how much GPU capacity is still unallocated (a good placement leaves less)."""
    import random

    gpu_pods = [p for p in pods if p.gpus > 0]
    cluster = SharingCluster(specs, workload(gpu_pods), placement)
    rng = random.Random(seed)
    arrived, failed, out = 0, 0, []
    targets = sorted(loads)
    n = 0
    while targets and gpu_pods:
        template = rng.choice(gpu_pods)
        n += 1
        pod = Pod(f"fill-{n}", 0.0, 0.0, template.cpu, template.memory, template.gpus,
                  template.gpu_milli, template.models)  # fmt: skip
        arrived += pod.demand
        if cluster.place(pod) is None:
            failed += 1
        while targets and arrived >= targets[0] * cluster.capacity:
            cap = cluster.capacity
            out.append(
                FillPoint(targets.pop(0), 1 - cluster.allocated / cap, cluster.frag / cap, failed)
            )
    return out
