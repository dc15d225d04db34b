"""The FGD paper's fill experiment and its baselines, written from the paper's definitions.

Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
Gradient Descent" (USENIX ATC '23) and its simulator (hkust-adsl/kubernetes-scheduler-simulator)
measure placements differently from LabHive's own ``--fill`` (``sharing.fill``):

- workload: every row of the pod list - CPU-only tasks and never-scheduled rows included - in a
  seeded random order (the paper's runs pass ``--shuffle-pod=true``), then copies of rows drawn
  uniformly at random appended until the GPU demand would pass 130% of the cluster's GPU
  capacity; nothing ever leaves;
- fragmentation (``PaperFragmentation``): the task classes are (CPU, GPUs, share, GPU models) of
  ALL tasks, CPU-only ones included, memory left out, cut to the most popular classes covering
  95% of tasks; a class that cannot run on a node makes all the node's free GPU capacity a
  fragment; a class that runs makes the GPUs with less than its share free a fragment; a
  CPU-only class counts all the node's free GPU capacity (it can never use it);
- scores are whole numbers 0..100 as a Kubernetes score plugin returns them, and the scheduler
  takes the highest. On a tie the simulator's vendored kube-scheduler (``selectHost`` in
  vendor/k8s.io/kubernetes/pkg/scheduler/core/generic_scheduler.go) keeps the node whose NAME
  sorts first - not a random one, as upstream Kubernetes does. But the simulator renames every
  node before the run (``syncClusterResourceList`` in pkg/simulator/simulator.go: the nodes
  sorted by name get the prefixes ``%04d-`` of a seeded ``rand.Perm``), so the "first name" is
  a node drawn at random for each seed and kept for the run: ``ties="seeded"``, the default.
  ``ties="name"`` breaks ties by the nodes' own names (openb-node-0000 first, every seed: the
  CPU-only tasks, which tie everywhere under GPU packing and clustering, then pile onto the
  same first-named nodes in every run); ``ties="random"`` gives the upstream rule
  (it costs FGD most of its gain: many nodes tie at one whole-number score).
  LabHive's exact minimum with the lowest-numbered node on a tie stays in ``sharing.py``
  (placement ``fgd`` there; ``fgd-exact`` here).

Placements (``PAPER_PLACEMENTS``): ``random`` (a node and, for a share, a GPU at random, as
the paper's runs pass ``-gpusel random``; the others put a share on the fullest GPU it fits,
``-gpusel best``), ``dotprod`` (free vector . demand vector, CPU and
GPU normalised by the largest node spec, the smaller the better), ``gpupacking`` (partly used
GPUs, then nodes with used GPUs, then idle nodes), ``gpuclustering`` (nodes already holding the
same kind of task: shares, or N-GPU tasks), ``paper-bestfit`` (free CPU and GPU left after the
task, weighted half and half, min-max normalised over the feasible nodes), ``fgd`` (sigmoid of
the fragmentation the placement removes, times 100, truncated), ``fgd-exact`` (LabHive's FGD
under this workload and measure: exact minimum of the fragmentation increase, lowest node on a
tie). Nodes in one state are scored once (``_best``): a score is memoised by (task shape, node
state) across decisions, as a node's state changes only when a task lands on it, so FGD costs
one fragmentation measure per new node state and task shape.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from labhive.scheduler.sim.openb import MILLI, NodeSpec, Pod
from labhive.scheduler.sim.sharing import Choice, Fragmentation, GpuNode, workload

#: The paper simulator's normalising node spec (its largest node): CPU milli, GPU milli.
MAX_CPU = 128_000
MAX_GPU = 8_000
#: Classes kept for the fragmentation measure: the most popular covering this share of tasks.
POPULARITY = 0.95
#: A class: (weight, cpu, gpus, share per GPU (0 CPU-only, 1000 whole), models).
PaperClass = tuple[float, int, int, int, frozenset[str]]
State = tuple[str, int, int, tuple[int, ...], tuple[str, ...]]

#: Tie rules among top-scored nodes: the paper simulator's (its vendored kube-scheduler's
#: selectHost keeps the node whose name sorts first, the names prefixed by a seeded random rank),
#: the nodes' own names, or uniform at random.
TIES = ("seeded", "name", "random")
PAPER_PLACEMENTS = (
    "random",
    "dotprod",
    "gpupacking",
    "gpuclustering",
    "paper-bestfit",
    "fgd",
    "fgd-exact",
)
#: The published means (10 seeds) of unallocated GPU share at 100% arrived load, per trace
#: variant: the simulator repository's experiments/analysis/expected_results/
#: analysis_allo_discrete.csv (tune 1.3), 100 - allocated%.
PUBLISHED_UNALLOCATED = {
    "default": {"random": 13.70, "dotprod": 9.38, "gpuclustering": 8.35,
                "gpupacking": 8.22, "paper-bestfit": 7.14, "fgd": 4.77},
    "gpushare80": {"random": 19.38, "dotprod": 15.86, "gpuclustering": 15.50,
                   "gpupacking": 15.35, "paper-bestfit": 13.34, "fgd": 10.92},
    "gpuspec33": {"random": 16.13, "dotprod": 20.18, "gpuclustering": 18.91,
                  "gpupacking": 17.78, "paper-bestfit": 19.60, "fgd": 12.16},
    "multigpu20": {"random": 13.08, "dotprod": 8.15, "gpuclustering": 6.66,
                   "gpupacking": 6.50, "paper-bestfit": 6.27, "fgd": 4.47},
}  # fmt: skip


def paper_classes(pods: list[Pod]) -> list[PaperClass]:
    """The typical task classes: all tasks by (cpu, gpus, share, models), the most popular
    covering 95% of tasks, weights renormalised to sum to 1."""
    counts = Counter((p.cpu, p.gpus, _share(p), p.models) for p in pods)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], repr(kv[0])))
    kept, covered, total = [], 0, sum(counts.values())
    for key, n in ranked:
        if covered >= POPULARITY * total:
            break
        kept.append((key, n))
        covered += n
    return [(n / covered, cpu, g, s, models) for (cpu, g, s, models), n in kept]


def _share(pod: Pod) -> int:
    """Milli-GPU per GPU asked for: 0 CPU-only, a share, or 1000 for whole GPUs."""
    return 0 if pod.gpus == 0 else (pod.gpu_milli if pod.sharing else MILLI)


class PaperFragmentation:
    """The paper's expected fragmentation of a node (memory is not part of it)."""

    def __init__(self, classes: list[PaperClass]) -> None:
        self.classes = classes
        self._memo: dict[tuple[str, int, tuple[int, ...]], float] = {}

    def of(self, model: str, cpu: int, free: list[int] | tuple[int, ...]) -> float:
        key = (model, cpu, tuple(sorted(free)))
        value = self._memo.get(key)
        if value is None:
            if len(self._memo) > 500_000:
                self._memo.clear()
            value = self._memo[key] = self._of(model, cpu, key[2])
        return value

    def _of(self, model: str, cpu: int, free: tuple[int, ...]) -> float:
        idle = sum(free)
        if idle == 0:
            return 0.0
        out = 0.0
        for w, c, gpus, share, models in self.classes:
            if share == 0 or (models and model not in models):
                out += w * idle  # CPU-only, or a GPU model it may not use
                continue
            hosts = sum(1 for f in free if f >= share) >= gpus
            if hosts and c <= cpu:
                out += w * sum(f for f in free if f < share)
            else:
                out += w * idle
        return out

    def node(self, node: GpuNode) -> float:
        return self.of(node.model, node.cpu, node.free)

    def after(self, node: GpuNode, pod: Pod, gpus: Choice) -> float:
        """The node's fragmentation were the pod placed on ``gpus``."""
        free = list(node.free)
        for i in gpus:
            free[i] -= _share(pod)
        return self.of(node.model, node.cpu - pod.cpu, free)


@dataclass(frozen=True, slots=True)
class PaperPoint:
    load: float  # arrived GPU demand / GPU capacity
    unallocated: float  # share of GPU capacity unallocated
    fragmentation: float  # the paper's measure, share of GPU capacity
    failed: int  # tasks (GPU or CPU-only) that found no node


class PaperCluster:
    """Nodes, the paper's measure kept per node, and one of the paper's placements."""

    def __init__(
        self,
        specs: list[NodeSpec],
        classes: list[PaperClass],
        placement: str,
        seed: int = 0,
        ties: str = "seeded",
    ) -> None:
        if ties not in TIES:
            raise ValueError(f"ties={ties!r}: choose one of {', '.join(TIES)}")
        self.ties = ties
        if placement not in PAPER_PLACEMENTS:
            raise ValueError(
                f"unknown placement {placement!r}; choose one of {', '.join(PAPER_PLACEMENTS)}"
            )
        self.nodes = [GpuNode(s, i) for i, s in enumerate(specs)]
        #: The name a tie is broken by (``ties`` "seeded" or "name"): the lower wins.
        self.tie_name = node_names(specs, seed) if ties == "seeded" else [s.name for s in specs]
        self.kinds: list[Counter[str]] = [Counter() for _ in self.nodes]
        self.measure: PaperFragmentation | Fragmentation = PaperFragmentation(classes)
        self.capacity = MILLI * sum(s.gpus for s in specs)
        self.allocated = 0
        self.frag = 0.0
        for node in self.nodes:
            node.frag = self.measure.node(node)
            self.frag += node.frag
        self.rng = random.Random(seed)
        self.placement = placement
        self.groups: dict[State, dict[int, GpuNode]] = {}
        #: (task shape, node state) -> score or None (does not fit): a node's state changes
        #: only when a task lands on it, so most scores carry over to the next decision.
        self._memo: dict[tuple[object, State], tuple[float, int] | None] = {}
        for node in self.nodes:
            self._join(node)
        self._score: Callable[[GpuNode, Pod], tuple[float, int]] = getattr(
            self, "_" + placement.replace("-", "_")
        )

    def place(self, pod: Pod) -> GpuNode | None:
        """Place the pod where the placement says; None when it fits on no node."""
        where = self._best(pod)
        if where is None:
            return None
        node, gpus = where
        self.put(node, pod, gpus)
        return node

    def put(self, node: GpuNode, pod: Pod, gpus: Choice) -> None:
        """Run the pod on these GPUs of this node (a placement's choice, or a given state)."""
        self._leave(node)
        node.take(pod, gpus)
        self.kinds[node.index][_kind(pod)] += 1
        self._join(node)
        self.allocated += pod.demand
        self.frag -= node.frag
        node.frag = self.measure.node(node)
        self.frag += node.frag

    def _key(self, node: GpuNode) -> State:
        kinds = self.kinds[node.index] if self.placement == "gpuclustering" else ()
        return (*node.state(), tuple(sorted(kinds)))

    def _join(self, node: GpuNode) -> None:
        self.groups.setdefault(self._key(node), {})[node.index] = node

    def _leave(self, node: GpuNode) -> None:
        key = self._key(node)
        del self.groups[key][node.index]
        if not self.groups[key]:
            del self.groups[key]

    def _best(self, pod: Pod) -> tuple[GpuNode, Choice] | None:
        """Score each distinct node state once (nodes in one state are interchangeable); the
        top score wins; a tie goes by ``ties`` (the paper's: the seeded first name), or to the
        lowest node (``fgd-exact``)."""
        feasible, scores = [], []
        shape = pod.shape
        if len(self._memo) > 2_000_000:
            self._memo.clear()
        for key, group in self.groups.items():
            memo_key = (shape, key)
            if memo_key in self._memo:
                got = self._memo[memo_key]
            else:  # a node state not seen with this task shape: score it once
                node = next(iter(group.values()))
                got = self._memo[memo_key] = self._score(node, pod) if node.fits(pod) else None
            if got is not None:
                feasible.append(group)
                scores.append(got)
        if not feasible:
            return None
        if self.placement == "paper-bestfit":
            scores = _minmax(scores)
        top = max(s for s, _ in scores)
        tied = [(g, k) for g, (s, k) in zip(feasible, scores, strict=True) if s >= top - 1e-9]
        if self.placement == "fgd-exact":
            index, k = min((min(g), k) for g, k in tied)
            chosen = self.nodes[index]
            return chosen, chosen.choices(pod)[k]
        if self.ties != "random" and self.placement != "random":  # random: its own pick
            names = self.tie_name
            chosen, k = min(((n, k) for g, k in tied for n in g.values()),
                            key=lambda pair: names[pair[0].index])  # fmt: skip
            return chosen, chosen.choices(pod)[k]
        r = self.rng.randrange(sum(len(g) for g, _ in tied))
        for g, k in tied:
            if r < len(g):
                chosen = list(g.values())[r]
                if self.placement == "random" and pod.sharing:  # its GPU at random too
                    fit = [i for i, f in enumerate(chosen.free) if f >= pod.gpu_milli]
                    return chosen, (self.rng.choice(fit),)
                return chosen, chosen.choices(pod)[k]
            r -= len(g)
        raise AssertionError("unreachable: r is below the tied nodes' count")

    # ---- scores: (score, which of node.choices(pod)); higher is better -----------------------

    def use_measure(self, measure: PaperFragmentation | Fragmentation) -> None:
        """Score and report with another fragmentation measure (LabHive's)."""
        self.measure = measure
        self._memo.clear()
        self.frag = 0.0
        for node in self.nodes:
            node.frag = measure.node(node)
            self.frag += node.frag

    def _after(self, node: GpuNode, pod: Pod, gpus: Choice) -> float:
        return self.measure.after(node, pod, gpus)

    def _random(self, node: GpuNode, pod: Pod) -> tuple[float, int]:
        """Every feasible node ties: the pick is uniform over nodes."""
        return 0.0, 0

    def _fgd(self, node: GpuNode, pod: Pod) -> tuple[float, int]:
        """int(sigmoid(removed fragmentation / 1000) * 100), the best GPU choice's."""
        best = (-1.0, 0)
        for k, c in enumerate(node.choices(pod)):
            x = (node.frag - self._after(node, pod, c)) / 1000
            s = float(int(100 / (1 + math.exp(-x)))) if x > -700 else 0.0
            if s > best[0]:
                best = (s, k)
        return best

    def _fgd_exact(self, node: GpuNode, pod: Pod) -> tuple[float, int]:
        deltas = [
            (node.frag - self._after(node, pod, c), -k) for k, c in enumerate(node.choices(pod))
        ]
        s, k = max(deltas)
        return s, -k

    def _paper_bestfit(self, node: GpuNode, pod: Pod) -> tuple[float, int]:
        left = (node.cpu - pod.cpu) / MAX_CPU * 0.5 + (sum(node.free) - pod.demand) / MAX_GPU * 0.5
        return float(int((1 - left) * 100)), 0

    def _dotprod(self, node: GpuNode, pod: Pod) -> tuple[float, int]:
        dot = (node.cpu / MAX_CPU) * (pod.cpu / MAX_CPU) + (sum(node.free) / MAX_GPU) * (
            pod.demand / MAX_GPU
        )
        return float(int(100 * (1 - dot / 2))), 0

    def _gpupacking(self, node: GpuNode, pod: Pod) -> tuple[float, int]:
        if pod.gpus == 0:
            return 0.0, 0
        whole = sum(1 for f in node.free if f == MILLI)
        if whole == len(node.free):  # an idle node: the last resort
            return float(max(100 // 3 - whole, whole)), 0
        gpus = node.choices(pod)[0]
        fresh = sum(1 for i in gpus if node.free[i] == MILLI)
        if fresh:
            return float(max(100 // 2 - fresh, 100 // 3)), 0
        used = sum(node.free[i] * 100 // MILLI for i in gpus)
        return float(max(100 - used // 10, 100 // 2)), 0

    def _gpuclustering(self, node: GpuNode, pod: Pod) -> tuple[float, int]:
        if pod.gpus == 0:
            return 0.0, 0
        kinds = self.kinds[node.index]
        kinds = Counter({k: v for k, v in kinds.items() if k != "cpu"})
        base = 25 * (MAX_GPU - sum(node.free)) // MAX_GPU
        if kinds[_kind(pod)] > 0:
            return float(base + (75 if len(kinds) == 1 else 50)), 0
        return float(base + (25 if not kinds else 0)), 0


def node_names(specs: list[NodeSpec], seed: int) -> list[str]:
    """The names the paper's simulator gives the nodes for a run: sorted by name, the i-th
    gets the prefix ``%04d-`` of the i-th entry of a seeded random permutation
    (``syncClusterResourceList``). Its permutation comes from Go's stream after the workload
    draws; ours from its own stream of the seed (a seed number does not give the paper's run
    either way)."""
    order = sorted(range(len(specs)), key=lambda i: specs[i].name)
    perm = random.Random(f"nodes:{seed}").sample(range(len(specs)), len(specs))
    names = [""] * len(specs)
    for rank, i in enumerate(order):
        names[i] = f"{perm[rank]:04d}-{specs[i].name}"
    return names


def _kind(pod: Pod) -> str:
    """GPU clustering's affinity tag: CPU-only, a share, or an N-GPU task."""
    if pod.gpus == 0:
        return "cpu"
    return "share" if pod.sharing else f"{pod.gpus}-gpu"


def _minmax(scores: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """The Kubernetes score normalisation (integer min-max to 0..100) best-fit goes through."""
    lo, hi = min(s for s, _ in scores), max(s for s, _ in scores)
    if hi == lo:
        return [(0.0, k) for _, k in scores]
    return [(float(int(s - lo) * 100 // int(hi - lo)), k) for s, k in scores]


def paper_workload(pods: list[Pod], capacity: int, seed: int, ratio: float = 1.3) -> list[Pod]:
    """The paper's workload: the trace's rows shuffled (its experiments run with
    ``--shuffle-pod=true``: sorted by name, then shuffled by the seed), "tuned" to ``ratio``
    times the GPU capacity: random copies appended until the next would pass it (CPU-only
    copies cost no GPU), or, for a trace already past it (a slice of the cluster), random rows
    dropped until it fits."""
    rng = random.Random(seed)
    out = sorted(pods, key=lambda p: p.name)
    rng.shuffle(out)
    demand = sum(p.demand for p in pods)
    while out and demand > ratio * capacity:
        demand -= out.pop(rng.randrange(len(out))).demand
    n = 0
    while pods and demand <= ratio * capacity:
        t = rng.choice(pods)
        if demand + t.demand > ratio * capacity:
            break
        demand += t.demand
        n += 1
        out.append(Pod(f"{t.name}-tuned-{n}", 0.0, 0.0, t.cpu, t.memory, t.gpus,
                       t.gpu_milli, t.models))  # fmt: skip
    return out


def paper_fill(
    specs: list[NodeSpec],
    pods: list[Pod],
    placement: str,
    *,
    loads: tuple[float, ...] = (0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3),
    seed: int = 0,
    frag: str = "paper",
    ties: str = "seeded",
) -> list[PaperPoint]:
    """The paper's experiment for one seed: the workload arrives in order, each task is placed
    or fails, nothing leaves; at each arrived load, the GPU share unallocated."""
    cluster = PaperCluster(specs, paper_classes(pods), placement, seed=seed, ties=ties)
    if frag == "labhive":  # LabHive's measure: GPU task classes, memory counted
        cluster.use_measure(Fragmentation(workload([p for p in pods if p.gpus > 0])))
    tasks = paper_workload(pods, cluster.capacity, seed)
    arrived, failed, out = 0, 0, []
    targets = sorted(loads)
    for pod in tasks:
        if not targets:
            break
        arrived += pod.demand
        if cluster.place(pod) is None:
            failed += 1
        while targets and arrived >= targets[0] * cluster.capacity - 1e-6:
            cap = cluster.capacity
            out.append(
                PaperPoint(targets.pop(0), 1 - cluster.allocated / cap, cluster.frag / cap, failed)
            )
    cap = cluster.capacity
    for load in targets:  # the workload ended short of these loads (at most ~one task short)
        out.append(PaperPoint(load, 1 - cluster.allocated / cap, cluster.frag / cap, failed))
    return out


@dataclass(frozen=True, slots=True)
class SeedSummary:
    load: float
    mean: float
    spread: float  # standard deviation over seeds (0 with one seed)
    low: float
    high: float


def summarise(runs: list[list[float]], loads: tuple[float, ...]) -> list[SeedSummary]:
    """Mean, standard deviation and range over seeds of a figure at each load."""
    out = []
    for j, load in enumerate(loads):
        xs = [r[j] for r in runs]
        mean = sum(xs) / len(xs)
        sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
        out.append(SeedSummary(load, mean, sd, min(xs), max(xs)))
    return out
