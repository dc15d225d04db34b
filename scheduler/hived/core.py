"""HiveD's scheduling algorithm as a pure state machine: one event in, decisions out.

What it keeps: the physical cells and who uses them (``cells``), each VC's quota and its lazy
bindings (``vc``), the waiting jobs (``queue``). What it decides, after every event: which
waiting jobs start where (``placement``), whom they preempt (strictly lower priority only,
opportunistic jobs first), whom they merely downgrade (lazy preemption), and which jobs a node
failure stopped. Why-texts for waiting jobs are computed only when someone asks (``job()``,
``jobs()``), so a simulator driving a hundred thousand jobs pays nothing for them.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Hashable
from dataclasses import dataclass, field, replace
from typing import Any

from labhive.scheduler.config import ClusterConfig
from labhive.scheduler.hived.admission import reject_if_never_runs
from labhive.scheduler.hived.cells import Cell, CellTree
from labhive.scheduler.hived.cpu_pool import CpuPool, cpu_only
from labhive.scheduler.hived.placement import Placer, Plan, TaskNeed
from labhive.scheduler.hived.queue import FailedAt, JobClass, JobSize, Signature, VCQueue
from labhive.scheduler.hived.vc import VC, VCs
from labhive.scheduler.hived.views import free_list, job_view, node_views, vc_cells, vc_views
from labhive.scheduler.jobs import OPPORTUNISTIC, JobSpec, RoleSpec
from labhive.scheduler.model import (
    Adopt,
    ClusterView,
    Decision,
    Downgrade,
    Event,
    JobView,
    Preempt,
    SpecRejected,
    Start,
    Stop,
    StopTasks,
    TaskPlacement,
    VCView,
)
from labhive.scheduler.policy_base import PolicyBase, listing_order, node_down, reconfigured

_UNCHECKED = object()  # ``check``'s cache has no answer for a key yet

#: More than any cluster's GPUs and above any job's priority (priorities are small ints):
#: a need no chain can meet, a bound that does not limit, a freed level every job gains from.
UNBOUNDED = 1 << 30
#: Below any job's priority: a VC no release has made dirty yet in this pass.
NOT_DIRTY = -UNBOUNDED
#: A class's room when no node or VC can hold it (any real room is >= 0, so it blocks).
NO_ROOM = -1
#: Job sizes whose task needs are remembered (``_whole_needs``) before they are forgotten.
NEEDS_CACHE = 4096


@dataclass(frozen=True, slots=True)
class SlotShape:
    """A gang whose chances count in task slots per whole node: its one chain, the GPUs of
    each (equal) task, and its priority (it may use GPUs of lower-priority jobs)."""

    chain: str
    leaves: int
    priority: int


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
    pinned: str | None = None  # the pinned cell its roles name, if any
    needs: dict[str, list[TaskNeed]] | None = None  # per chain, while nothing is placed
    cpu_only: bool = False  # asks for no GPU on a cluster without skuTypes (``cpu_pool``)
    grouped: bool = False  # a gang of several affinity groups, each placed whole and apart
    # Tasks downgraded to opportunistic on their own (lazy preemption of one unit) -> by whom.
    downgraded: dict[tuple[str, int], str] = field(default_factory=dict)

    @property
    def vc(self) -> str:
        return self.spec.vc

    @property
    def waiting_tasks(self) -> list[tuple[RoleSpec, int]]:
        if not self.placed:
            return self.tasks
        return [(r, i) for r, i in self.tasks if (r.name, i) not in self.placed]

    @property
    def opportunistic(self) -> bool:
        return self.prio == OPPORTUNISTIC


def leaves_needed(role: RoleSpec, config: ClusterConfig, leaf_type: str) -> int:
    """Leaf cells one task of ``role`` takes on ``leaf_type``: the most any resource needs."""
    sku = config.sku(leaf_type)
    need = math.ceil(role.gpu / sku.gpu)
    if sku.cpu > 0:
        need = max(need, math.ceil(role.cpu / sku.cpu))
    if sku.memory_mb > 0:
        need = max(need, math.ceil(role.memory_mb / sku.memory_mb))
    return max(need, 1)


class HivedScheduler(PolicyBase[Job]):
    """HiveD's algorithm behind ``model.Scheduler``."""

    name = "hived"
    #: HiveD's unit of preemption, lazy preemption and node failure: a task of an incremental
    #: job, an affinity group of a job of several, else the job. A driver that can stop only
    #: whole jobs turns this off and every such decision stops or downgrades the whole job.
    partial_stops = True

    def __init__(self, config: ClusterConfig) -> None:
        self._jobs: dict[str, Job] = {}
        self._seq = 0
        self._queues: dict[str, VCQueue] = {}
        self._ready: set[JobClass] = set()
        self._oppo_epoch = 0
        self._classes: dict[Hashable, JobClass] = {}
        self._oppo_classes: dict[Hashable, JobClass] = {}
        # Per VC, its classes that have waiting jobs (a release looks at those, not at every
        # class ever made: a trace makes one per job size).
        self._vc_classes: dict[str, dict[Hashable, JobClass]] = {}
        self._dirty_vcs: dict[str, int] = {}  # VC -> the highest priority that may now fit
        self._dirty_oppo = False
        self._tick = 0  # counts freed GPUs, to tell which nodes changed since a failure
        self.down_reasons: dict[str, str] = {}  # node -> the reason its NodeDown gave
        self._load(config)

    def _load(self, config: ClusterConfig) -> None:
        self.config = config
        self.tree = CellTree(config)
        self.vcs = VCs(config, self.tree)
        self.cpu = CpuPool(config)
        self._cpu_waiting: list[tuple[int, int, str]] = []  # (-priority, seq, job id)
        self.placer = Placer(self.tree, self.vcs)
        self._leaves_cache: dict[tuple[int, float, int, str], int] = {}
        self._vc_types: dict[str, tuple[str, ...]] = {}
        self._chains_cache: dict[Hashable, list[str]] = {}
        self._needs_cache: dict[tuple[tuple[RoleSpec, ...], str], dict[str, list[TaskNeed]]] = {}
        self._checked: dict[Hashable, str | None] = {}
        self._passed: JobSpec | None = None  # the spec that passed ``check`` last
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
        if spec is self._passed:
            return  # drivers check a spec, then submit it: the second check is free
        key = (spec.vc, spec.priority, spec.gang, spec.roles)
        message = self._checked.get(key, _UNCHECKED)
        if message is _UNCHECKED:
            try:
                reject_if_never_runs(self, spec)
                message = None
            except SpecRejected as err:
                message = str(err)
            self._checked[key] = message
        if message is not None:
            raise SpecRejected(message)
        # Specs are frozen, so the same object passes again until the cluster changes
        # (``_load`` forgets it).
        self._passed = spec

    def _leaves(self, role: RoleSpec, leaf_type: str, vc: str | None = None) -> int:
        """Leaf cells a task of ``role`` takes on ``leaf_type``. A role without a skuType
        in ``vc`` is sized, as OpenPAI does, by the VC's smallest SKU (the one it needs the
        most leaf cells of), whatever chain it lands in."""
        if vc is not None and role.sku is None and self.config.skus:
            types = self._vc_types.get(vc)
            if types is None:
                types = self._vc_types[vc] = self._sizing_types(vc)
            if types:
                return max(self._leaves(role, t) for t in types)
        # Keyed by the only fields ``leaves_needed`` reads: hashing plain numbers is several
        # times cheaper than hashing the whole (dataclass) role, and this runs per task.
        key = (role.gpu, role.cpu, role.memory_mb, leaf_type)
        n = self._leaves_cache.get(key)
        if n is None:
            n = self._leaves_cache[key] = leaves_needed(role, self.config, leaf_type)
        return n

    def _sizing_types(self, vc_name: str) -> tuple[str, ...]:
        """The leaf types of a VC's cells, pinned ones included (none: unknown VC)."""
        vc = self.vcs.by_name.get(vc_name)
        if vc is None:
            return ()
        chains = [*vc.quota, *(c.chain for c in vc.pinned)]
        return tuple(sorted({self.tree.chains[c].leaf_type for c in chains}))

    # ---- events ------------------------------------------------------------------------------

    def handle(self, event: Event) -> list[Decision]:
        out: list[Decision] = []
        self._apply(event, out)
        if isinstance(event, Adopt):
            # An adopt places nothing new: a driver restores every running job before any
            # decision (a partly stopped job's waiting tasks must not take another's GPUs),
            # then sends a Tick, after which a pass places what waits (as queue policies do).
            return out
        self._schedule(out)
        if self._cpu_waiting:
            self._schedule_cpu(out)
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
        job.pinned = next((r.pinned_cell for r in spec.roles if r.pinned_cell), None)
        job.cpu_only = cpu_only(self.config, spec)
        job.grouped = spec.gang and len({r.affinity_group for r in spec.roles}) > 1
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

    def _occupy(self, leaf: Cell, job: Job, prio: int | None = None) -> None:
        """``job`` takes ``leaf``, at its priority unless ``prio`` (a downgraded task) says."""
        prio = job.prio if prio is None else prio
        owner = leaf.owner()
        if owner is not None:
            vc = self.vcs.by_name[owner.vc or ""]
            vc.occupy(leaf.bad == 0, prio)
            self.tree.use(leaf, job.job_id, prio)
            if leaf.node_cell is not None and leaf.node_cell.free == 0:
                vc.open.get(leaf.chain, {}).pop(leaf.node_cell, None)
            return
        self.tree.use(leaf, job.job_id, prio)

    def _vacate(self, leaf: Cell, touched: set[Cell]) -> None:
        owner = leaf.owner()
        vc = None
        if owner is not None:
            vc = self.vcs.by_name[owner.vc or ""]
            if leaf.node_cell is not None:
                self._grew(vc, leaf.node_cell)
            vc.vacate(leaf.bad == 0, leaf.prio)
            self._bump(vc, leaf.prio)
            touched.add(owner)
        self.tree.release(leaf)
        if vc is not None and leaf.node_cell is not None:
            vc.refresh_open(leaf.node_cell)
        self._bump_oppo()

    def _vacate_run(self, run: list[Cell], owner: Cell | None, touched: set[Cell]) -> None:
        """``_vacate`` of each leaf of ``run`` (on one node, in the VC cell ``owner``: a job's
        tasks on a node come in a row), with what they share done once: the node's tick and
        place in ``grown``, its place in the VC's open nodes, the epoch of opportunistic
        chances all end as leaf by leaf would leave them (nothing else touches them between)."""
        assert owner is not None
        node = run[0].node_cell
        assert node is not None
        vc = self.vcs.by_name[owner.vc or ""]
        self._tick += len(run) - 1
        self._grew(vc, node)
        for leaf in run:
            vc.vacate(leaf.bad == 0, leaf.prio)
            self._bump(vc, leaf.prio)
            self.tree.release(leaf)
        touched.add(owner)
        vc.refresh_open(node)
        self._oppo_epoch += len(run) - 1
        self._bump_oppo()

    def _vacate_job(self, job: Job, touched: set[Cell] | None = None) -> None:
        if job.cpu_only:
            for placement, _ in job.placed.values():
                self.cpu.release(placement.node, self._role(job, placement.role))
            job.placed.clear()
            return
        settle = touched is None
        touched = set() if touched is None else touched
        run: list[Cell] = []  # consecutive leaves on one node, in one of a VC's cells
        owner: Cell | None = None
        for _, leaves in job.placed.values():
            for leaf in leaves:
                mine = leaf.owner()
                if run and (mine is not owner or leaf.node_cell is not run[0].node_cell):
                    self._vacate_run(run, owner, touched)
                    run = []
                if mine is None or leaf.node_cell is None:
                    self._vacate(leaf, touched)
                    continue
                owner = mine
                run.append(leaf)
        if run:
            self._vacate_run(run, owner, touched)
        job.placed.clear()
        job.prio = job.spec.priority
        job.downgraded_by = None
        job.downgraded.clear()
        if settle:
            self._settle(touched)

    def _splits(self, job: Job) -> bool:
        """Whether the job's unit of preemption is smaller than the job (``partial_stops``)."""
        return self.partial_stops and (job.grouped or not job.spec.gang)

    def _unit_of(self, job: Job, keys: set[tuple[str, int]]) -> set[tuple[str, int]] | None:
        """The placed tasks that stop (or are downgraded) with ``keys``: every task of their
        units (``partial_stops``); None when that is the whole job."""
        if not self._splits(job):
            return None
        if job.grouped:
            groups = {self._role(job, role).affinity_group for role, _ in keys}
            keys = {k for k in job.placed if self._role(job, k[0]).affinity_group in groups}
        return keys if len(keys) < len(job.placed) else None

    def _stop_tasks(
        self, job: Job, keys: set[tuple[str, int]], touched: set[Cell]
    ) -> tuple[TaskPlacement, ...]:
        """Free these tasks' cells; they wait to be placed again, the others keep running."""
        stopped = []
        for key in sorted(keys):
            placement, leaves = job.placed.pop(key)
            job.downgraded.pop(key, None)
            stopped.append(placement)
            if job.cpu_only:
                self.cpu.release(placement.node, self._role(job, placement.role))
            for leaf in leaves:
                self._vacate(leaf, touched)
        return tuple(stopped)

    def _settle(self, touched: set[Cell]) -> None:
        """Unbind the VC cells no guaranteed job uses any more (lazy binding, both ways)."""
        for cell in sorted(touched, key=lambda c: c.order) if len(touched) > 1 else touched:
            if cell.vc is None or cell.pinned or cell.guaranteed > 0:
                continue
            vc = self.vcs[cell.vc]
            vc.count_unbound(cell)
            self.vcs.unbind(vc, cell)
            # More free physical cells help only VCs with cells left to bind in this chain.
            for other in self.vcs.by_name.values():
                if other.unbound.get(cell.chain) and other.unbound_leaves > 0:
                    other.pool_epoch += 1
                    self._bump(other, UNBOUNDED)

    def _bind_counters(self, vc: VC, plan: Plan) -> None:
        for cell in plan.bound:
            self._bound(vc, cell)

    def _bound(self, vc: VC, cell: Cell) -> None:
        """A cell was bound to the VC: count it, and let failed searches look at it."""
        vc.count_bound(cell)
        for node in cell.nodes():
            self._grew(vc, node)

    def _grew(self, vc: VC, node: Cell) -> None:
        """The VC may use more of ``node`` than before (kept newest last)."""
        self._tick += 1
        vc.grown.pop(node, None)
        vc.grown[node] = self._tick

    def _bump(self, vc: VC, freed: int | None = None) -> None:
        """The VC's capacity may have grown: for every job when ``freed`` is None, else only
        for jobs of priority <= ``freed`` (a job could already preempt lower ones)."""
        vc.version += 1
        if freed is None:
            vc.epoch += 1
            level = UNBOUNDED
        else:
            vc.freed[freed] = vc.freed.get(freed, 0) + 1
            level = freed
        if self._dirty_vcs.get(vc.name, NOT_DIRTY) < level:
            self._dirty_vcs[vc.name] = level

    def _bump_oppo(self) -> None:
        self._oppo_epoch += 1
        self._dirty_oppo = True

    # ---- queue -------------------------------------------------------------------------------

    def _class_key(self, job: Job) -> Hashable:
        if job.grouped:
            return ("groups", job.job_id)  # rare: a class of its own
        roles = job.spec.roles
        if len(roles) == 1 and not job.placed and roles[0].instances > 0:
            # The usual job, nothing started: its one role waits whole. The same shape as
            # counting below, without hashing the role once per task.
            r = roles[0]
            shape: tuple[tuple[int, float, int, str | None, int], ...] = (
                (r.gpu, r.cpu, r.memory_mb, r.sku, r.instances),
            )
        else:
            shape = self._shape(job)
        if not job.spec.gang:
            shape = shape[:1]
        # Opportunistic jobs of all VCs share classes, unless SKUs size them by their VC's.
        vc = None if job.spec.opportunistic and not self.config.skus else job.vc
        return (vc, job.spec.priority, job.spec.gang, job.pinned, shape)

    @staticmethod
    def _shape(job: Job) -> tuple[tuple[int, float, int, str | None, int], ...]:
        """What a job's waiting tasks ask for: per role, its resources and task count."""
        waiting: dict[RoleSpec, int] = {}
        for role, _ in job.waiting_tasks:
            waiting[role] = waiting.get(role, 0) + 1
        return tuple((r.gpu, r.cpu, r.memory_mb, r.sku, n) for r, n in waiting.items())

    def _enqueue(self, job: Job) -> None:
        """Put a job (back) in its VC's queue at its original place, in its current class."""
        if job.cpu_only:
            entry = (-job.spec.priority, job.seq, job.job_id)
            if entry not in self._cpu_waiting:
                bisect.insort(self._cpu_waiting, entry)
            return
        self._dequeue(job, keep_order=True)
        queue = self._queues.get(job.vc)
        if queue is None:  # (``setdefault`` would build a queue every time)
            queue = self._queues[job.vc] = VCQueue()
        key = self._class_key(job)
        cls = self._classes.get(key)
        if cls is None:
            cls = self._classes[key] = JobClass(key, job.vc, job.spec.priority)
            cls.need = self._class_need(job)
            cls.task_need = self._task_need(job)
            cls.vc_ref = self.vcs.by_name.get(job.vc)
            if job.spec.opportunistic:
                self._oppo_classes[key] = cls
        if not cls.entries or cls.entries[0][0] > job.seq or not self._blocked(cls):
            self._ready.add(cls)
        cls.add(job.seq, job.job_id)
        if not job.spec.opportunistic:
            listed = self._vc_classes.get(job.vc)
            if listed is None:
                listed = self._vc_classes[job.vc] = {}
            listed[key] = cls
        job.queued_key = key
        if not job.in_order:
            queue.add(job.spec.priority, job.seq, job.job_id)
            job.in_order = True

    def _class_need(self, job: Job) -> int:
        """The fewest GPUs a job of this class can start with (its next task if incremental)."""
        unit = self._units(job)[0]
        chains = self._chains(job, [r for r, _ in unit])
        if not chains:
            return UNBOUNDED
        return min(sum(t.leaves for t in self._needs(unit, c, job.vc)) for c in chains)

    def _task_need(self, job: Job) -> int:
        """The fewest GPUs the job's largest waiting task needs on one node."""
        roles = [r for r, _ in job.waiting_tasks]
        chains = self._chains(job, roles)
        if not chains:
            return UNBOUNDED
        return min(
            max(self._leaves(r, self.tree.chains[c].leaf_type, job.vc) for r in roles)
            for c in chains
        )

    def _dequeue(self, job: Job, keep_order: bool = False) -> None:
        if job.cpu_only:
            entry = (-job.spec.priority, job.seq, job.job_id)
            if entry in self._cpu_waiting:
                self._cpu_waiting.remove(entry)
            return
        if job.queued_key is not None:
            cls = self._classes.get(job.queued_key)
            if cls is not None:
                cls.remove(job.seq, job.job_id)
                if not cls.entries:  # only classes with waiting jobs are listed per VC
                    self._vc_classes.get(cls.vc, {}).pop(cls.key, None)
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
        if cls.stamp_version == vc.version:
            return cls.stamp
        freed = 0
        for p, n in vc.freed.items():
            if p >= cls.priority:
                freed += n
        cls.stamp_version, cls.stamp = vc.version, (vc.epoch, vc.pool_epoch, freed)
        return cls.stamp

    def _blocked(self, cls: JobClass) -> bool:
        return cls.blocked_at is not None and cls.blocked_at == self._stamp(cls)

    def _block(self, cls: JobClass, stamp: Hashable = None) -> None:
        cls.blocked_at = self._stamp(cls) if stamp is None else stamp
        vc = cls.vc_ref
        if vc is not None and cls.priority >= 0:
            cls.failed_at = FailedAt(self._tick, vc.epoch, vc.pool_epoch)
        else:
            cls.failed_at = None

    def _since(self, cls: JobClass) -> tuple[int, bool] | None:
        """When the class last failed, if only GPUs freed in its VC (and free physical cells)
        changed since then: only the nodes those GPUs lie on need a new look, and binding
        more cells only if more physical cells became free (the bool)."""
        vc = cls.vc_ref
        failed = cls.failed_at
        if failed is None or vc is None or failed.epoch != vc.epoch:
            return None
        return failed.tick, failed.pool_epoch != vc.pool_epoch

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
        rooms: dict[tuple[str, int], int] = {}
        for cls in self._ready:
            if not cls.entries:
                continue
            stamp = self._stamp(cls)
            if cls.blocked_at is not None and cls.blocked_at == stamp:
                continue
            if cls.priority < 0:
                if idle is None:
                    idle = self.tree.free_total
                room = idle if self._node_with(cls.task_need) else NO_ROOM
            elif cls.vc_ref is None:
                room = NO_ROOM
            else:
                key = (cls.vc, cls.priority)
                room = rooms.get(key, NO_ROOM)
                if room == NO_ROOM:
                    room = rooms[key] = self._room(cls.vc_ref, cls.priority)
            if room < cls.need:
                self._block(cls, stamp)
                continue
            out.append(cls)
        self._ready.clear()
        return out

    def _may_fit(self, cls: JobClass) -> bool:
        """The cheap bound again, just before an attempt: jobs placed since the class was
        collected may have taken what it needed."""
        if cls.priority < 0:
            return self._node_with(cls.task_need)
        vc = cls.vc_ref
        return vc is not None and self._room(vc, cls.priority) >= cls.need

    def _node_with(self, free: int) -> bool:
        """Whether some node has ``free`` idle healthy GPUs."""
        for nodes in self.tree.open.values():
            for node in nodes:
                if node.free >= free:
                    return True
        return False

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
        failed: dict[Hashable, list[JobSize]] = {}
        tie = 0
        while True:
            ready = (
                self._collect_ready() if self._ready or self._dirty_vcs or self._dirty_oppo else ()
            )
            for cls in ready:
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
            group, size = cls.signature.group, cls.signature.size
            if (group is not None and any(size.dominated_by(f) for f in failed.get(group, ()))) or (
                not self._may_fit(cls)
            ):
                self._block(cls)
                continue
            before = len(job.placed)
            self._try(job, out, self._since(cls), cls)
            if not job.waiting_tasks:
                self._dequeue(job)
                if cls.entries:  # its next job may start too (an empty class is not tried)
                    self._ready.add(cls)
                continue
            if len(job.placed) > before:  # an incremental job started some tasks
                self._enqueue(job)
            if job.queued_key is not None:
                self._block(self._classes[job.queued_key])
            if group is not None:
                failed.setdefault(group, []).append(size)

    def _signature(self, job: Job) -> Signature:
        """What a failed attempt says about larger jobs (single-role jobs only)."""
        role = job.spec.roles[0]
        size = JobSize(
            job.spec.priority, role.gpu, role.cpu, role.memory_mb, len(job.waiting_tasks)
        )
        if len(job.spec.roles) != 1:
            return Signature(None, size)
        vc = None if job.spec.opportunistic and not self.config.skus else job.vc
        # A pinned job runs in its pinned cell only: what fails elsewhere says nothing of it.
        return Signature((vc, role.sku, job.spec.gang, job.pinned), size)

    def _schedule_cpu(self, out: list[Decision]) -> None:
        """Start waiting CPU-only jobs in queue order where nodes' CPUs and memory hold them
        (a gang whole, an incremental job task by task); no preemption either way."""
        for entry in list(self._cpu_waiting):
            job = self._jobs[entry[2]]
            units = [job.waiting_tasks] if job.spec.gang else [[t] for t in job.waiting_tasks]
            started = []
            for unit in units:
                nodes = self.cpu.plan(unit)
                if nodes is None:
                    break
                for (role, index), node in zip(unit, nodes, strict=True):
                    self.cpu.hold(node, role)
                    placement = TaskPlacement(role.name, index, node, ())
                    job.placed[(role.name, index)] = (placement, [])
                    started.append(placement)
            if started:
                out.append(Start(job.job_id, tuple(started), False))
            if not job.waiting_tasks:
                self._cpu_waiting.remove(entry)

    @staticmethod
    def _role(job: Job, name: str) -> RoleSpec:
        return next(r for r in job.spec.roles if r.name == name)

    # ---- placing -----------------------------------------------------------------------------

    def _chains(self, job: Job, roles: list[RoleSpec]) -> list[str]:
        """The chains a job may run in, in config order (cached: asked on every attempt)."""
        skus = frozenset(r.sku for r in roles if r.sku)
        pin = job.pinned if not job.grouped else _pin(roles)
        key = (job.vc, job.opportunistic, pin, skus)
        chains = self._chains_cache.get(key)
        if chains is None:
            chains = self._chains_cache[key] = self._find_chains(job, skus, pin)
        return chains

    def _find_chains(self, job: Job, skus: frozenset[str | None], pin: str | None) -> list[str]:
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

    @staticmethod
    def _units(job: Job) -> list[list[tuple[RoleSpec, int]]]:
        """What is placed whole: the gang, each of its affinity groups (OpenPAI's
        ``affinityGroupName``: placed apart, each in its own chain), or each task of an
        incremental job."""
        waiting = job.waiting_tasks
        if not job.spec.gang:
            return [[t] for t in waiting]
        if not job.grouped:
            return [waiting]
        groups: dict[str | None, list[tuple[RoleSpec, int]]] = {}
        for task in waiting:
            groups.setdefault(task[0].affinity_group, []).append(task)
        return list(groups.values())

    def _try(
        self,
        job: Job,
        out: list[Decision],
        since: tuple[int, bool] | None = None,
        cls: JobClass | None = None,
    ) -> None:
        for unit in self._units(job):
            plan = self._find(job, unit, since, cls)
            since = None
            if plan is None or not self._commit(job, plan, out):
                return

    def _find(
        self,
        job: Job,
        unit: list[tuple[RoleSpec, int]],
        since: tuple[int, bool] | None = None,
        cls: JobClass | None = None,
    ) -> Plan | None:
        chains = self._chains(job, [r for r, _ in unit])
        whole_job = unit is job.tasks  # nothing placed yet: the usual case, cached
        needs = job.needs if whole_job else None
        if needs is None or any(c not in needs for c in chains):
            needs = self._whole_needs(job, chains) if whole_job else None
            if needs is None:
                needs = {chain: self._needs(unit, chain, job.vc) for chain in chains}
            if whole_job:
                job.needs = needs
        if job.opportunistic:
            for chain in chains:
                plan = self.placer.opportunistic(chain, needs[chain])
                if plan is not None:
                    return plan
            return None
        vc = self.vcs.by_name.get(job.vc)
        if vc is None or not chains:
            return None
        slots = self._slot_count(job, vc, chains, needs, unit, cls)
        if (
            slots is not None
            and cls is not None
            and since is not None
            and cls.slots is not None
            and cls.slots_tick == since[0]
        ):
            # Slots on the VC's nodes now, plus what binding its free cells could add.
            places = self._slots_after(vc, cls, since[0], slots) + self._bindable(
                vc, slots.chain, slots.leaves
            )
            if places < len(unit):
                return None  # not enough places yet for the gang: no search needed
        plan = self._search(job, vc, chains, needs, unit, since)
        if slots is not None and cls is not None:
            if plan is None:
                size, prio = slots.leaves, slots.priority
                cls.slots = {
                    n: c for n in vc.nodes[slots.chain] if (c := self._slots(n, size, prio))
                }
                cls.slots_tick = self._tick
            else:
                cls.slots = None
        return plan

    def _slot_count(
        self,
        job: Job,
        vc: VC,
        chains: list[str],
        needs: dict[str, list[TaskNeed]],
        unit: list[tuple[RoleSpec, int]],
        cls: JobClass | None,
    ) -> SlotShape | None:
        """The gang's slot shape when a gang's chances can be counted in task slots
        per whole node: one chain, tasks of one size, no pinned or part-node cells."""
        if cls is None or len(unit) < 2 or len(chains) != 1 or job.pinned:
            return None
        chain = chains[0]
        sizes = {t.leaves for t in needs[chain]}
        if len(sizes) != 1 or vc.parts.get(chain) or chain not in vc.nodes:
            return None
        return SlotShape(chain, sizes.pop(), job.prio)

    @staticmethod
    def _slots(node: Cell, leaves: int, priority: int) -> int:
        """How many tasks of ``leaves`` GPUs fit on ``node`` for a job of ``priority``."""
        usable = node.free
        for p, n in node.prio_count.items():
            if p < priority:
                usable += n
        return usable // leaves

    def _slots_after(self, vc: VC, cls: JobClass, since: int, slots: SlotShape) -> int:
        """The gang's task slots now, from those at its last failure and the nodes that
        changed since (remembered for the next time)."""
        assert cls.slots is not None
        chain, size, prio = slots.chain, slots.leaves, slots.priority
        mine = vc.nodes.get(chain, {})
        for node in self._grown_since(vc, since):
            if node.chain != chain:
                continue
            count = self._slots(node, size, prio) if node in mine else 0
            if count:
                cls.slots[node] = count
            else:
                cls.slots.pop(node, None)
        cls.slots_tick = self._tick
        return sum(cls.slots.values())

    def _bindable(self, vc: VC, chain: str, leaves: int) -> int:
        """At most how many more tasks of ``leaves`` GPUs binding the VC's free cells could
        place: its unbound node cells, as far as healthy free nodes exist (optimistic)."""
        info = self.tree.chains[chain]
        unbound = vc.unbound.get(chain, {})
        if any(n > 0 and lvl < info.node_level for lvl, n in unbound.items()):
            return UNBOUNDED  # cells smaller than a node: do not guess
        nodes = sum(n * (info.level_leaves[lvl] // info.node_leaves) for lvl, n in unbound.items())
        if not nodes:
            return 0
        pool = 0
        for level, cells in self.tree.free_list[chain].items():
            if level >= info.node_level:
                pool += sum((c.leaves - c.bad) // info.node_leaves for c in cells.values())
        return min(nodes, pool) * (info.node_leaves // leaves)

    def _search(
        self,
        job: Job,
        vc: VC,
        chains: list[str],
        needs: dict[str, list[TaskNeed]],
        unit: list[tuple[RoleSpec, int]],
        since: tuple[int, bool] | None,
    ) -> Plan | None:
        least = min(sum(t.leaves for t in n) for n in needs.values())
        room = vc.free_in + vc.unbound_leaves
        lower = [p for p, n in vc.prio_in.items() if n > 0 and p < job.prio]
        # Free GPUs first (binding more of the VC's cells if need be); only then one search
        # that may preempt, lowest priorities first (see Placer._best_node), unless there is
        # nobody to preempt.
        thresholds: list[int | None] = [None]
        if lower or self._oppo_running():
            thresholds.append(max(lower, default=OPPORTUNISTIC))
        for threshold in thresholds:
            if threshold is not None:  # a cheap upper bound first
                room += vc.oppo_in + sum(vc.prio_in[p] for p in lower)
            if room < least:
                continue
            only = None
            if since is not None and len(unit) == 1:
                only = self._grown_since(vc, since[0])
            # Binding failed last time too, unless physical cells were freed since, the unit
            # is a gang (it may have bound some), or the VC binds parts of nodes (which can
            # now combine with GPUs freed beside them).
            bind = since is None or since[1] or len(unit) > 1 or self._binds_parts(vc, chains)
            pin = job.pinned if not job.grouped else _pin([r for r, _ in unit])
            pinned = self.tree.pinned.get(pin) if pin else None
            for chain in chains:
                plan = self.placer.guaranteed(
                    vc, chain, needs[chain], threshold, only, pinned, bind
                )
                if plan is not None:
                    return plan
        return None

    def _binds_parts(self, vc: VC, chains: list[str]) -> bool:
        return any(
            n > 0 and level < self.tree.chains[chain].node_level
            for chain in chains
            for level, n in vc.unbound.get(chain, {}).items()
        )

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

    def _whole_needs(self, job: Job, chains: list[str]) -> dict[str, list[TaskNeed]]:
        """A whole job's task needs per chain, shared by every job with the same roles in the
        same VC (they depend on nothing else until the cluster changes); a trace's jobs come
        in a few hundred sizes, and sizing each job afresh was a few percent of a HiveD run."""
        key = (job.spec.roles, job.vc)
        needs = self._needs_cache.get(key)
        if needs is None or any(c not in needs for c in chains):
            if len(self._needs_cache) >= NEEDS_CACHE:
                self._needs_cache.clear()
            needs = {chain: self._needs(job.tasks, chain, job.vc) for chain in chains}
            self._needs_cache[key] = needs
        return needs

    def _needs(
        self, unit: list[tuple[RoleSpec, int]], chain: str, vc: str | None = None
    ) -> list[TaskNeed]:
        leaf = self.tree.chains[chain].leaf_type
        out = []
        role, leaves = None, 0
        for r, i in unit:
            if r is not role:  # a role's tasks come in a row: size each role once
                role, leaves = r, self._leaves(r, leaf, vc)
            out.append(TaskNeed(r.name, i, leaves))
        return out

    def _commit(self, job: Job, plan: Plan, out: list[Decision]) -> bool:
        vc = self.vcs.by_name.get(job.vc) if not job.opportunistic else None
        victims = [self._jobs[v] for v in plan.victims()]
        lazy = [
            v
            for v in victims
            if v.spec.lazy_preemption
            and not v.opportunistic
            and (not v.downgraded or any(k not in v.downgraded for k in _hit(v, plan)))
        ]
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
            reason = self._preempt_reason(victim, job)
            part = self._unit_of(victim, _hit(victim, plan)) if self._splits(victim) else None
            if part is None:
                out.append(Preempt(victim.job_id, job.job_id, reason))
                self._vacate_job(victim, touched)
            else:
                stopped = self._stop_tasks(victim, part, touched)
                out.append(StopTasks(victim.job_id, stopped, reason, job.job_id))
            self._enqueue(victim)
        started = []
        for task, _, leaves in plan.placed:
            for leaf in leaves:
                self._occupy(leaf, job)
            placement = _placement(task.role, task.index, leaves)
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
        units = {v.job_id: self._unit_of(v, _hit(v, plan)) for v in lazy}
        self.placer.undo(vc, plan)
        touched: set[Cell] = set()
        for victim in lazy:
            part = units[victim.job_id]
            keys = set(victim.placed) if part is None else part
            for key in keys:
                for leaf in victim.placed[key][1]:
                    self._vacate(leaf, touched)
            if part is None:
                victim.prio = OPPORTUNISTIC
                victim.downgraded_by = job.job_id
            for key in keys:
                if part is not None:
                    victim.downgraded[key] = job.job_id
                for leaf in victim.placed[key][1]:
                    self._occupy(leaf, victim, OPPORTUNISTIC)
        self._settle(touched)
        unit = [
            (r, i)
            for r, i in job.waiting_tasks
            if (r.name, i) in {(t.role, t.index) for t, _, _ in plan.placed}
        ]
        again = self._find(job, unit)
        for victim in lazy:
            part = units[victim.job_id]
            hit = _hit(victim, again) if again is not None else set()
            if hit:
                hit = self._unit_of(victim, hit) or set(victim.placed)
            kept = (set(victim.placed) if part is None else part) - hit
            if not kept:
                continue  # preempted after all
            tasks = () if part is None else tuple(victim.placed[k][0] for k in sorted(kept))
            out.append(
                Downgrade(
                    victim.job_id,
                    job.job_id,
                    f"downgraded to opportunistic by {job.spec.name} "
                    f"(priority {job.spec.priority} > {victim.spec.priority}) in {vc.name}",
                    tasks,
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
        if node in self.cpu.nodes:
            self.cpu.nodes[node].healthy = healthy
        if healthy:
            self.down_reasons.pop(node, None)
        else:
            self.down_reasons[node] = reason
            hit = sorted(
                {leaf.job for cell in cells for leaf in cell.leaf_cells() if leaf.job}
                | {j.job_id for j in self._jobs.values() if j.cpu_only and _on(j, node)},
                key=lambda j: self._jobs[j].seq,
            )
            for job_id in hit:
                job = self._jobs[job_id]
                why = node_down(node, reason)
                there = {k for k, (p, _) in job.placed.items() if p.node == node}
                part = self._unit_of(job, there)
                if part is None:
                    out.append(Stop(job_id, why))
                    self._vacate_job(job, touched)
                else:
                    out.append(StopTasks(job_id, self._stop_tasks(job, part, touched), why))
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
        cpu_waiting = self._cpu_waiting
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
                job.downgraded.clear()
                out.append(Stop(job.job_id, reconfigured(str(err))))
        for queue in old_queues.values():
            for _, _, job_id in queue.order:
                queued = self._jobs.get(job_id)
                if queued is not None and queued.waiting_tasks and queued.queued_key is None:
                    self._enqueue(queued)
        for _, _, job_id in cpu_waiting:
            if job_id in self._jobs:
                self._enqueue(self._jobs[job_id])
        for job in running:
            if job.waiting_tasks and job.queued_key is None:
                self._enqueue(job)

    def _adopt(self, event: Adopt, out: list[Decision]) -> None:
        if event.job_id in self._jobs:
            raise AdoptRefused(f"job {event.job_id} is already known")
        job = self._new_job(event.job_id, event.spec)
        if event.opportunistic:
            job.prio = OPPORTUNISTIC
        job.downgraded = {(role, index): by for role, index, by in event.downgraded}
        try:
            self._place_exactly(job, event.tasks)
        except AdoptRefused:
            del self._jobs[event.job_id]
            raise
        if job.waiting_tasks:
            self._enqueue(job)

    def _place_exactly(self, job: Job, tasks: tuple[TaskPlacement, ...]) -> None:
        """Put a running job back on exactly these GPUs, binding its VC's cells around them."""
        if job.cpu_only:
            self._place_cpu_exactly(job, tasks)
            return
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
            for task, leaves in wanted:
                if (task.role, task.index) in job.downgraded:
                    continue  # runs opportunistic, outside its VC's cells (lazy preemption)
                for leaf in leaves:
                    if not self._own(vc, leaf, bound):
                        for cell in reversed(bound):
                            vc.count_unbound(cell)
                            self.vcs.unbind(vc, cell)
                        raise AdoptRefused(
                            f"GPU {leaf.leaf_id} lies outside {vc.name}'s free cells"
                        )
        for task, leaves in wanted:
            prio = OPPORTUNISTIC if (task.role, task.index) in job.downgraded else None
            for leaf in leaves:
                self._occupy(leaf, job, prio)
            job.placed[(task.role, task.index)] = (
                _placement(task.role, task.index, leaves),
                leaves,
            )

    def _place_cpu_exactly(self, job: Job, tasks: tuple[TaskPlacement, ...]) -> None:
        """A CPU-only job back on its nodes, holding their CPUs and memory again."""
        for task in tasks:
            room = self.cpu.nodes.get(task.node)
            if room is None:
                raise AdoptRefused(f"node {task.node} does not exist in this cluster")
            if not room.healthy:
                raise AdoptRefused(f"node {task.node} is down")
        for task in tasks:
            self.cpu.hold(task.node, self._role(job, task.role))
            job.placed[(task.role, task.index)] = (replace(task, gpus=(), cells=()), [])

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
                self._bound(vc, cell)
                bound.append(cell)
                return True
        return False

    # ---- views -------------------------------------------------------------------------------

    def job(self, job_id: str) -> JobView | None:
        job = self._jobs.get(job_id)
        return None if job is None else self._view(job)

    def jobs(self) -> list[JobView]:
        listed = listing_order(
            (j for j in self._jobs.values() if j.placed),
            (j for j in self._jobs.values() if not j.placed),
            seq=lambda j: j.seq,
            wait_key=lambda j: (-j.spec.priority, j.seq, j.spec.name),
        )
        return [self._view(j) for j in listed]

    def _view(self, job: Job) -> JobView:
        return job_view(self, job)

    def cluster(self) -> ClusterView:
        return ClusterView(node_views(self), self.vc_views(), self.config.virtual)

    def vc_views(self) -> dict[str, VCView]:
        return vc_views(self)

    def cells(self) -> dict[str, Any]:
        """Bindings and free cells, for replay's JSON (``views.vc_cells``, ``free_list``)."""
        return {"vcs": vc_cells(self), "free_list": free_list(self)}

    def next_wakeup(self) -> float | None:
        return None


def _pin(roles: list[RoleSpec]) -> str | None:
    return next((r.pinned_cell for r in roles if r.pinned_cell), None)


def _hit(job: Job, plan: Plan) -> set[tuple[str, int]]:
    """The tasks of ``job`` holding leaf cells that ``plan`` takes."""
    return {
        key for key, (_, leaves) in job.placed.items() if any(id(x) in plan.taken for x in leaves)
    }


def _on(job: Job, node: str) -> bool:
    return any(p.node == node for p, _ in job.placed.values())


def _gpu(leaf: Cell) -> int:
    return leaf.gpu or 0


def _placement(role: str, index: int, leaves: list[Cell]) -> TaskPlacement:
    """Where a task runs, GPUs in index order, with their leaf ids."""
    if len(leaves) == 1:  # the simulator's one-GPU tasks: no sorting, no generators
        leaf = leaves[0]
        return TaskPlacement(role, index, leaf.node or "", (leaf.gpu or 0,), (leaf.leaf_id,))
    ordered = sorted(leaves, key=_gpu)
    node = ordered[0].node if ordered else ""
    return TaskPlacement(
        role,
        index,
        node or "",
        tuple([leaf.gpu or 0 for leaf in ordered]),
        tuple([leaf.leaf_id for leaf in ordered]),
    )
