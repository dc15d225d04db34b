"""HiveD's scheduling algorithm as a pure state machine: one event in, decisions out.

What it keeps: the physical cells and who uses them (``cells``), each VC's quota and its lazy
bindings (``vc``), the waiting jobs (``queue``). What it decides, after every event: which
waiting jobs start where (``placement``), whom they preempt (strictly lower priority only,
opportunistic jobs first), whom they merely downgrade (lazy preemption), and which jobs a node
failure stopped. Why-texts for waiting jobs are computed only when someone asks (``job()``,
``jobs()``), so a simulator driving a hundred thousand jobs pays nothing for them.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable
from dataclasses import dataclass, field

from labhive.scheduler.cells import Cell, CellTree
from labhive.scheduler.config import ClusterConfig
from labhive.scheduler.jobs import OPPORTUNISTIC, JobSpec, RoleSpec
from labhive.scheduler.model import (
    Adopt,
    Cancel,
    ClusterView,
    Decision,
    Downgrade,
    Event,
    Finish,
    JobView,
    NodeDown,
    NodeUp,
    NodeView,
    Preempt,
    Reconfigure,
    Requeue,
    SpecRejected,
    Start,
    Stop,
    Submit,
    TaskPlacement,
    Tick,
    VCView,
)
from labhive.scheduler.placement import Placer, Plan, TaskNeed
from labhive.scheduler.queue import JobClass, VCQueue
from labhive.scheduler.vc import VC, VCs


class AdoptRefused(ValueError):
    """The cells a driver asks to restore a job onto are unknown, down or taken."""


@dataclass(slots=True, eq=False)
class Job:
    job_id: str
    spec: JobSpec
    seq: int
    prio: int  # effective: -1 while opportunistic (by spec or downgraded)
    tasks: list[tuple[RoleSpec, int]]
    placed: dict[tuple[str, int], tuple[TaskPlacement, list[Cell]]] = field(default_factory=dict)
    downgraded_by: str | None = None
    queued_key: Hashable | None = None  # the class it waits in, if any
    in_order: bool = False  # listed in its VC's queue order

    @property
    def vc(self) -> str:
        return self.spec.vc

    @property
    def waiting_tasks(self) -> list[tuple[RoleSpec, int]]:
        return [(r, i) for r, i in self.tasks if (r.name, i) not in self.placed]

    @property
    def opportunistic(self) -> bool:
        return self.prio == OPPORTUNISTIC

    @property
    def pinned(self) -> str | None:
        return next((r.pinned_cell for r in self.spec.roles if r.pinned_cell), None)


def leaves_needed(role: RoleSpec, config: ClusterConfig, leaf_type: str) -> int:
    """Leaf cells one task of ``role`` takes on ``leaf_type``: the most any resource needs."""
    sku = config.sku(leaf_type)
    need = math.ceil(role.gpu / sku.gpu)
    if sku.cpu > 0:
        need = max(need, math.ceil(role.cpu / sku.cpu))
    if sku.memory_mb > 0:
        need = max(need, math.ceil(role.memory_mb / sku.memory_mb))
    return max(need, 1)


class HivedScheduler:
    """HiveD's algorithm behind ``model.Scheduler``."""

    name = "hived"

    def __init__(self, config: ClusterConfig) -> None:
        self._jobs: dict[str, Job] = {}
        self._seq = 0
        self._queues: dict[str, VCQueue] = {}
        self._ready: set[JobClass] = set()
        self._oppo_epoch = 0
        self._classes: dict[Hashable, JobClass] = {}
        self._oppo_classes: dict[Hashable, JobClass] = {}
        self._vc_classes: dict[str, dict[Hashable, JobClass]] = {}
        self._dirty_vcs: dict[str, int] = {}  # VC -> the highest priority that may now fit
        self._dirty_oppo = False
        self._tick = 0  # counts freed GPUs, to tell which nodes changed since a failure
        self._load(config)

    def _load(self, config: ClusterConfig) -> None:
        self.config = config
        self.tree = CellTree(config)
        self.vcs = VCs(config, self.tree)
        self.placer = Placer(self.tree, self.vcs)
        self._leaves_cache: dict[tuple[RoleSpec, str], int] = {}
        self._chains_cache: dict[Hashable, list[str]] = {}
        self._checked: dict[Hashable, str | None] = {}
        self._max_node = {
            leaf: max(c.node_leaves for c in self.tree.chains.values() if c.leaf_type == leaf)
            for leaf in {c.leaf_type for c in self.tree.chains.values()}
        }
        self._type_leaves: dict[str, int] = {}
        for chain in self.tree.chains.values():
            self._type_leaves[chain.leaf_type] = self._type_leaves.get(chain.leaf_type, 0) + sum(
                c.leaves for c in chain.tops
            )
        for vc in self.vcs.by_name.values():
            vc.free_in = sum(c.free for cells in vc.bound.values() for c in cells.values())

    # ---- admission ---------------------------------------------------------------------------

    def check(self, spec: JobSpec) -> None:
        """Refuse a job that can never run here, saying what would fit."""
        key = (spec.vc, spec.opportunistic, spec.gang, spec.roles)
        if key not in self._checked:
            try:
                self._check(spec)
                self._checked[key] = None
            except SpecRejected as err:
                self._checked[key] = str(err)
        message = self._checked[key]
        if message is not None:
            raise SpecRejected(message)

    def _check(self, spec: JobSpec) -> None:
        leaf_types = sorted(self._max_node)
        vc = self.vcs.by_name.get(spec.vc)
        if vc is None:
            raise SpecRejected(
                f"unknown VC {spec.vc!r}; this cluster has {', '.join(sorted(self.vcs.by_name))}"
            )
        skus = {r.sku for r in spec.roles if r.sku is not None}
        for sku in sorted(skus):
            if sku not in self._max_node:
                raise SpecRejected(
                    f"unknown skuType {sku!r}; this cluster has {', '.join(leaf_types)}"
                )
        if spec.gang and len(skus) > 1:
            raise SpecRejected(
                f"a gang stays within one chain, but its roles ask for {', '.join(sorted(skus))}; "
                "give every role the same skuType or set gangAllocation: false"
            )
        vc_types = {self.tree.chains[c].leaf_type for c in vc.quota}
        vc_types |= {self.tree.chains[c.chain].leaf_type for c in vc.pinned}
        pins = {r.pinned_cell for r in spec.roles if r.pinned_cell}
        for pin in sorted(pins):
            if pin not in {c.pinned_id for c in vc.pinned}:
                have = ", ".join(sorted(c.pinned_id or "" for c in vc.pinned)) or "none"
                raise SpecRejected(
                    f"pinnedCellId {pin} is not pinned to {vc.name}; its pinned cells: {have}"
                )
        if spec.gang and len(pins) > 1:
            raise SpecRejected("a gang runs in one pinned cell; give every role the same one")
        if not spec.opportunistic:
            for sku in sorted(skus - vc_types):
                raise SpecRejected(
                    f"{vc.name} has no {sku} cells; it has {self._describe(vc)}. "
                    "Ask for one of those, or submit as priority oppo to use idle cells"
                )
        for role in spec.roles:
            types = [role.sku] if role.sku else leaf_types
            fits = [t for t in types if self._leaves(role, t) <= self._max_node[t]]
            if not fits:
                biggest = max(self._max_node[t] for t in types)
                raise SpecRejected(
                    f"task role {role.name} needs {self._leaves(role, types[0])} GPUs in one "
                    f"task, but the largest {'/'.join(types)} node has {biggest}; split it into "
                    f"tasks of at most {biggest} GPUs"
                )
        if not spec.gang:
            return
        types = sorted(skus) or leaf_types
        need = min(sum(self._leaves(r, t) * r.instances for r in spec.roles) for t in types)
        cluster = sum(self._type_leaves[t] for t in types)
        what = f"this gang needs {need} GPUs"
        if need > cluster:
            raise SpecRejected(
                f"{what}, more than the cluster's {cluster}; ask for at most {cluster} or set "
                "gang: false (gangAllocation: false) to start tasks as cells free up"
            )
        if not spec.opportunistic and need > vc.leaves(self.tree):
            have = vc.leaves(self.tree)
            raise SpecRejected(
                f"{what}, more than {vc.name} has in all ({self._describe(vc)}); ask for at "
                f"most {have} or set gang: false (gangAllocation: false)"
            )

    def _describe(self, vc: VC) -> str:
        parts = []
        for chain in vc.chains() or [c.chain for c in vc.pinned]:
            n = vc.leaves(self.tree, chain)
            if n:
                parts.append(f"{n} {self.tree.chains[chain].leaf_type}")
        return " + ".join(parts) + " GPUs" if parts else "no cells"

    def _leaves(self, role: RoleSpec, leaf_type: str) -> int:
        key = (role, leaf_type)
        n = self._leaves_cache.get(key)
        if n is None:
            n = self._leaves_cache[key] = leaves_needed(role, self.config, leaf_type)
        return n

    # ---- events ------------------------------------------------------------------------------

    def handle(self, event: Event) -> list[Decision]:
        out: list[Decision] = []
        match event:
            case Submit():
                self._submit(event.job_id, event.spec)
            case Finish() | Cancel():
                self._remove(event.job_id)
            case Requeue():
                self._requeue(event.job_id)
            case NodeDown():
                self._node_health(event.node, False, out, event.reason)
            case NodeUp():
                self._node_health(event.node, True, out, "")
            case Reconfigure():
                self._reconfigure(event.config, out)
            case Adopt():
                self._adopt(event)
            case Tick():
                return out
        self._schedule(out)
        return out

    def _submit(self, job_id: str, spec: JobSpec) -> None:
        if job_id in self._jobs:
            raise ValueError(f"job {job_id} was submitted twice")
        self.check(spec)
        job = self._new_job(job_id, spec)
        self._enqueue(job)

    def _new_job(self, job_id: str, spec: JobSpec) -> Job:
        self._seq += 1
        tasks = [(r, i) for r in spec.roles for i in range(r.instances)]
        job = Job(job_id, spec, self._seq, spec.priority, tasks)
        self._jobs[job_id] = job
        return job

    def _remove(self, job_id: str) -> None:
        job = self._jobs.pop(job_id, None)
        if job is None:
            return
        self._dequeue(job)
        self._vacate_job(job)

    def _requeue(self, job_id: str) -> None:
        job = self._jobs.get(job_id)
        if job is None:
            return
        self._vacate_job(job)
        self._enqueue(job)

    # ---- cell bookkeeping --------------------------------------------------------------------

    def _occupy(self, leaf: Cell, job: Job) -> None:
        owner = leaf.owner()
        if owner is not None:
            vc = self.vcs[owner.vc or ""]
            if leaf.bad == 0:
                vc.free_in -= 1
            if job.prio >= 0:
                vc.prio_in[job.prio] = vc.prio_in.get(job.prio, 0) + 1
            else:
                vc.oppo_in += 1
            self.tree.use(leaf, job.job_id, job.prio)
            if leaf.node_cell is not None and leaf.node_cell.free == 0:
                vc.open.get(leaf.chain, {}).pop(leaf.node_cell, None)
            return
        self.tree.use(leaf, job.job_id, job.prio)

    def _vacate(self, leaf: Cell, touched: set[Cell]) -> None:
        owner = leaf.owner()
        if owner is not None:
            vc = self.vcs[owner.vc or ""]
            self._tick += 1
            node = leaf.node_cell
            if node is not None:
                vc.grown.pop(node, None)
                vc.grown[node] = self._tick
            if leaf.bad == 0:
                vc.free_in += 1
            if leaf.prio >= 0:
                vc.prio_in[leaf.prio] -= 1
            else:
                vc.oppo_in -= 1
            self._bump(vc, leaf.prio)
            touched.add(owner)
        self.tree.release(leaf)
        if owner is not None and leaf.node_cell is not None:
            self.vcs[owner.vc or ""].refresh_open(leaf.node_cell)
        self._bump_oppo()

    def _vacate_job(self, job: Job, touched: set[Cell] | None = None) -> None:
        settle = touched is None
        touched = set() if touched is None else touched
        for _, leaves in job.placed.values():
            for leaf in leaves:
                self._vacate(leaf, touched)
        job.placed.clear()
        job.prio = job.spec.priority
        job.downgraded_by = None
        if settle:
            self._settle(touched)

    def _settle(self, touched: set[Cell]) -> None:
        """Unbind the VC cells no guaranteed job uses any more (lazy binding, both ways)."""
        for cell in sorted(touched, key=lambda c: c.order) if len(touched) > 1 else touched:
            if cell.vc is None or cell.pinned or cell.guaranteed > 0:
                continue
            vc = self.vcs[cell.vc]
            vc.free_in -= cell.free
            vc.oppo_in -= cell.oppo
            self.vcs.unbind(vc, cell)
            for other in self.vcs.by_name.values():
                if cell.chain in other.quota:
                    self._bump(other)

    def _bind_counters(self, vc: VC, plan: Plan) -> None:
        for cell in plan.bound:
            vc.free_in += cell.free
            vc.oppo_in += cell.oppo

    def _bump(self, vc: VC, freed: int | None = None) -> None:
        """The VC's capacity may have grown: for every job when ``freed`` is None, else only
        for jobs of priority <= ``freed`` (a job could already preempt lower ones)."""
        if freed is None:
            vc.epoch += 1
            level = 1 << 30
        else:
            vc.freed[freed] = vc.freed.get(freed, 0) + 1
            level = freed
        if self._dirty_vcs.get(vc.name, -(1 << 30)) < level:
            self._dirty_vcs[vc.name] = level

    def _bump_oppo(self) -> None:
        self._oppo_epoch += 1
        self._dirty_oppo = True

    # ---- queue -------------------------------------------------------------------------------

    def _class_key(self, job: Job) -> Hashable:
        waiting: dict[RoleSpec, int] = {}
        for role, _ in job.waiting_tasks:
            waiting[role] = waiting.get(role, 0) + 1
        shape = tuple((r.gpu, r.cpu, r.memory_mb, r.sku, n) for r, n in waiting.items())
        if not job.spec.gang:
            shape = shape[:1]
        vc = None if job.spec.opportunistic else job.vc
        return (vc, job.spec.priority, job.spec.gang, shape)

    def _enqueue(self, job: Job) -> None:
        """Put a job (back) in its VC's queue at its original place, in its current class."""
        self._dequeue(job, keep_order=True)
        queue = self._queues.setdefault(job.vc, VCQueue())
        key = self._class_key(job)
        cls = self._classes.get(key)
        if cls is None:
            cls = self._classes[key] = JobClass(key, job.vc, job.spec.priority)
            cls.need = self._class_need(job)
            cls.task_need = self._task_need(job)
            cls.vc_ref = self.vcs.by_name.get(job.vc)
            if job.spec.opportunistic:
                self._oppo_classes[key] = cls
            else:
                self._vc_classes.setdefault(job.vc, {})[key] = cls
        if not cls.entries or cls.entries[0][0] > job.seq or not self._blocked(cls):
            self._ready.add(cls)
        cls.add(job.seq, job.job_id)
        job.queued_key = key
        if not job.in_order:
            queue.add(job.spec.priority, job.seq, job.job_id)
            job.in_order = True

    def _class_need(self, job: Job) -> int:
        """The fewest GPUs a job of this class can start with (its next task if incremental)."""
        waiting = job.waiting_tasks
        unit = waiting if job.spec.gang else waiting[:1]
        chains = self._chains(job, [r for r, _ in unit])
        if not chains:
            return 1 << 30
        return min(sum(t.leaves for t in self._needs(unit, c)) for c in chains)

    def _task_need(self, job: Job) -> int:
        """The fewest GPUs the job's largest waiting task needs on one node."""
        roles = [r for r, _ in job.waiting_tasks]
        chains = self._chains(job, roles)
        if not chains:
            return 1 << 30
        return min(
            max(self._leaves(r, self.tree.chains[c].leaf_type) for r in roles) for c in chains
        )

    def _dequeue(self, job: Job, keep_order: bool = False) -> None:
        if job.queued_key is not None:
            cls = self._classes.get(job.queued_key)
            if cls is not None:
                cls.remove(job.seq, job.job_id)
            job.queued_key = None
        if not keep_order and job.in_order:
            self._queues[job.vc].remove(job.spec.priority, job.seq, job.job_id)
            job.in_order = False

    def _stamp(self, cls: JobClass) -> Hashable:
        """What the class's chances depend on; unchanged means a failed class still fails."""
        if cls.priority < 0:
            return self._oppo_epoch
        vc = cls.vc_ref
        if vc is None:
            return None
        freed = 0
        for p, n in vc.freed.items():
            if p >= cls.priority:
                freed += n
        return (vc.epoch, freed)

    def _blocked(self, cls: JobClass) -> bool:
        return cls.blocked_at is not None and cls.blocked_at == self._stamp(cls)

    def _block(self, cls: JobClass, stamp: Hashable = None) -> None:
        cls.blocked_at = self._stamp(cls) if stamp is None else stamp
        vc = cls.vc_ref
        cls.failed_at = (self._tick, vc.epoch) if vc is not None and cls.priority >= 0 else None

    def _since(self, cls: JobClass) -> int | None:
        """When the class last failed, if only GPUs freed in its VC changed since then (so
        only the nodes they lie on need a new look)."""
        vc = cls.vc_ref
        if cls.failed_at is None or vc is None or cls.failed_at[1] != vc.epoch:
            return None
        return cls.failed_at[0]

    def _collect_ready(self) -> list[JobClass]:
        """The classes worth an attempt: new or unblocked ones whose need the capacity they
        depend on could still cover (a cheap upper bound; the placement search decides)."""
        for name, level in self._dirty_vcs.items():
            for cls in self._vc_classes.get(name, {}).values():
                if cls.priority <= level and cls.entries:
                    self._ready.add(cls)
        self._dirty_vcs.clear()
        if self._dirty_oppo:
            self._ready.update(self._oppo_classes.values())
            self._dirty_oppo = False
        out = []
        idle: int | None = None
        widest = 0
        rooms: dict[tuple[str, int], int] = {}
        for cls in self._ready:
            if not cls.entries:
                continue
            stamp = self._stamp(cls)
            if cls.blocked_at is not None and cls.blocked_at == stamp:
                continue
            if cls.priority < 0:
                if idle is None:
                    idle = sum(t.free for c in self.tree.chains.values() for t in c.tops)
                    widest = max(
                        (n.free for nodes in self.tree.open.values() for n in nodes), default=0
                    )
                room = idle if widest >= cls.task_need else -1
            elif cls.vc_ref is None:
                room = -1
            else:
                key = (cls.vc, cls.priority)
                room = rooms.get(key, -1)
                if room < 0:
                    room = rooms[key] = self._room(cls.vc_ref, cls.priority)
            if room < cls.need:
                self._block(cls, stamp)
                continue
            out.append(cls)
        self._ready.clear()
        return out

    def _room(self, vc: VC, priority: int) -> int:
        """GPUs a job of this priority could have in its VC: free, unbound, or preemptible."""
        room = vc.free_in + vc.unbound_leaves + vc.oppo_in
        for p, n in vc.prio_in.items():
            if p < priority:
                room += n
        return room

    def _schedule(self, out: list[Decision]) -> None:
        """Start what fits, classes in queue order; a class that fails is skipped until the
        capacity it depends on grows."""
        heap: list[tuple[int, int, int, JobClass]] = []
        failed: dict[Hashable, list[tuple[int, int, float, int, int]]] = {}
        tie = 0
        while True:
            for cls in self._collect_ready():
                tie += 1
                heapq.heappush(heap, (-cls.priority, cls.entries[0][0], tie, cls))
            if not heap:
                return
            _, seq, _, cls = heapq.heappop(heap)
            if not cls.entries or cls.entries[0][0] != seq or self._blocked(cls):
                if cls.entries and not self._blocked(cls):
                    self._ready.add(cls)
                continue
            job = self._jobs[cls.entries[0][1]]
            if cls.signature is None:
                cls.signature = self._signature(job)
            group, size = cls.signature
            if group is not None and any(_dominates(f, size) for f in failed.get(group, ())):
                self._block(cls)
                continue
            before = len(job.placed)
            self._try(job, out, self._since(cls))
            if not job.waiting_tasks:
                self._dequeue(job)
                self._ready.add(cls)
                continue
            if len(job.placed) > before:  # an incremental job started some tasks
                self._enqueue(job)
            if job.queued_key is not None:
                self._block(self._classes[job.queued_key])
            if group is not None:
                failed.setdefault(group, []).append(size)

    def _signature(self, job: Job) -> tuple[Hashable | None, tuple[int, int, float, int, int]]:
        """What a failed attempt says about larger jobs (single-role jobs only)."""
        role = job.spec.roles[0]
        size = (job.spec.priority, role.gpu, role.cpu, role.memory_mb, len(job.waiting_tasks))
        if len(job.spec.roles) != 1:
            return None, size
        vc = None if job.spec.opportunistic else job.vc
        return (vc, role.sku, job.spec.gang), size

    # ---- placing -----------------------------------------------------------------------------

    def _chains(self, job: Job, roles: list[RoleSpec]) -> list[str]:
        """The chains a job may run in, in config order (cached: asked on every attempt)."""
        skus = frozenset(r.sku for r in roles if r.sku)
        key = (job.vc, job.opportunistic, job.pinned, skus)
        chains = self._chains_cache.get(key)
        if chains is None:
            chains = self._chains_cache[key] = self._find_chains(job, skus)
        return chains

    def _find_chains(self, job: Job, skus: frozenset[str | None]) -> list[str]:
        pin = job.pinned
        if pin is not None and not job.opportunistic:
            cell = self.tree.pinned.get(pin)
            return [cell.chain] if cell is not None else []
        if job.opportunistic:
            names = list(self.tree.chains)
        else:
            vc = self.vcs.by_name.get(job.vc)
            if vc is None:
                return []
            names = list(dict.fromkeys([*vc.quota, *(c.chain for c in vc.pinned)]))
        return [c for c in names if not skus or self.tree.chains[c].leaf_type in skus]

    def _try(self, job: Job, out: list[Decision], since: int | None = None) -> None:
        waiting = job.waiting_tasks
        units = [waiting] if job.spec.gang else [[t] for t in waiting]
        for unit in units:
            plan = self._find(job, unit, since)
            since = None
            if plan is None or not self._commit(job, plan, out):
                return

    def _find(
        self, job: Job, unit: list[tuple[RoleSpec, int]], since: int | None = None
    ) -> Plan | None:
        chains = self._chains(job, [r for r, _ in unit])
        needs = {chain: self._needs(unit, chain) for chain in chains}
        if job.opportunistic:
            for chain in chains:
                plan = self.placer.opportunistic(chain, needs[chain])
                if plan is not None:
                    return plan
            return None
        vc = self.vcs.by_name.get(job.vc)
        if vc is None or not chains:
            return None
        least = min(sum(t.leaves for t in n) for n in needs.values())
        room = vc.free_in + vc.unbound_leaves
        lower = [p for p, n in vc.prio_in.items() if n > 0 and p < job.prio]
        if not lower and not self._oppo_running():
            lower = [None]  # nobody to preempt: the free search is the only one
        # Free GPUs first (binding more of the VC's cells if need be); only then one search
        # that may preempt, lowest priorities first (see Placer._best_node).
        for threshold in dict.fromkeys((None, max(lower, default=OPPORTUNISTIC))):
            if threshold is not None:  # a cheap upper bound first
                room += vc.oppo_in + sum(vc.prio_in[p] for p in lower)
            if room < least:
                continue
            only = None
            if since is not None and len(unit) == 1:
                only = self._grown_since(vc, since)
            pinned = self.tree.pinned.get(job.pinned or "") if job.pinned else None
            for chain in chains:
                plan = self.placer.guaranteed(vc, chain, needs[chain], threshold, only, pinned)
                if plan is not None:
                    return plan
        return None

    def _oppo_running(self) -> int:
        return self.tree.oppo_total

    def _grown_since(self, vc: VC, tick: int) -> set[Cell]:
        """The VC's nodes where GPUs were freed after ``tick`` (newest last in ``grown``)."""
        out = set()
        for node in reversed(vc.grown):
            if vc.grown[node] <= tick:
                break
            out.add(node)
        return out

    def _needs(self, unit: list[tuple[RoleSpec, int]], chain: str) -> list[TaskNeed]:
        leaf = self.tree.chains[chain].leaf_type
        return [TaskNeed(r.name, i, self._leaves(r, leaf)) for r, i in unit]

    def _commit(self, job: Job, plan: Plan, out: list[Decision]) -> bool:
        vc = self.vcs.by_name.get(job.vc) if not job.opportunistic else None
        victims = [self._jobs[v] for v in plan.victims()]
        lazy = [v for v in victims if v.spec.lazy_preemption and not v.opportunistic]
        if lazy and vc is not None:
            again = self._lazy(job, vc, plan, lazy, out)
            if again is None:
                return False
            plan = again
            victims = [self._jobs[v] for v in plan.victims()]
        if vc is not None:
            self._bind_counters(vc, plan)
        touched: set[Cell] = set()
        for victim in sorted(victims, key=lambda v: (v.prio, -v.seq)):
            out.append(Preempt(victim.job_id, job.job_id, self._preempt_reason(victim, job)))
            self._vacate_job(victim, touched)
            self._enqueue(victim)
        started = []
        for task, node, leaves in plan.placed:
            for leaf in leaves:
                self._occupy(leaf, job)
            ordered = sorted(leaves, key=_gpu) if len(leaves) > 1 else leaves
            placement = TaskPlacement(
                task.role,
                task.index,
                node.node or "",
                tuple(leaf.gpu or 0 for leaf in ordered),
                tuple(leaf.leaf_id for leaf in ordered),
            )
            job.placed[(task.role, task.index)] = (placement, leaves)
            started.append(placement)
        out.append(Start(job.job_id, tuple(started), job.opportunistic))
        self._settle(touched)
        return True

    def _lazy(
        self, job: Job, vc: VC, plan: Plan, lazy: list[Job], out: list[Decision]
    ) -> Plan | None:
        """HiveD's lazy preemption: downgrade the victims to opportunistic and look again; they
        keep running unless the preemptor still needs their very GPUs."""
        self.placer.undo(vc, plan)
        touched: set[Cell] = set()
        for victim in lazy:
            for _, leaves in victim.placed.values():
                for leaf in leaves:
                    self._vacate(leaf, touched)
            victim.prio = OPPORTUNISTIC
            victim.downgraded_by = job.job_id
            for _, leaves in victim.placed.values():
                for leaf in leaves:
                    self._occupy(leaf, victim)
        self._settle(touched)
        unit = [
            (r, i)
            for r, i in job.waiting_tasks
            if (r.name, i) in {(t.role, t.index) for t, _, _ in plan.placed}
        ]
        again = self._find(job, unit)
        victims = again.victims() if again is not None else set()
        for victim in lazy:
            if victim.job_id not in victims:
                out.append(
                    Downgrade(
                        victim.job_id,
                        job.job_id,
                        f"downgraded to opportunistic by {job.spec.name} "
                        f"(priority {job.spec.priority} > {victim.spec.priority}) in {vc.name}",
                    )
                )
        return again

    def _preempt_reason(self, victim: Job, by: Job) -> str:
        if victim.opportunistic:
            return f"preempted by {by.spec.name}: opportunistic jobs yield to guaranteed ones"
        return (
            f"preempted by {by.spec.name} (priority {by.spec.priority} > "
            f"{victim.spec.priority}) in {by.vc}"
        )

    # ---- nodes, reconfiguration, adoption ----------------------------------------------------

    def _node_health(self, node: str, healthy: bool, out: list[Decision], reason: str) -> None:
        cells = self.tree.nodes.get(node)
        if cells is None:
            raise ValueError(f"unknown node {node!r}")
        touched: set[Cell] = set()
        if not healthy:
            hit = sorted(
                {leaf.job for cell in cells for leaf in cell.leaf_cells() if leaf.job},
                key=lambda j: self._jobs[j].seq,
            )
            for job_id in hit:
                job = self._jobs[job_id]
                why = f"node {node} went down" + (f" ({reason})" if reason else "")
                out.append(Stop(job_id, why))
                self._vacate_job(job, touched)
                self._enqueue(job)
        for cell in cells:
            for leaf in cell.leaf_cells():
                owner = leaf.owner()
                if owner is not None and leaf.job is None and (leaf.bad == 0) != healthy:
                    self.vcs[owner.vc or ""].free_in += 1 if healthy else -1
            self.tree.set_health(cell, healthy)
            for vc in self.vcs.by_name.values():
                vc.refresh_open(cell)
        self._settle(touched)
        for vc in self.vcs.by_name.values():
            self._bump(vc)
        self._bump_oppo()

    def _reconfigure(self, config: ClusterConfig, out: list[Decision]) -> None:
        """Work-preserving: running jobs keep their GPUs where those still exist."""
        running = sorted(
            (j for j in self._jobs.values() if j.placed),
            key=lambda j: (j.prio < 0, -j.prio, j.seq),
        )
        kept = {j.job_id: dict(j.placed) for j in running}
        old_queues = self._queues
        self._queues, self._ready = {}, set()
        self._classes, self._oppo_classes, self._vc_classes = {}, {}, {}
        self._load(config)
        for job in self._jobs.values():
            job.queued_key = None
            job.in_order = False
        for job in running:
            tasks = tuple(p for p, _ in kept[job.job_id].values())
            job.placed.clear()
            try:
                self._place_exactly(job, tasks)
            except AdoptRefused as err:
                job.prio = job.spec.priority
                job.downgraded_by = None
                out.append(Stop(job.job_id, f"reconfigured: {err}"))
        for queue in old_queues.values():
            for _, _, job_id in queue.order:
                job = self._jobs.get(job_id)
                if job is not None and job.waiting_tasks and job.queued_key is None:
                    self._enqueue(job)
        for job in running:
            if job.waiting_tasks and job.queued_key is None:
                self._enqueue(job)

    def _adopt(self, event: Adopt) -> None:
        if event.job_id in self._jobs:
            raise AdoptRefused(f"job {event.job_id} is already known")
        job = self._new_job(event.job_id, event.spec)
        if event.opportunistic:
            job.prio = OPPORTUNISTIC
        try:
            self._place_exactly(job, event.tasks)
        except AdoptRefused:
            del self._jobs[event.job_id]
            raise
        if job.waiting_tasks:
            self._enqueue(job)

    def _place_exactly(self, job: Job, tasks: tuple[TaskPlacement, ...]) -> None:
        """Put a running job back on exactly these GPUs, binding its VC's cells around them."""
        wanted = []
        for task in tasks:
            ids = task.cells or tuple(f"{task.node}/{g}" for g in task.gpus)
            leaves = []
            for leaf_id in ids:
                leaf = self.tree.leaf.get(leaf_id)
                if leaf is None:
                    raise AdoptRefused(f"GPU {leaf_id} does not exist in this cluster")
                if leaf.job is not None:
                    raise AdoptRefused(f"GPU {leaf_id} is already used by job {leaf.job}")
                if leaf.bad:
                    raise AdoptRefused(f"GPU {leaf_id} is on a node that is down")
                leaves.append(leaf)
            wanted.append((task, leaves))
        vc = None if job.opportunistic else self.vcs.by_name.get(job.vc)
        if not job.opportunistic and vc is None:
            raise AdoptRefused(f"VC {job.vc} does not exist in this cluster")
        bound: list[Cell] = []
        if vc is not None:
            for _, leaves in wanted:
                for leaf in leaves:
                    if not self._own(vc, leaf, bound):
                        for cell in reversed(bound):
                            vc.free_in -= cell.free
                            vc.oppo_in -= cell.oppo
                            self.vcs.unbind(vc, cell)
                        raise AdoptRefused(
                            f"GPU {leaf.leaf_id} lies outside {vc.name}'s free cells"
                        )
        for task, leaves in wanted:
            for leaf in leaves:
                self._occupy(leaf, job)
            job.placed[(task.role, task.index)] = (task, leaves)

    def _own(self, vc: VC, leaf: Cell, bound: list[Cell]) -> bool:
        owner = leaf.owner()
        if owner is not None:
            return owner.vc == vc.name
        levels = sorted(n for n, c in vc.unbound.get(leaf.chain, {}).items() if c > 0)
        for level in levels:
            cell: Cell | None = leaf
            while cell is not None and cell.level < level:
                cell = cell.parent
            if cell is None:
                continue
            root = self.tree.free_root(cell)
            if root is not None and self.vcs.can_bind(vc, cell, root):
                self.vcs.bind(vc, cell)
                vc.free_in += cell.free
                vc.oppo_in += cell.oppo
                bound.append(cell)
                return True
        return False

    # ---- views -------------------------------------------------------------------------------

    def job(self, job_id: str) -> JobView | None:
        job = self._jobs.get(job_id)
        return None if job is None else self._view(job)

    def jobs(self) -> list[JobView]:
        running = sorted((j for j in self._jobs.values() if j.placed), key=lambda j: j.seq)
        waiting = sorted(
            (j for j in self._jobs.values() if not j.placed),
            key=lambda j: (-j.spec.priority, j.seq, j.spec.name),
        )
        return [self._view(j) for j in (*running, *waiting)]

    def _view(self, job: Job) -> JobView:
        tasks = tuple(sorted((p for p, _ in job.placed.values()), key=lambda p: (p.role, p.index)))
        position = length = None
        why = None
        queue = self._queues.get(job.vc)
        if not job.placed and queue is not None:
            position = queue.position(job.spec.priority, job.seq, job.job_id)
            length = len(queue.order)
        if job.waiting_tasks:
            from labhive.scheduler.why import why_waiting

            why = why_waiting(self, job, position, length)
        elif job.downgraded_by is not None:
            by = self._jobs.get(job.downgraded_by)
            name = by.spec.name if by else job.downgraded_by
            why = f"downgraded to opportunistic by {name}; preempted first if its GPUs are needed"
        elif job.opportunistic:
            why = "running opportunistically on idle cells; preempted first if they are needed"
        return JobView(
            job.job_id,
            job.spec.name,
            job.vc,
            job.spec.priority,
            "RUNNING" if job.placed else "WAITING",
            tasks,
            job.opportunistic,
            position,
            length,
            why,
        )

    def cluster(self) -> ClusterView:
        merged: dict[str, dict[str, object]] = {}
        for name, cells in self.tree.nodes.items():
            entry = merged.setdefault(name, {"sku": cells[0].chain, "gpus": [], "used": {}})
            for cell in cells:
                for leaf in cell.leaf_cells():
                    entry["gpus"].append(leaf.gpu)  # type: ignore[attr-defined]
                    if leaf.job:
                        entry["used"][leaf.gpu] = leaf.job  # type: ignore[index]
            entry["sku"] = self.tree.chains[cells[0].chain].leaf_type
            entry["healthy"] = all(c.bad == 0 for c in cells)
        nodes = tuple(
            NodeView(
                name,
                str(e["sku"]),
                tuple(sorted(e["gpus"])),  # type: ignore[call-overload]
                bool(e["healthy"]),
                dict(e["used"]),  # type: ignore[call-overload]
                "" if e["healthy"] else "down",
            )
            for name, e in merged.items()
        )
        return ClusterView(nodes, self.vc_views(), self.config.virtual)

    def vc_views(self) -> dict[str, VCView]:
        used: dict[str, int] = {}
        oppo: dict[str, int] = {}
        waiting: dict[str, int] = {}
        for job in self._jobs.values():
            n = sum(len(leaves) for _, leaves in job.placed.values())
            target = oppo if job.opportunistic else used
            target[job.vc] = target.get(job.vc, 0) + n
            if not job.placed:
                waiting[job.vc] = waiting.get(job.vc, 0) + 1
        return {
            name: VCView(
                name,
                vc.leaves(self.tree),
                used.get(name, 0),
                oppo.get(name, 0),
                waiting.get(name, 0),
            )
            for name, vc in self.vcs.by_name.items()
        }

    def next_wakeup(self) -> float | None:
        return None


def _gpu(leaf: Cell) -> int:
    return leaf.gpu or 0


def _dominates(
    failed: tuple[int, int, float, int, int], job: tuple[int, int, float, int, int]
) -> bool:
    """A job at most as important and at least as large as one that failed fails too."""
    return (
        job[0] <= failed[0]
        and job[1] >= failed[1]
        and job[2] >= failed[2]
        and job[3] >= failed[3]
        and job[4] >= failed[4]
    )
