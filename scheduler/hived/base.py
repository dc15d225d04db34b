"""What every part of HiveD's scheduler shares: its state, built from a config, and the
bookkeeping that keeps cells' and VCs' counters right as jobs take and free leaf cells.

``core.HivedScheduler`` holds its parts, each an object with its own state in its own module,
which reach this state and call this bookkeeping through the scheduler they are given:
``queue`` (``queueing.ClassQueue``: classes of waiting jobs, the scheduling pass), ``turns``
(whose turn it is inside a VC), ``sizing`` (what a job asks for), ``attempt`` (the search for a
job's cells, unit by unit, with ``failures``, the record of why one failed), ``health`` (nodes
going down and up), ``adoption`` (putting running jobs back on exactly their cells, after a
restart or a new config) and ``preemption`` (committing a plan: preemption, lazy preemption).
``shares`` (GPU shares: the book of who shares which GPU, and the pass of waiting shares).
``HivedBase`` declares the state they share and the parts they call, typed by ``parts``'
protocols (a part's module imports this one, so this one cannot import it back); it keeps no
stub for one part to call another, and no part is a base of the scheduler."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from itertools import repeat

from labhive.scheduler.core.config import ClusterConfig
from labhive.scheduler.core.jobs import JobSpec, RoleSpec
from labhive.scheduler.core.model import TaskPlacement
from labhive.scheduler.hived.admission import Admission
from labhive.scheduler.hived.cells import Cell, CellTree
from labhive.scheduler.hived.cpu_pool import CpuPool, cpu_only
from labhive.scheduler.hived.fairshare import Account, Ledger
from labhive.scheduler.hived.job import Job
from labhive.scheduler.hived.parts import Committing, Placing, Queueing, Sharing, TurnTaking
from labhive.scheduler.hived.placement import Plan
from labhive.scheduler.hived.sizing import Sizing
from labhive.scheduler.hived.vc import VC, VCs

#: More than any cluster's GPUs and above any job's priority (priorities are small ints):
#: a need no chain can meet, a bound that does not limit, a freed level every job gains from.
UNBOUNDED = 1 << 30
#: GPUs a job's end freed at one priority in one VC, not counted yet: (VC, priority, how
#: many of them healthy, how many) (``HivedBase._vacate_run``).
Freed = tuple[VC, int, int, int]
#: Below any job's priority: a VC no release has made dirty yet in this pass.
NOT_DIRTY = -UNBOUNDED


class HivedBase:
    """The scheduler's state and its counters' bookkeeping, shared by every part."""

    #: Whether a job's unit of preemption may be smaller than the job (``core.HivedScheduler``).
    partial_stops: bool

    # Jobs (the class queue, ``queue``, keeps the waiting ones in order).
    _jobs: dict[str, Job]
    _seq: int
    # What the bookkeeping below tells the class queue: what capacity grew since its last
    # pass (it reads and clears them: ``queueing.ClassQueue._collect_ready``).
    _oppo_epoch: int  # counts GPUs freed anywhere: opportunistic classes' stamp
    _dirty_vcs: dict[str, int]  # VC -> the highest priority that may now fit
    _dirty_oppo: bool  # GPUs were freed somewhere: opportunistic classes may fit
    _tick: int  # counts freed GPUs, to tell which nodes changed since a failure
    # Per (VC, user), only when the config tells users apart (fair share, caps): who used and
    # holds what. The scheduler's, as the views read it too; ``turns`` decides by it.
    _ledger: Ledger | None

    # Built from the config (``_load``).
    config: ClusterConfig
    tree: CellTree
    vcs: VCs
    cpu: CpuPool
    _checked: dict[Hashable, str | None]
    _passed: JobSpec | None  # the spec that passed ``check`` last
    admission: Admission  # what ``check`` reads: numbers of the config, not of the cells

    #: What a job asks for: leaf cells per task, chains, units (``sizing.Sizing``), made
    #: anew per config here (``_load``).
    sizing: Sizing

    # The parts other parts call (``core.HivedScheduler`` makes them).
    #: The waiting jobs, their classes and the scheduling pass (``queueing.ClassQueue``).
    queue: Queueing
    #: Whose turn it is inside a VC: fair share, caps, the reservation (``turns.Turns``).
    turns: TurnTaking
    #: The search for a job's cells, each plan found carried out (``attempt.Attempt``).
    attempt: Placing
    #: A plan carried out: victims preempted or downgraded, the job started (``preempt``).
    preemption: Committing
    #: GPU shares: who shares which GPU, the waiting shares (``shares.Shares``), made anew per
    #: config here (``_load``).
    shares: Sharing

    def _load(self, config: ClusterConfig) -> None:
        """Build the state a config determines (again on ``Reconfigure``: ``adopt``)."""
        self.config = config
        self.tree = CellTree(config)
        self.vcs = VCs(config, self.tree)
        self.cpu = CpuPool(config)
        self.attempt.load(self.tree, self.vcs)  # (the search's own: ``Attempt.placer``)
        self.sizing = Sizing(config, self.tree, self.vcs)  # (its caches are the config's)
        self._checked = {}
        self._passed = None
        self.admission = Admission.of(config)
        self.shares = self.shares.anew()  # (running shares are restored onto the new cells)
        for vc in self.vcs.by_name.values():
            vc.free_in = sum(c.free for cells in vc.bound.values() for c in cells.values())
        self.queue.load(config)
        self.turns.load()  # (what it filed of classes: they are made anew on a new config)
        if not config.per_user:
            self._ledger = None
        elif self._ledger is not None:
            self._ledger.configure(config)
        else:  # (on a Reconfigure, the running jobs' GPUs count from now)
            self._ledger = Ledger(config)
            for job in self._jobs.values():
                if job.placed:
                    gpus = {
                        k: job.share / 1000 if job.share else len(p.gpus)
                        for k, (p, _) in job.placed.items()
                    }
                    self._ledger.started(job.job_id, account(job), gpus)

    def _new_job(self, job_id: str, spec: JobSpec) -> Job:
        self._seq += 1
        roles = spec.roles
        if len(roles) == 1:  # the usual job: one role, so one affinity group
            role = roles[0]
            tasks = list(zip(repeat(role), range(role.instances)))  # [(role, i), ...], in C
            job = Job(job_id, spec, self._seq, spec.priority, tasks, spec.vc)
            job.pinned = role.pinned_cell or None
            job.cpu_only = not self.config.skus and role.gpu == 0  # (``cpu_only``)
            job.share = role.share_milli
            self._jobs[job_id] = job
            return job
        tasks = [(r, i) for r in roles for i in range(r.instances)]
        job = Job(job_id, spec, self._seq, spec.priority, tasks, spec.vc)
        job.pinned = next((r.pinned_cell for r in roles if r.pinned_cell), None)
        job.cpu_only = cpu_only(self.config, spec)
        job.grouped = spec.gang and len({r.affinity_group for r in roles}) > 1
        self._jobs[job_id] = job
        return job

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

    def _occupy_task(self, leaves: list[Cell], node: Cell, job: Job) -> None:
        """``_occupy`` of each of the ``leaves`` of a job's tasks on ``node`` in one step: when the
        node lies in one of a VC's cells so do they all (a VC binds no cell inside another),
        so the VC is looked up once and the counters of the node and above change once."""
        owner = node.owner()
        if owner is None or not leaves:  # parts of a node, or no VC's: leaf by leaf
            for leaf in leaves:
                self._occupy(leaf, job)
            return
        prio = job.prio
        vc = self.vcs.by_name[owner.vc or ""]
        healthy = self.tree.use_run(leaves, node, job.job_id, prio)
        vc.occupy_run(healthy, prio, len(leaves))
        if leaves[0].node_cell is not None and node.free == 0:
            vc.open.get(node.chain, {}).pop(node, None)

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

    def _vacate_run(
        self, run: list[Cell], owner: Cell, touched: set[Cell], pending: Freed | None
    ) -> Freed | None:
        """``_vacate`` of each leaf of ``run`` (on one node, in the VC cell ``owner``: a job's
        tasks on a node come in a row), with what they share done once: the node's tick and
        place in ``grown``, its place in the VC's open nodes, the epoch of opportunistic
        chances all end as leaf by leaf would leave them (nothing else touches them between).

        The VC's counters and bump for a run of one priority are not done here but returned,
        added to ``pending`` (what earlier runs of the job freed) while the VC and priority
        are the same: a job on many nodes counts them once (``_count_freed``). Nothing reads
        those counters, ``freed`` or the dirty VCs while a job's cells are freed; a change of
        VC or priority counts the pending first, so VCs turn dirty in the same order."""
        node = run[0].node_cell
        assert node is not None
        vc = self.vcs.by_name[owner.vc or ""]
        n = len(run)
        # ``_grew`` inline: leaf by leaf, the node's tick would be the run's last.
        tick = self._tick = self._tick + n
        grown = vc.grown
        grown.pop(node, None)
        grown[node] = tick
        prio = run[0].prio
        same = True
        if n > 1:
            for leaf in run:
                if leaf.prio != prio:
                    same = False
                    break
        # The tree's loop counts the healthy leaves; releasing first changes nothing the VC's
        # counters read (a leaf keeps its ``prio`` and ``bad``), and nothing reads between.
        healthy = self.tree.release_run(run, node)
        if same:  # the usual run: one job's GPUs at its one priority
            if pending is None:
                pending = (vc, prio, healthy, n)
            elif pending[0] is vc and pending[1] == prio:
                pending = (vc, prio, pending[2] + healthy, pending[3] + n)
            else:
                self._count_freed(pending)
                pending = (vc, prio, healthy, n)
        else:
            if pending is not None:
                self._count_freed(pending)
                pending = None
            for leaf in run:
                vc.vacate(leaf.bad == 0, leaf.prio)
            for leaf in run:
                self._bump(vc, leaf.prio)
        if owner.guaranteed <= 0:
            # Only a cell no guaranteed job uses any more may be unbound (``_settle`` passes
            # the others by), and one that still has some can only lose them in a later
            # release, which adds it then.
            touched.add(owner)
        # ``vc.refresh_open(node)`` inline. A release only adds free GPUs: a node with none
        # now had none before, so it is not open (``VC.check``) and there is nothing to drop.
        # The node is one of the VC's whole nodes (``VC.nodes``) exactly when its VC cell is
        # the node or above it (not a part of it) and not pinned (``VC.add_cell``, the only
        # way in, is not asked for those), and ``add_cell`` made its chain's ``open`` then.
        if node.free > 0 and owner.node_cell is None and not owner.pinned:
            vc.open[node.chain][node] = None
        self._oppo_epoch += n
        self._dirty_oppo = True  # (``_bump_oppo``, its last step, inline)
        return pending

    def _count_freed(self, freed: Freed) -> None:
        """The VC's counters and bump for GPUs freed at one priority (``_vacate_run``)."""
        vc, prio, healthy, n = freed
        vc.vacate_run(healthy, prio, n)
        self._bump(vc, prio, n)

    def _vacate_job(self, job: Job, touched: set[Cell] | None = None, forget: bool = False) -> None:
        """Free the job's cells. ``forget``: the job is being removed, so its fields are left
        as they are (nobody reads a removed job's record again)."""
        if job.cpu_only:
            for placement, _ in job.placed.values():
                self.cpu.release(placement.node, self._role(job, placement.role))
            job.placed.clear()
            return
        if job.share and self.shares.book.keeps_gpu(job.job_id):  # others share its GPU on
            job.placed.clear()
            job.done.clear()
            return
        settle = touched is None
        touched = set() if touched is None else touched
        run: list[Cell] = []  # consecutive leaves on one node, in one of a VC's cells
        owner: Cell | None = None
        pending: Freed | None = None  # what runs freed, not counted yet (``_vacate_run``)
        for _, leaves in job.placed.values():
            node = leaves[0].node_cell if leaves else None
            # (``owner`` inline for the usual node, one the VC bound itself)
            mine = None if node is None else node if node.vc is not None else node.owner()
            if mine is not None:
                # The task's node lies in a VC's cell, so do all its leaves (a VC binds no
                # cell inside another): one owner for the task, not a walk up per GPU.
                if run and owner is not None:
                    if mine is owner and node is run[0].node_cell:
                        run = run + leaves  # (a new list: ``leaves`` is the job's own)
                        continue
                    pending = self._vacate_run(run, owner, touched, pending)
                owner = mine
                run = leaves  # read, never changed: no copy for the usual one-task run
                continue
            for leaf in leaves:
                mine = leaf.owner()
                if (
                    run
                    and owner is not None
                    and (mine is not owner or leaf.node_cell is not run[0].node_cell)
                ):
                    pending = self._vacate_run(run, owner, touched, pending)
                    run = []
                if mine is None or leaf.node_cell is None:
                    if pending is not None:  # (counted before what ``_vacate`` bumps)
                        self._count_freed(pending)
                        pending = None
                    self._vacate(leaf, touched)
                    continue
                owner = mine
                run = [*run, leaf]  # (a new list: ``run`` may be a task's own)
        if run and owner is not None:
            pending = self._vacate_run(run, owner, touched, pending)
        if pending is not None:  # (inline ``_count_freed``: most jobs free one run)
            vc, prio, healthy, n = pending
            vc.vacate_run(healthy, prio, n)
            self._bump(vc, prio, n)
        if not forget:
            job.placed.clear()
            job.done.clear()  # the attempt is over: every task runs again in the next
            job.prio = job.spec.priority
            job.downgraded_by = None
            job.downgraded.clear()
        if settle and touched:  # (most often none: see ``_vacate_run``)
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
            if job.share and self.shares.book.keeps_gpu(job.job_id):
                continue  # others share its GPU on
            for leaf in leaves:
                self._vacate(leaf, touched)
        return tuple(stopped)

    def _settle(self, touched: set[Cell]) -> None:
        """Unbind the VC cells no guaranteed job uses any more (lazy binding, both ways)."""
        cells: Iterable[Cell] = touched
        if len(touched) > 1:
            # Only the cells to unbind, in order: unbinding one changes none of the others'
            # ``vc``, ``pinned`` or ``guaranteed`` (touched cells are VC cells, none inside
            # another), so picking them first picks the same; most often none is left to sort.
            cells = [c for c in touched if c.guaranteed <= 0 and c.vc is not None and not c.pinned]
            if len(cells) > 1:
                cells.sort(key=_order)
        for cell in cells:
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

    def _bump(self, vc: VC, freed: int | None = None, times: int = 1) -> None:
        """The VC's capacity may have grown: for every job when ``freed`` is None, else only
        for jobs of priority <= ``freed`` (a job could already preempt lower ones); ``times``
        such bumps at once (``freed`` GPUs of one priority)."""
        vc.version += times
        if freed is None:
            vc.epoch += times
            level = UNBOUNDED
        else:
            vc.freed[freed] = vc.freed.get(freed, 0) + times
            level = freed
        if self._dirty_vcs.get(vc.name, NOT_DIRTY) < level:
            self._dirty_vcs[vc.name] = level

    def _bump_oppo(self) -> None:
        self._oppo_epoch += 1
        self._dirty_oppo = True

    def _grown_since(self, vc: VC, tick: int) -> set[Cell]:
        """The VC's nodes where GPUs were freed after ``tick`` (newest last in ``grown``)."""
        out = set()
        for node in reversed(vc.grown):
            if vc.grown[node] <= tick:
                break
            out.add(node)
        return out

    @staticmethod
    def _role(job: Job, name: str) -> RoleSpec:
        return next(r for r in job.spec.roles if r.name == name)


def account(job: Job) -> Account:
    """Whose use a job counts to: its VC and its user ("" when the spec names none)."""
    return (job.vc, job.spec.user or "")


def _order(cell: Cell) -> int:
    return cell.order


def _gpu(leaf: Cell) -> int:
    return leaf.gpu or 0


def task_placement(role: str, index: int, leaves: list[Cell]) -> TaskPlacement:
    """Where a task runs, GPUs in index order, with their leaf ids."""
    if len(leaves) == 1:  # the simulator's one-GPU tasks: made once per leaf, role and index
        leaf = leaves[0]
        placement = leaf.placements.get((role, index))
        if placement is None:
            placement = TaskPlacement(
                role, index, leaf.node or "", (leaf.gpu or 0,), (leaf.leaf_id,)
            )
            leaf.placements[(role, index)] = placement
        return placement
    ordered = sorted(leaves, key=_gpu)
    node = ordered[0].node if ordered else ""
    return TaskPlacement(
        role,
        index,
        node or "",
        tuple([leaf.gpu or 0 for leaf in ordered]),
        tuple([leaf.leaf_id for leaf in ordered]),
    )
