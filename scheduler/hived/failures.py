"""The record of why a search for a job's cells failed (``shortfall``), from the search itself.

The search (``attempt.Attempt.find``) leaves it only when it fails, and the job's class keeps
it; the why-text (``why``) only formats it. What the search found is taken as it is (no region holds
one task; a gang's task slots per node), and the rest is counted with the search's own
definitions: the regions a task may lie in and the leaves it may take (``Placer.room``, with
``placement.usable``), and the cells it could bind (``Placer.bindable``), so the text cannot
disagree with the search. A record stays true while no cell changed hands (``CellTree.moves``);
a job whose class no search tried since (a cheap bound or a failed gang's slot count blocked
it, a job ahead of it in its class was tried, or none yet) is counted the same way when asked.

Some jobs can never start as their VC's cells are (a gang larger than any chain's share, or
tasks that do not fit in its cells one by one): judged from the quota alone, before counting.

``Failures`` is a part the scheduler holds (``self.failures``, given to ``attempt.Attempt``),
not a base it inherits; the records it builds are kept by the classes (``JobClass.failed``).
"""

from __future__ import annotations

from collections.abc import Sequence

from labhive.scheduler.core.jobs import RoleSpec
from labhive.scheduler.hived.base import HivedBase
from labhive.scheduler.hived.job import Job
from labhive.scheduler.hived.placement import victim_threshold
from labhive.scheduler.hived.queue import JobClass
from labhive.scheduler.hived.shortfall import (
    ChainRoom,
    Failed,
    Failure,
    GangTooLarge,
    NoCells,
    NoRoom,
    NoVC,
    TaskTooLarge,
    TooManyTasks,
    max_cell,
    task_slots,
    unit_level,
)
from labhive.scheduler.hived.sizing import pin_of
from labhive.scheduler.hived.vc import VC


class Failures:
    """Builds the record of a failed search; reads what the search reads."""

    def __init__(self, sched: HivedBase) -> None:
        #: The scheduler whose cells, VCs, classes and sizing (``sizing``) a record counts
        #: with; a record's own state is the class's (``JobClass.failed``, ``judged``,
        #: ``never``), made anew with the classes.
        self._sched = sched

    def record(
        self,
        job: Job,
        cls: JobClass | None,
        unit: list[tuple[RoleSpec, int]],
        fits: int | None = None,
    ) -> None:
        """Keep, on the class whose head ``job`` is, why the search for ``unit`` failed (the
        search for the head of no class, a lazy preemption's second look, keeps nothing).

        What the search found is not counted again: a search for one task (of a job of one
        role) that failed found that no region holds one and no cell can be bound for one;
        a gang counted in slots per node (``SlotShape``) left ``fits``, the tasks the VC's
        nodes hold. The quota's verdict (no VC, no cells, never) is judged once per class of
        jobs of one role with nothing placed, whose key then says all it depends on."""
        if cls is None:
            return
        s = self._sched
        one_role = len(job.spec.roles) == 1 and not job.placed
        if one_role and cls.judged and cls.never is not None:
            record: Failure = cls.never
        else:
            one = len(unit) == 1 and not job.grouped and len(job.spec.roles) == 1
            record = self.count(job, one_role and cls.judged, 0 if one else fits, probe=not one)
            if one_role and not cls.judged:
                cls.judged = True
                cls.never = None if isinstance(record, NoRoom) else record
        cls.failed = Failed(record, s.tree.moves, job.job_id, len(job.waiting_tasks))

    def failure_of(self, job: Job) -> Failure:
        """Why ``job`` waits: the record of its last failed search while the cells are as
        that search left them, else counted now the same way (its class was not searched
        since, or another job of it was, or none yet)."""
        s = self._sched
        cls = s.queue.classes.get(job.queued_key) if job.queued_key is not None else None
        last = cls.failed if cls is not None else None
        if (
            last is not None
            and last.moves == s.tree.moves
            and last.job_id == job.job_id
            and last.waiting == len(job.waiting_tasks)
        ):
            return last.record
        return self.count(job)

    def count(
        self, job: Job, judged: bool = False, fits: int | None = None, probe: bool = True
    ) -> Failure:
        """``judged``: the quota's verdict is known, and it is not "never". ``fits``: the
        tasks the VC's bound cells (or idle nodes) hold, if a search just found out; not
        ``probe``: it also found that no cell can be bound for one (see ``record``)."""
        s = self._sched
        waiting = job.waiting_tasks
        chains = s.sizing.chains(job, [r for r, _ in waiting])
        vc = s.vcs.by_name.get(job.vc)
        if not job.opportunistic and vc is None:
            return NoVC()
        if not chains:
            return NoCells()
        incremental = not job.spec.gang and len(job.tasks) > 1
        need = 1 if incremental else len(waiting)
        if vc is not None and not job.opportunistic and not judged:
            never = self._never(job, vc, chains)
            if never is not None:
                return never
        roles = job.spec.roles if len(job.spec.roles) == 1 else [r for r, _ in waiting]
        if job.opportunistic or vc is None:
            rooms = [self._idle_room(job, roles, c, fits) for c in chains]
            return NoRoom(need, tuple(rooms))
        lower = [p for p, n in vc.prio_in.items() if n > 0 and p < job.prio]
        threshold = victim_threshold(lower, s.tree.oppo_total > 0)
        pin = job.pinned if not job.grouped else pin_of(roles)
        pinned = s.tree.pinned.get(pin) if pin else None
        rooms = []
        for chain in chains:
            k, level = self._task_size(job, roles, chain)
            usable, unhealthy = s.attempt.placer.room(vc, chain, k, threshold, pinned, fits is None)
            if fits is not None:
                usable = fits
            can = cannot = 0
            if pinned is None:  # a pinned job runs in its pinned cell: nothing to bind
                can, cannot = s.attempt.placer.bindable(vc, chain, k, threshold, probe)
            rooms.append(ChainRoom(chain, k, level, usable + can, unhealthy, cannot))
        return NoRoom(need, tuple(rooms))

    def _idle_room(
        self, job: Job, roles: Sequence[RoleSpec], chain: str, fits: int | None
    ) -> ChainRoom:
        """An opportunistic job's: idle GPUs anywhere, as ``Placer.opportunistic`` finds them."""
        k, level = self._task_size(job, roles, chain)
        idle = fits if fits is not None else sum(n.free // k for n in self._sched.tree.open[chain])
        return ChainRoom(chain, k, level, idle, 0, 0)

    def _task_size(self, job: Job, roles: Sequence[RoleSpec], chain: str) -> tuple[int, int]:
        """The leaves of the job's largest waiting task in ``chain``, and the level whose
        cells name that size."""
        s = self._sched
        info = s.tree.chains[chain]
        k = max(s.sizing.leaves(r, info.leaf_type, job.vc) for r in roles)
        return k, unit_level(info, k)

    # ---- never, as the VC's cells are ------------------------------------------------------

    def _never(self, job: Job, vc: VC, chains: list[str]) -> Failure | None:
        """Accepted but not placeable under the VC's current cells at all."""
        if job.grouped:
            return None  # its affinity groups are placed apart: not judged here
        if not job.spec.gang or len(job.waiting_tasks) < 2:
            return self._never_in_cells(job, vc, chains)
        s = self._sched
        tree = s.tree
        sizes = {
            c: sum(s.sizing.leaves(r, tree.chains[c].leaf_type, job.vc) for r, _ in job.tasks)
            for c in chains
        }
        if any(sizes[c] <= vc.leaves(tree, c) for c in chains):
            return self._never_in_cells(job, vc, chains)
        largest = max(chains, key=lambda c: vc.leaves(tree, c))
        gpus = all(sizes[c] == sum(r.gpu for r, _ in job.tasks) for c in chains)
        return GangTooLarge(
            min(sizes.values()),
            gpus,
            vc.leaves(tree, largest),
            tree.chains[largest].leaf_type,
        )

    def _never_in_cells(self, job: Job, vc: VC, chains: list[str]) -> Failure | None:
        """A task lies inside one of its VC's cells (HiveD): tasks larger than every cell, or
        a gang with more tasks than the cells can hold one by one, never start."""
        if job.pinned:
            return None
        s = self._sched
        waiting = job.waiting_tasks
        best: tuple[int, int, int, str] | None = None  # (slots, size, tasks, chain) if never
        for chain in chains:
            info = s.tree.chains[chain]
            leaves = s.sizing.leaves
            sizes = sorted((leaves(r, info.leaf_type, job.vc) for r, _ in waiting), reverse=True)
            units = sizes[:1] if not job.spec.gang else sizes
            counts = {k: sum(1 for x in units if x >= k) for k in set(units)}
            quota = vc.quota.get(chain, {})
            short = [(task_slots(info, quota, k), k, n) for k, n in counts.items()]
            short = [t for t in short if t[0] < t[2]]
            if not short:
                return None
            slots, k, n = min(short, key=lambda t: (t[0], -t[1]))
            if best is None or slots > best[0]:
                best = (slots, k, n, chain)
        if best is None:
            return None
        slots, k, n, chain = best
        gpus = k == max(r.gpu for r, _ in waiting)
        if slots == 0:
            return TaskTooLarge(k, gpus, max_cell(s.tree.chains[chain], vc.quota.get(chain, {})))
        return TooManyTasks(n, k, gpus, slots)
