"""Free GPU slots per node, and where a gang of tasks goes.

The queue-ordering policies (FIFO, SJF, DRF, Capacity, LAS) share this bookkeeping so that
they differ only in *which* job goes next, never in *where* it goes: comparing them on a trace
then measures the ordering, not accidental placement differences. HiveD has its own cell
allocator in the core and does not use this module.

Locality, one choice for a whole run:
- ``consolidated``: a gang that could fit on one node goes on one node, or waits until a node
  has room (Tiresias' consolidation); a gang bigger than any node takes the fewest nodes it
  could ever take, most-free nodes first, or waits.
- ``anywhere``: tasks go wherever GPUs are free, filling the most-used nodes first (best fit),
  so fragments are used and a gang may be spread thin.
A task never spans nodes. Nodes are indexed by free-GPU count, so a placement looks at a few
buckets, not every node.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from labhive.scheduler.core.frozen_build import frozen_builder
from labhive.scheduler.core.jobs import JobSpec, RoleSpec
from labhive.scheduler.core.model import NodeView, TaskPlacement

Locality = Literal["consolidated", "anywhere"]
LOCALITIES: tuple[str, ...] = ("consolidated", "anywhere")

#: ``TaskPlacement(role, index, node, gpus)`` without the frozen ``__init__`` (one
#: ``object.__setattr__`` per field): one is made per task, so per GPU of a trace's gangs.
_placement = frozen_builder(TaskPlacement)

#: The most placements a node keeps for reuse (``PoolNode.placed``): a node of 8 GPUs has
#: at most 255 sets of GPUs a gang could take; the busiest few are enough.
PLACED_KEPT = 32

#: What a job holds on one node, freed at once by ``release``: the node, its GPUs there, and
#: the CPU and memory of its tasks there, in the order they are given back (empty where the
#: node's CPU or memory is unlimited: ``inf`` plus anything stays ``inf``).
Span = tuple["PoolNode", tuple[int, ...], tuple[float, ...], tuple[float, ...]]


@dataclass(frozen=True, slots=True)
class TaskDemand:
    role: str
    index: int
    gpu: int
    cpu: float
    memory_mb: int


@dataclass(frozen=True, slots=True)
class Gang:
    """A job's tasks, largest GPU demand first (the order placement packs them in), with
    their totals computed once."""

    tasks: tuple[TaskDemand, ...]
    gpus: int
    cpu: float
    memory_mb: float
    largest: int
    runs: tuple[tuple[TaskDemand, ...], ...] = ()  # consecutive identical tasks, grouped
    #: The tasks are already in (role, index) order, the order of a placement's tasks: a gang
    #: placed on one node needs no sort (a trace's gangs have one role, so all of them).
    ordered: bool = False
    #: Each task's CPU and memory, in ``tasks``' order (what ``release`` gives back on a node
    #: with limits, task by task as taken: the same float sums).
    cpus: tuple[float, ...] = ()
    mems: tuple[float, ...] = ()
    #: What placement depends on: identical shapes fit (or not) alike. Worked out once (a
    #: queue policy reads it at every try: as a property it cost 2% of a contended DRF run).
    shape: tuple[tuple[int, float, int, int], ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        shape = tuple((r[0].gpu, r[0].cpu, r[0].memory_mb, len(r)) for r in self.runs)
        object.__setattr__(self, "shape", shape)  # (frozen: set once, here)


def gang_of(spec: JobSpec) -> Gang:
    """The spec's gang. Shared by every spec with the same roles (a gang is immutable, and
    a million-job trace has a few hundred job sizes: building one was 8% of a FIFO run)."""
    return _gang_of_roles(spec.roles)


@functools.lru_cache(maxsize=4096)
def _gang_of_roles(roles: tuple[RoleSpec, ...]) -> Gang:
    tasks = [
        TaskDemand(r.name, i, r.gpu, r.cpu, r.memory_mb) for r in roles for i in range(r.instances)
    ]
    tasks.sort(key=lambda t: -t.gpu)
    keys = [(t.role, t.index) for t in tasks]
    return Gang(
        tuple(tasks),
        ordered=keys == sorted(keys),
        cpus=tuple(t.cpu for t in tasks),
        mems=tuple(float(t.memory_mb) for t in tasks),
        gpus=sum(t.gpu for t in tasks),
        cpu=sum(t.cpu for t in tasks),
        memory_mb=float(sum(t.memory_mb for t in tasks)),
        largest=max((t.gpu for t in tasks), default=0),
        runs=_runs(tasks),
    )


@dataclass(slots=True, eq=False)
class PoolNode:
    """One node's capacity and what is free on it. CPU and memory are infinite when the
    cluster config gives no SKU sizes, so then only GPUs constrain placement."""

    name: str
    sku: str | None
    gpus: tuple[int, ...]
    cpu: float = math.inf
    memory_mb: float = math.inf
    #: The free GPUs, ascending. A tuple, not a list: a take is then a slice (all of them, as
    #: a best-fit take mostly is: the same tuple, no copy), and a release onto a full node
    #: (most releases) is the job's own GPUs, with no sort (issue 34).
    free: tuple[int, ...] = ()
    cpu_free: float = math.inf
    memory_free: float = math.inf
    healthy: bool = True
    down_reason: str = ""
    used: dict[int, str] = field(default_factory=dict)
    #: GPUs taken by a one-node gang -> (that gang, what its job then holds: its placements
    #: and span). The same gang taking the same GPUs here gets the same (immutable) objects:
    #: a trace's jobs of one size share a gang, and building a ``TaskPlacement`` per GPU of
    #: every job was a fifth of placement (issue 34). At most ``PLACED_KEPT`` kept.
    placed: dict[
        tuple[int, ...], tuple[Gang, tuple[tuple[TaskPlacement, ...], tuple[Span, ...]]]
    ] = field(default_factory=dict)
    #: The same for a wide gang's share of this node (``NodePool._place_in_order``): (the
    #: GPUs taken, ``id`` of its first task here) -> (that gang, its placements and span
    #: here). The gang kept alive keeps that task, so its ``id`` names no other task while
    #: the entry is found for the same gang. At most ``PLACED_KEPT`` kept.
    pieces: dict[tuple[tuple[int, ...], int], tuple[Gang, tuple[TaskPlacement, ...], Span]] = field(
        default_factory=dict
    )
    #: CPU or memory has a limit here (the cluster config gives SKU sizes), so a take counts
    #: them: one test a take on most clusters' nodes, where there were two.
    limited: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.free = tuple(sorted(self.gpus))
        self.cpu_free = self.cpu
        self.memory_free = self.memory_mb
        self.limited = self.cpu < math.inf or self.memory_mb < math.inf

    def room(self, t: TaskDemand, gpus_taken: int = 0, cpu: float = 0.0, mem: float = 0.0) -> int:
        """How many more tasks like ``t`` fit, after a tentative ``gpus_taken``/``cpu``/``mem``."""
        n = (len(self.free) - gpus_taken) // t.gpu if t.gpu else 1 << 30
        if t.cpu > 0:
            n = min(n, int((self.cpu_free - cpu) // t.cpu) if self.cpu_free < math.inf else n)
        if t.memory_mb > 0 and self.memory_free < math.inf:
            n = min(n, int((self.memory_free - mem) // t.memory_mb))
        return max(n, 0)


class NodePool:
    """GPU slots of a set of nodes, with gang placement under one locality choice."""

    def __init__(self, nodes: Iterable[PoolNode], locality: Locality = "consolidated") -> None:
        if locality not in LOCALITIES:
            raise ValueError(f"locality must be one of {LOCALITIES}, not {locality!r}")
        self.locality = locality
        self._consolidated = locality == "consolidated"
        self.nodes: dict[str, PoolNode] = {n.name: n for n in nodes}
        self.max_node_gpus = max((len(n.gpus) for n in self.nodes.values()), default=0)
        #: The most GPUs of a gang placed on one node (consolidated: ``max_node_gpus``), -1
        #: under ``anywhere``: ``place`` and ``may_fit`` ask one comparison for their common
        #: case, where they asked the locality and the size.
        self._within = self.max_node_gpus if self._consolidated else -1
        self._wakes = _Wakes(self.max_node_gpus if self._consolidated else 0)
        self.total_gpus = sum(len(n.gpus) for n in self.nodes.values())
        self.total_cpu = sum(n.cpu for n in self.nodes.values())
        self.total_memory = sum(n.memory_mb for n in self.nodes.values())
        self._shapes = {(len(n.gpus), n.cpu, n.memory_mb) for n in self.nodes.values()}
        self._fits: dict[tuple[int, float, float], bool] = {}  # fits_empty by gang size
        # buckets[f]: healthy nodes with exactly f free GPUs, in a stable (insertion) order
        self._buckets: list[dict[str, PoolNode]] = [{} for _ in range(self.max_node_gpus + 1)]
        self.free_gpus = 0
        #: The most free GPUs of a healthy node (0: none has any), kept as nodes move between
        #: buckets: the highest bucket holding a node. ``may_fit`` of a gang within a node is
        #: then one comparison, and the walks down the buckets (``_most_free_reaches``,
        #: ``_most_free``) and up them (``_plan``) skip the empty buckets above it, which on a
        #: busy cluster are most of them (issue 34: ``may_fit`` with ``_most_free_reaches``
        #: was about 300 bytecodes per contended LAS arrival). Exact: an empty bucket adds
        #: nothing to either walk and holds no node to place on.
        self.top_free = 0
        for n in self.nodes.values():
            self._file(n)
        #: The most free GPUs a node was left with by a release (or had coming up) since the
        #: caller last set this to 0: ``may_fit`` may turn from no to yes only once it reaches
        #: ``wake_level`` (so a queue pass need not ask again about a size refused before).
        self.peak = self.max_node_gpus
        # job id -> (its tasks, what it holds on each node: ``Span``s in the order freed)
        self._jobs: dict[str, tuple[tuple[TaskPlacement, ...], tuple[Span, ...]]] = {}

    # ---- bookkeeping ---------------------------------------------------------------------

    def _file(self, node: PoolNode) -> None:
        if node.healthy:
            free = len(node.free)
            self._buckets[free][node.name] = node
            self.free_gpus += free
            if free > self.top_free:
                self.top_free = free

    def _unfile(self, node: PoolNode) -> None:
        if node.healthy:
            free = len(node.free)
            bucket = self._buckets[free]
            del bucket[node.name]
            self.free_gpus -= free
            if not bucket and free == self.top_free:
                self._lower_top()

    def _lower_top(self) -> None:
        """``top_free`` after its bucket lost its last node: the next bucket down holding one."""
        buckets, top = self._buckets, self.top_free
        while top > 0 and not buckets[top]:
            top -= 1
        self.top_free = top

    def placement(self, job_id: str) -> tuple[TaskPlacement, ...]:
        held = self._jobs.get(job_id)
        return held[0] if held else ()

    def holds(self, job_id: str) -> bool:
        return job_id in self._jobs

    def release(self, job_id: str) -> int:
        """Free the job's GPUs (and its CPU and memory); returns how many GPUs. A node at a
        time (a gang of one-GPU tasks on one node: one span, not a pass per task)."""
        held = self._jobs.pop(job_id, None)
        if held is None:
            return 0
        freed = 0
        buckets = self._buckets
        for node, gpus, cpus, mems in held[1]:
            free = node.free
            n = len(gpus)
            if node.healthy:  # ``_unfile``, free, ``_file``, by hand (``top_free`` only
                # rises: the node is filed again higher, so its old bucket is not the top)
                del buckets[len(free)][node.name]
            # (a full node, most often: its free GPUs are then the span's, already in order)
            free = node.free = tuple(sorted(free + gpus)) if free else gpus
            if cpus:  # (empty where the node's CPU is unlimited: most clusters')
                for c in cpus:
                    node.cpu_free += c
            if mems:
                for m in mems:
                    node.memory_free += m
            used = node.used
            if len(used) == n:
                used.clear()  # they were all it held here (most spans: no loop)
            else:
                for g in gpus:
                    used.pop(g, None)
            freed += n
            now = len(free)
            if node.healthy:
                buckets[now][node.name] = node
                self.free_gpus += n
                if now > self.top_free:
                    self.top_free = now
            if now > self.peak:
                self.peak = now
        return freed

    def claim(self, job_id: str, tasks: tuple[TaskPlacement, ...], gang: Gang) -> bool:
        """Take exactly these GPUs (adopting a running job, or undoing a tentative release)."""
        for t in tasks:
            node = self.nodes.get(t.node)
            if node is None or not node.healthy or not set(t.gpus) <= set(node.free):
                return False
        by_key = {(d.role, d.index): d for d in gang.tasks}
        held: list[tuple[PoolNode, tuple[int, ...], float, float]] = []
        for t in tasks:
            d = by_key.get((t.role, t.index))
            cpu, mem = (d.cpu, float(d.memory_mb)) if d else (0.0, 0.0)
            node = self.nodes[t.node]
            self._unfile(node)
            taken = set(t.gpus)
            node.free = tuple(g for g in node.free if g not in taken)
            node.cpu_free -= cpu
            node.memory_free -= mem
            for g in t.gpus:
                node.used[g] = job_id
            self._file(node)
            held.append((node, t.gpus, cpu, mem))
        self._jobs[job_id] = (tasks, _spans(held))
        return True

    # ---- placement -----------------------------------------------------------------------

    def place(self, job_id: str, gang: Gang) -> tuple[TaskPlacement, ...] | None:
        """Place the whole gang and take its GPUs, or return None and change nothing."""
        if gang.gpus <= self._within:
            # (``_plan``'s one node, without its plan: a list and a tuple a job, and their
            # reading back; nearly every trace job)
            node = self._fitting(gang)
            if node is None:
                return None
            if not gang.ordered:
                return self._place_apart(job_id, [(node, gang.tasks)])
        else:
            plan = self._plan(gang)
            if plan is None:
                return None
            if len(plan) != 1 or not gang.ordered:
                if gang.ordered and len(gang.runs) == 1:
                    return self._place_in_order(job_id, gang, plan)
                return self._place_apart(job_id, plan)
            node = plan[0][0]
        # one node, tasks in order (every trace job within a node): ``_take``'s lines by hand,
        # a call a job less (13 bytecodes a job of FIFO)
        free = node.free
        k = gang.gpus
        gpus = free[:k]
        node.free = free[k:]
        buckets = self._buckets
        had = len(free)
        bucket = buckets[had]
        del bucket[node.name]
        buckets[had - k][node.name] = node
        self.free_gpus -= k
        if not bucket and had == self.top_free:
            self._lower_top()
        node.used.update(dict.fromkeys(gpus, job_id))
        if node.limited:
            _take_limits(node, gang.tasks)
        kept = node.placed.get(gpus)
        if kept is not None and kept[0] is gang:
            self._jobs[job_id] = kept[1]
            return kept[1][0]
        tasks = tuple(_placements(node.name, gang.tasks, gpus))
        span = (
            node,
            gpus,
            gang.cpus if node.cpu < math.inf else (),
            gang.mems if node.memory_mb < math.inf else (),
        )
        job = self._jobs[job_id] = (tasks, (span,))
        if len(node.placed) >= PLACED_KEPT:
            node.placed.clear()
        node.placed[gpus] = (gang, job)
        return tasks

    def _place_apart(
        self, job_id: str, plan: list[tuple[PoolNode, Sequence[TaskDemand]]]
    ) -> tuple[TaskPlacement, ...]:
        """``place``'s general path: each node's group taken, the placements sorted into
        (role, index) order, and the job's spans found from them."""
        held: list[tuple[TaskPlacement, TaskDemand, PoolNode]] = []
        for node, group in plan:
            gpus = self._take(node, job_id, group, sum(d.gpu for d in group))
            held.extend(zip(_placements(node.name, group, gpus), group, itertools.repeat(node)))
        held.sort(key=_role_index)
        tasks = tuple(h[0] for h in held)
        self._jobs[job_id] = (
            tasks,
            _spans([(node, p.gpus, d.cpu, float(d.memory_mb)) for p, d, node in held]),
        )
        return tasks

    def _place_in_order(
        self, job_id: str, gang: Gang, plan: list[tuple[PoolNode, Sequence[TaskDemand]]]
    ) -> tuple[TaskPlacement, ...]:
        """``place``'s general path for a gang of one run of like tasks in (role, index) order
        (a trace's gang wider than a node): ``_pack`` gave each node the next tasks of the
        run, so the groups, node by node, are the tasks in order and each group is one span,
        the order and spans that sorting the placements and ``_spans`` would find. Why: that
        sort (a key call per task) and ``_spans``' walk task by task were about 80 bytecodes
        a job of uncontended FIFO, for the one job in twenty that is wide.

        A node's share is the same objects when the same gang's same tasks take the same GPUs
        there again (``PoolNode.pieces``), as ``place`` shares a one-node gang's: its
        ``TaskPlacement``s, one per task built anew, were about 30 bytecodes a job of FIFO."""
        gpu = gang.runs[0][0].gpu
        placed: list[TaskPlacement] = []
        spans: list[Span] = []
        for node, group in plan:
            gpus = self._take(node, job_id, group, gpu * len(group))
            key = (gpus, id(group[0]))  # (the tasks from that one on, one per ``gpu`` GPUs)
            kept = node.pieces.get(key)
            if kept is None or kept[0] is not gang:
                kept = (gang, tuple(_placements(node.name, group, gpus)), _span(node, gpus, group))
                if len(node.pieces) >= PLACED_KEPT:
                    node.pieces.clear()
                node.pieces[key] = kept
            placed.extend(kept[1])
            spans.append(kept[2])
        tasks = tuple(placed)
        self._jobs[job_id] = (tasks, tuple(spans))
        return tasks

    def _take(
        self, node: PoolNode, job_id: str, group: Sequence[TaskDemand], gpus: int
    ) -> tuple[int, ...]:
        """The group's ``gpus`` GPUs off the node (returned: each task takes the next ones,
        ``_placements``), and its CPU and memory (skipped where both are unlimited). The node
        is healthy: placement found it in its bucket. (``place`` does this by hand for a gang
        on one node.)"""
        free = node.free
        taken = free[:gpus]  # (all of them, as a best fit mostly takes: the same tuple)
        node.free = free[gpus:]
        # ``_unfile``, take, ``_file``, by hand (with release's: 3% of FIFO)
        buckets = self._buckets
        had = len(free)
        bucket = buckets[had]
        del bucket[node.name]
        buckets[had - gpus][node.name] = node
        self.free_gpus -= gpus  # (the node had them: placement chose it for them)
        if not bucket and had == self.top_free:
            self._lower_top()
        node.used.update(dict.fromkeys(taken, job_id))  # in C, in the order taken
        if node.limited:  # (else both counters are ``inf``: nothing to take)
            _take_limits(node, group)
        return taken

    def _plan(self, gang: Gang) -> list[tuple[PoolNode, Sequence[TaskDemand]]] | None:
        total = gang.gpus
        consolidated = self._consolidated
        if consolidated and total <= self.max_node_gpus:
            node = self._fitting(gang)
            return None if node is None else [(node, gang.tasks)]
        if total > self.free_gpus:
            return None
        if consolidated:
            need = math.ceil(total / self.max_node_gpus)
            if not self._most_free_reaches(need, total):
                return None  # what ``_pack`` would find, without trying node by node
            return self._pack(gang, self._descending(), max_nodes=need)
        return self._pack(gang, self._ascending(1), max_nodes=None)

    def _fitting(self, gang: Gang) -> PoolNode | None:
        """Where a consolidated gang within a node goes: the first node, fullest first, with
        room for it. ``_ascending(gpus)``'s order, walked here (no generator: once a job), up
        to the top bucket holding a node (``top_free``: those above are empty; a node there
        has its free GPUs in ``free_gpus`` too, so that is not asked first)."""
        cpu, mem, buckets = gang.cpu, gang.memory_mb, self._buckets
        for f in range(gang.gpus or 1, self.top_free + 1):
            for node in buckets[f].values():
                if cpu <= node.cpu_free and mem <= node.memory_free:
                    return node
        return None

    def may_fit(self, gpus: int) -> bool:
        """Could a gang of ``gpus`` GPUs be placed now, by free GPU counts alone? False only
        where ``place`` refuses every gang of that size (``_plan``'s own first tests), so a
        queue pass may skip such a head without trying it (on a contended cluster most tries
        failed so, each paying ``place`` and its search: issue 34). Under ``anywhere``, only
        the free total is tested."""
        if gpus <= self._within:
            # a node with that many free (``_ascending``: at least one); such a node's free
            # GPUs count in ``free_gpus`` too
            return self.top_free >= (gpus or 1)
        if not self._consolidated:
            return gpus <= self.free_gpus
        if gpus > self.free_gpus:
            return False
        top = self.max_node_gpus
        need = -(-gpus // top)
        # ``_most_free_reaches``' first test, without its call: on a busy cluster the most
        # free node times the nodes the gang may take is short of it, nearly always
        return self.top_free * need >= gpus and self._most_free_reaches(need, gpus)

    def wake_level(self, gpus: int) -> int:
        """Where ``may_fit(gpus)`` says no, the free GPUs some node must be left with by a
        release (``peak``) before it may say yes: the size itself for a gang that fits on one
        node; for a wider one, what the other most-free nodes it may take, all empty, leave
        to find (if the sum of the most free grew past the gang, one of them grew past that).
        Under ``anywhere`` any release may do. Worked out once a size (``_Wakes``): a
        contended queue pass asks it of every size it parks."""
        return self._wakes[gpus]

    def _most_free_reaches(self, nodes: int, gpus: int) -> bool:
        """``_most_free(nodes) >= gpus``, stopping as soon as the nodes left, at most as free
        as the bucket reached, cannot make up the rest (on a busy cluster the top buckets are
        empty, and the full walk of ``_most_free`` was 7% of a contended DRF run)."""
        total = 0
        buckets = self._buckets
        for f in range(self.top_free, 0, -1):  # (the buckets above are empty: ``top_free``)
            if total + nodes * f < gpus:
                return False
            n = len(buckets[f])
            if n >= nodes:
                return True  # total + nodes * f >= gpus, just seen
            total += n * f
            nodes -= n
        return total >= gpus

    def _most_free(self, nodes: int) -> int:
        """The free GPUs of the ``nodes`` healthy nodes with the most free: an upper bound of
        what ``_pack`` can place on at most that many nodes taken most-free first (a gang
        wider than a node failed there node by node, after visiting each: 30% of a contended
        DRF or LAS run, most of its tries failing)."""
        total = 0
        buckets = self._buckets
        for f in range(self.top_free, 0, -1):  # (the buckets above are empty: ``top_free``)
            n = len(buckets[f])
            if n >= nodes:
                return total + nodes * f
            total += n * f
            nodes -= n
        return total

    def _ascending(self, at_least: int) -> Iterator[PoolNode]:
        for f in range(max(at_least, 1), self.max_node_gpus + 1):
            yield from self._buckets[f].values()

    def _descending(self) -> Iterator[PoolNode]:
        for f in range(self.max_node_gpus, 0, -1):
            yield from self._buckets[f].values()

    def _pack(
        self, gang: Gang, nodes: Iterator[PoolNode], max_nodes: int | None
    ) -> list[tuple[PoolNode, Sequence[TaskDemand]]] | None:
        """First-fit decreasing of the tasks over ``nodes`` in the given order. Runs of
        identical tasks (a gang of one-GPU workers) are placed a node's worth at a time."""
        runs = gang.runs
        pos = [0] * len(runs)
        left = len(gang.tasks)
        plan: list[tuple[PoolNode, Sequence[TaskDemand]]] = []
        for node in nodes:
            if not left:
                break
            if max_nodes is not None and len(plan) >= max_nodes:
                return None
            group: list[TaskDemand] = []
            g = cpu = mem = 0.0
            for i, run in enumerate(runs):
                n = min(len(run) - pos[i], node.room(run[0], int(g), cpu, mem))
                if n > 0:
                    group.extend(run[pos[i] : pos[i] + n])
                    pos[i] += n
                    g += n * run[0].gpu
                    cpu += n * run[0].cpu
                    mem += n * run[0].memory_mb
            if group:
                plan.append((node, group))
                left -= len(group)
        return plan if not left else None

    # ---- health and views ----------------------------------------------------------------

    def set_healthy(self, name: str, healthy: bool, reason: str = "") -> list[str]:
        """Mark a node (down for ``reason``); returns the jobs running on it (the caller stops
        them)."""
        node = self.nodes.get(name)
        if node is None:
            return []
        node.down_reason = "" if healthy else reason or "down"
        if node.healthy == healthy:
            return []
        self._unfile(node)
        node.healthy = healthy
        self._file(node)
        if healthy and len(node.free) > self.peak:
            self.peak = len(node.free)
        return sorted(set(node.used.values()))

    def views(self) -> tuple[NodeView, ...]:
        return tuple(
            NodeView(
                name=n.name,
                sku=n.sku,
                gpus=n.gpus,
                healthy=n.healthy,
                used=dict(n.used),
                reason=n.down_reason,
            )
            for n in self.nodes.values()
        )

    def fits_empty(self, gang: Gang) -> bool:
        """Could the gang ever be placed here (on an empty cluster, all nodes healthy)?"""
        if gang.gpus > self.total_gpus or gang.largest > self.max_node_gpus:
            return False
        if self.locality == "consolidated" and gang.gpus <= self.max_node_gpus:
            # asked twice per submission (driver and policy), a million times in a long replay
            key = (gang.gpus, gang.cpu, gang.memory_mb)
            fits = self._fits.get(key)
            if fits is None:
                fits = self._fits[key] = any(
                    g >= gang.gpus and c >= gang.cpu and m >= gang.memory_mb
                    for g, c, m in self._shapes
                )
            return fits
        return True


class _Wakes(dict[int, int]):
    """``NodePool.wake_level`` by GPU count, each worked out when first asked (a pure
    function of the count and the pool's largest node; ``top`` 0: any release may do)."""

    def __init__(self, top: int) -> None:
        super().__init__()
        self.top = top

    def __missing__(self, gpus: int) -> int:
        top = self.top
        level = self[gpus] = max(1, gpus - top * (-(-gpus // top) - 1)) if top else 1
        return level


def _take_limits(node: PoolNode, group: Sequence[TaskDemand]) -> None:
    """The group's CPU and memory off a node that limits either (one that does not stays
    ``inf``: inf less anything is inf)."""
    if node.cpu_free < math.inf:
        for d in group:
            node.cpu_free -= d.cpu
    if node.memory_free < math.inf:
        for d in group:
            node.memory_free -= d.memory_mb


def _placements(
    node: str, group: Sequence[TaskDemand], taken: tuple[int, ...]
) -> list[TaskPlacement]:
    """The group's tasks on ``node``, each on the next of the GPUs ``taken`` for it."""
    if group and len(taken) == len(group) and group[0].gpu == 1:  # one GPU each (largest first)
        return [_placement(d.role, d.index, node, (g,)) for d, g in zip(group, taken, strict=True)]
    out: list[TaskPlacement] = []
    at = 0
    for d in group:
        out.append(_placement(d.role, d.index, node, taken[at : at + d.gpu]))
        at += d.gpu
    return out


def _span(node: PoolNode, gpus: tuple[int, ...], group: Sequence[TaskDemand]) -> Span:
    """What the group's tasks hold on ``node`` (its CPU and memory empty where unlimited)."""
    cpus = tuple(d.cpu for d in group) if node.cpu < math.inf else ()
    mems = tuple(float(d.memory_mb) for d in group) if node.memory_mb < math.inf else ()
    return node, gpus, cpus, mems


def _role_index(h: tuple[TaskPlacement, TaskDemand, PoolNode]) -> tuple[str, int]:
    return h[0].role, h[0].index


def _spans(held: list[tuple[PoolNode, tuple[int, ...], float, float]]) -> tuple[Span, ...]:
    """A job's tasks, in the order given back, as spans of consecutive tasks on one node
    whose GPUs ascend: ``release`` frees each span at once, refiling its node in the same
    order as task by task (a node met again after another is refiled again, so buckets keep
    the same order). Where the GPUs fall (tasks in (role, index) order are not in the order
    they took their GPUs, or a claimed task lists its GPUs out of order), a new span starts
    on the same node: freeing the two in turn leaves the node where freeing them as one
    would (at the end of the same bucket; a move through a bucket on the way changes no
    other node's place), and ``release`` may then take a span's GPUs as a full node's free
    GPUs as they are. A task's CPU and memory go with the span it began in (on the same
    node as the next: the same sums, added in the same order)."""
    spans: list[tuple[PoolNode, list[int], list[float], list[float]]] = []
    for node, gpus, cpu, mem in held:
        if not spans or spans[-1][0] is not node:
            spans.append((node, [], [], []))
        span = spans[-1]
        span[2].append(cpu)
        span[3].append(mem)
        for g in gpus:
            if span[1] and g < span[1][-1]:
                span = (node, [], [], [])
                spans.append(span)
            span[1].append(g)
    return tuple(
        (
            n,
            tuple(g),
            tuple(c) if n.cpu < math.inf else (),
            tuple(m) if n.memory_mb < math.inf else (),
        )
        for n, g, c, m in spans
    )


def _runs(tasks: list[TaskDemand]) -> tuple[tuple[TaskDemand, ...], ...]:
    """Consecutive tasks with the same needs, grouped (tasks come largest first)."""
    runs: list[list[TaskDemand]] = []
    for d in tasks:
        if runs and (runs[-1][0].gpu, runs[-1][0].cpu, runs[-1][0].memory_mb) == (
            d.gpu,
            d.cpu,
            d.memory_mb,
        ):
            runs[-1].append(d)
        else:
            runs.append([d])
    return tuple(tuple(r) for r in runs)
