"""One attempt to place a waiting job: the search for leaf cells for each of its units, each
plan found carried out before the next unit is searched.

Guaranteed jobs search their VC's cells, free GPUs first and then once more allowing preemption;
opportunistic jobs search any idle GPU (``placement.Placer`` does the topology-aware part). A gang
that failed before is first counted in task slots per node (``SlotShape``): when the nodes changed
since its failure plus what binding could add still hold too few slots, no search runs. A search
that fails leaves its record with ``failures.Failures``.

``Attempt`` is a part ``core.HivedScheduler`` holds (``self.attempt``), not a base it inherits:
the queue (``queueing``), GPU shares (``shares``) and lazy preemption (``preempt``) call it
through ``parts.Placing``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from labhive.scheduler.core.jobs import RoleSpec
from labhive.scheduler.core.model import Decision
from labhive.scheduler.hived.base import UNBOUNDED, HivedBase
from labhive.scheduler.hived.cells import Cell, CellTree
from labhive.scheduler.hived.failures import Failures
from labhive.scheduler.hived.job import Job
from labhive.scheduler.hived.placement import (
    Placer,
    Plan,
    TaskNeeds,
    Threshold,
    usable_on,
    victim_threshold,
)
from labhive.scheduler.hived.queue import JobClass
from labhive.scheduler.hived.sizing import covers, pin_of
from labhive.scheduler.hived.vc import VC, VCs


@dataclass(frozen=True, slots=True)
class SlotShape:
    """A gang whose chances count in task slots per whole node: its one chain, the GPUs of
    each (equal) task, and its priority (it may use GPUs of lower-priority jobs)."""

    chain: str
    leaves: int
    priority: int


@dataclass(slots=True)
class Search:
    """What one attempt searches for: a unit of a guaranteed job (the whole job, a task of an
    incremental one, or an affinity group), its VC, the chains it may run in and the unit's
    task needs in each."""

    job: Job
    vc: VC
    chains: list[str]
    needs: dict[str, TaskNeeds]
    unit: list[tuple[RoleSpec, int]]


#: Carries a plan out: preempts or downgrades its victims, starts the job; False when lazy
#: preemption's second search found no room after all (``preempt.Preemption.commit``).
Commit = Callable[[Job, Plan, list[Decision]], bool]


class Attempt:
    """The search for a job's cells, unit by unit, and the pruning that spares a search bound
    to fail.

    Its own state is the topology-aware search over the current config's cells (``placer``,
    made anew with them by ``load``); the cells, VCs and classes it reads, and the bindings a
    search makes in the VCs, are the scheduler's. Per class of jobs, what a failed search
    leaves for the next is kept on the class: its slot count (``JobClass.slots``, taken at
    ``slots_tick``) and its failure record (``JobClass.failed``, by ``failures``)."""

    def __init__(self, sched: HivedBase, commit: Commit, failures: Failures) -> None:
        #: The scheduler whose state a search reads: its cells, VCs, classes and the sizing
        #: caches (``sizing``), the clock of freed GPUs (``_tick``) and the ledger's caps.
        self._sched = sched
        #: ``preempt.Preemption.commit``, called directly for each plan found.
        self._commit = commit
        #: Builds and keeps the record of why a search failed (``failures.Failures``).
        self.failures = failures
        #: The search over the cells of the scheduler's config (``placement.Placer``: best
        #: fit, binding, and its scratch, the broken cells a search bound and those to avoid
        #: on the next try, ``_around_broken``). Set by ``load``, which the scheduler's
        #: ``_load`` calls for each config (the first one and every ``Reconfigure``).
        self.placer: Placer

    def load(self, tree: CellTree, vcs: VCs) -> None:
        """Search the cells of a (new) config: ``tree`` and its ``vcs``, as ``_load`` built
        them."""
        self.placer = Placer(tree, vcs)

    def place(
        self,
        job: Job,
        out: list[Decision],
        since: tuple[int, bool] | None = None,
        cls: JobClass | None = None,
    ) -> None:
        """Place what of the job fits now, unit by unit (``sizing.Sizing.units``): each unit's plan
        is carried out before the next is searched, and the first unit that does not fit (or
        would take its user past a cap, ``turns``) ends the attempt. ``since``: the class's
        last failure (the clock of freed GPUs then, and whether physical cells were freed
        since), for the first unit only; ``cls``: the class ``job`` heads, if any."""
        s = self._sched
        ledger = s._ledger
        capped = ledger is not None and bool(ledger.caps)  # (fair share alone: no cap)
        for unit in s.sizing.units(job):
            if capped and s.turns.capped_unit(job, unit):
                return
            plan = self.find(job, unit, since, cls)
            since = None
            if plan is None or not self._commit(job, plan, out):
                return

    def find(
        self,
        job: Job,
        unit: list[tuple[RoleSpec, int]],
        since: tuple[int, bool] | None = None,
        cls: JobClass | None = None,
    ) -> Plan | None:
        """Search cells for one unit of the job: a plan, its bindings made (the caller keeps
        or undoes them), or None with the failure recorded on ``cls``."""
        s = self._sched
        whole_job = unit is job.tasks  # nothing placed yet: the usual case, cached
        roles = job.spec.roles
        # A whole one-role job's tasks are all of its role: no list of a role per task.
        chains = s.sizing.chains(
            job, list(roles) if whole_job and len(roles) == 1 and unit else [r for r, _ in unit]
        )
        needs = job.needs if whole_job else None
        if needs is None or not covers(needs, chains):
            needs = s.sizing.whole_needs(job, chains) if whole_job else None
            if needs is None:
                needs = {chain: s.sizing.needs(unit, chain, job.vc) for chain in chains}
            if whole_job:
                job.needs = needs
        if job.opportunistic:
            for chain in chains:
                plan = self.placer.opportunistic(chain, needs[chain])
                if plan is not None:
                    return plan
            self.failures.record(job, cls, unit)
            return None
        vc = s.vcs.by_name.get(job.vc)
        if vc is None or not chains:
            self.failures.record(job, cls, unit)
            return None
        search = Search(job, vc, chains, needs, unit)
        # (the usual attempt, a new job's or a one-task unit's, has no slot shape: no call)
        slots = self._slot_count(search, cls) if cls is not None and len(unit) > 1 else None
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
                # Not enough places yet for the gang: no search needed, and no record (a
                # view counts, if one is asked for).
                return None
        plan = self._search(search, since)
        fits = None
        if slots is not None and cls is not None:
            if plan is None:
                size, prio = slots.leaves, slots.priority
                cls.slots = {
                    n: c for n in vc.nodes[slots.chain] if (c := self._slots(n, size, prio))
                }
                cls.slots_tick = s._tick
                fits = sum(cls.slots.values())
            else:
                cls.slots = None
        if plan is None:
            self.failures.record(job, cls, unit, fits)
        return plan

    def _slot_count(self, s: Search, cls: JobClass | None) -> SlotShape | None:
        """The gang's slot shape when a gang's chances can be counted in task slots
        per whole node: one chain, tasks of one size, no pinned or part-node cells."""
        if cls is None or len(s.unit) < 2 or len(s.chains) != 1 or s.job.pinned:
            return None
        chain = s.chains[0]
        sizes = {t.leaves for t in s.needs[chain]}
        if len(sizes) != 1 or s.vc.parts.get(chain) or chain not in s.vc.nodes:
            return None
        return SlotShape(chain, sizes.pop(), s.job.prio)

    @staticmethod
    def _slots(node: Cell, leaves: int, priority: int) -> int:
        """How many tasks of ``leaves`` GPUs fit on ``node`` for a job of ``priority`` (it
        may take the GPUs of any lower priority: priorities are whole numbers)."""
        return usable_on(node, priority - 1) // leaves

    def _slots_after(self, vc: VC, cls: JobClass, since: int, slots: SlotShape) -> int:
        """The gang's task slots now, from those at its last failure and the nodes that
        changed since (remembered for the next time)."""
        assert cls.slots is not None
        s = self._sched
        chain, size, prio = slots.chain, slots.leaves, slots.priority
        mine = vc.nodes.get(chain, {})
        for node in s._grown_since(vc, since):
            if node.chain != chain:
                continue
            count = self._slots(node, size, prio) if node in mine else 0
            if count:
                cls.slots[node] = count
            else:
                cls.slots.pop(node, None)
        cls.slots_tick = s._tick
        return sum(cls.slots.values())

    def _bindable(self, vc: VC, chain: str, leaves: int) -> int:
        """At most how many more tasks of ``leaves`` GPUs binding the VC's free cells could
        place: its unbound node cells, as far as healthy free nodes exist (optimistic)."""
        tree = self._sched.tree
        info = tree.chains[chain]
        unbound = vc.unbound.get(chain, {})
        if any(n > 0 and lvl < info.node_level for lvl, n in unbound.items()):
            return UNBOUNDED  # cells smaller than a node: do not guess
        nodes = sum(n * (info.level_leaves[lvl] // info.node_leaves) for lvl, n in unbound.items())
        if not nodes:
            return 0
        pool = 0
        for level, cells in tree.free_list[chain].items():
            if level >= info.node_level:
                pool += sum((c.leaves - c.bad) // info.node_leaves for c in cells.values())
        return min(nodes, pool) * (info.node_leaves // leaves)

    def _search(self, s: Search, since: tuple[int, bool] | None) -> Plan | None:
        sched = self._sched
        job, vc, chains, needs, unit = s.job, s.vc, s.chains, s.needs, s.unit
        least = UNBOUNDED  # the fewest GPUs the unit takes in any chain
        for tasks in needs.values():
            if tasks.leaves < least:
                least = tasks.leaves
        room = vc.free_in + vc.unbound_leaves
        lower = []  # (a loop: a comprehension costs a function object per attempt)
        for p, n in vc.prio_in.items():
            if n > 0 and p < job.prio:
                lower.append(p)
        # Free GPUs first (binding more of the VC's cells if need be); only then one search
        # that may preempt, lowest priorities first (see Placer._best_node), unless there is
        # nobody to preempt (no lower priority in the VC, no opportunistic job anywhere).
        thresholds: list[Threshold] = [None]
        preempting = victim_threshold(lower, sched.tree.oppo_total > 0)
        if preempting is not None:
            thresholds.append(preempting)
        for threshold in thresholds:
            if threshold is not None:  # a cheap upper bound first
                room += vc.oppo_in + sum(vc.prio_in[p] for p in lower)
            if room < least:
                continue
            only = None
            if since is not None and len(unit) == 1:
                only = sched._grown_since(vc, since[0])
            # Binding failed last time too, unless physical cells were freed since, the unit
            # is a gang (it may have bound some), or the VC binds parts of nodes (which can
            # now combine with GPUs freed beside them).
            bind = since is None or since[1] or len(unit) > 1 or self._binds_parts(vc, chains)
            pin = job.pinned if not job.grouped else pin_of([r for r, _ in unit])
            pinned = sched.tree.pinned.get(pin) if pin else None
            for chain in chains:
                if sched.tree.bad_total:
                    plan = self._around_broken(
                        vc, chain, needs[chain], threshold, only, pinned, bind
                    )
                else:
                    plan = self.placer.guaranteed(
                        vc, chain, needs[chain], threshold, only, pinned, bind
                    )
                if plan is not None:
                    return plan
        return None

    def _around_broken(
        self,
        vc: VC,
        chain: str,
        tasks: TaskNeeds,
        threshold: Threshold,
        only: set[Cell] | None,
        pinned: Cell | None,
        bind: bool,
    ) -> Plan | None:
        """``Placer.guaranteed`` while some node is down. A search binds the VC's next cell
        where its first task fits; when the rest of the unit then fails because that cell's
        other nodes are down, HiveD's buddy allocation (which maps the whole placement, and
        backtracks from a cell whose bad nodes it would need) binds another cell, splitting
        a larger healthy one if it must. So the search runs again without each such cell,
        until it succeeds or bound no broken cell (issue 34: a gang waited while a healthy
        rack was idle, and a lower-priority job of its VC then took the broken rack)."""
        placer = self.placer
        placer.broken_tried.clear()
        plan = placer.guaranteed(vc, chain, tasks, threshold, only, pinned, bind)
        if plan is not None or not placer.broken_tried or not bind or pinned is not None:
            return plan
        try:
            while plan is None and placer.broken_tried:
                placer.avoid.update(placer.broken_tried)
                placer.broken_tried.clear()
                plan = placer.guaranteed(vc, chain, tasks, threshold, None, pinned, bind)
        finally:
            placer.avoid.clear()
            placer.broken_tried.clear()
        return plan

    def _binds_parts(self, vc: VC, chains: list[str]) -> bool:
        tree = self._sched.tree
        return any(
            n > 0 and level < tree.chains[chain].node_level
            for chain in chains
            for level, n in vc.unbound.get(chain, {}).items()
        )
