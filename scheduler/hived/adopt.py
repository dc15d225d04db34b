"""Putting running jobs back on exactly the GPUs they hold, binding their VCs' cells around them.

Two events need it: ``Adopt``, by which a restarted driver restores each running job before any
decision, and ``Reconfigure``, which rebuilds the cells from a new config and keeps every running
job where its GPUs still exist (work-preserving; a job that cannot be kept is stopped). A request
that names unknown, down or taken cells, or cells outside the VC's reach, raises ``AdoptRefused``.
"""

from __future__ import annotations

from dataclasses import replace

from labhive.scheduler.core.config import ClusterConfig
from labhive.scheduler.core.jobs import OPPORTUNISTIC
from labhive.scheduler.core.model import Adopt, Decision, Stop, TaskPlacement
from labhive.scheduler.hived.base import HivedBase, task_placement
from labhive.scheduler.hived.cells import Cell
from labhive.scheduler.hived.job import Job
from labhive.scheduler.hived.share_book import ShareMismatch
from labhive.scheduler.hived.vc import VC
from labhive.scheduler.policies.policy_base import reconfigured


class AdoptRefused(ValueError):
    """The cells a driver asks to restore a job onto are unknown, down or taken."""


class Adoption:
    """``Adopt`` and ``Reconfigure``: running jobs restored onto exactly their cells.

    A part ``core.HivedScheduler`` holds (``self.adoption``), not a base it inherits. It keeps
    no state of its own: what it restores is the scheduler's (cells, VCs, queues, the share
    book), changed through the scheduler's bookkeeping (``_load``, ``_occupy``) and its class
    queue (``queue.enqueue``)."""

    def __init__(self, sched: HivedBase) -> None:
        #: The scheduler whose cells, VCs, queues and share book it restores jobs into.
        self._sched = sched

    def reconfigure(self, config: ClusterConfig, out: list[Decision]) -> None:
        """Work-preserving: running jobs keep their GPUs where those still exist."""
        s = self._sched
        running = sorted(
            (j for j in s._jobs.values() if j.placed),
            key=lambda j: (j.prio < 0, -j.prio, j.seq),
        )
        kept = {j.job_id: dict(j.placed) for j in running}
        old_queues = s.queue.queues
        cpu_waiting = s.queue.cpu_waiting
        s.queue.reset()
        s._load(config)
        for job in s._jobs.values():
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
                queued = s._jobs.get(job_id)
                if queued is not None and queued.waiting_tasks and queued.queued_key is None:
                    s.queue.enqueue(queued)
        for _, _, job_id in cpu_waiting:
            if job_id in s._jobs:
                s.queue.enqueue(s._jobs[job_id])
        for job in running:
            if job.waiting_tasks and job.queued_key is None:
                s.queue.enqueue(job)

    def adopt(self, event: Adopt, out: list[Decision]) -> None:
        s = self._sched
        if event.job_id in s._jobs:
            raise AdoptRefused(f"job {event.job_id} is already known")
        job = s._new_job(event.job_id, event.spec)
        if event.opportunistic:
            job.prio = OPPORTUNISTIC
        job.downgraded = {(role, index): by for role, index, by in event.downgraded}
        job.done = set(event.ended)
        try:
            self._place_exactly(job, event.tasks)
        except AdoptRefused:
            del s._jobs[event.job_id]
            raise
        if job.waiting_tasks:
            s.queue.enqueue(job)

    def _place_exactly(self, job: Job, tasks: tuple[TaskPlacement, ...]) -> None:
        """Put a running job back on exactly these GPUs, binding its VC's cells around them."""
        s = self._sched
        if job.cpu_only:
            self._place_cpu_exactly(job, tasks)
            return
        if job.share and self._join_share_exactly(job, tasks):
            return
        wanted = []
        for task in tasks:
            ids = task.cells or tuple(f"{task.node}/{g}" for g in task.gpus)
            leaves = []
            for leaf_id in ids:
                leaf = s.tree.leaf.get(leaf_id)
                if leaf is None:
                    raise AdoptRefused(f"GPU {leaf_id} does not exist in this cluster")
                if leaf.job is not None:
                    raise AdoptRefused(f"GPU {leaf_id} is already used by job {leaf.job}")
                if leaf.bad:
                    raise AdoptRefused(f"GPU {leaf_id} is on a node that is down")
                leaves.append(leaf)
            wanted.append((task, leaves))
        vc = None if job.opportunistic else s.vcs.by_name.get(job.vc)
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
                            s.vcs.unbind(vc, cell)
                        raise AdoptRefused(
                            f"GPU {leaf.leaf_id} lies outside {vc.name}'s free cells"
                        )
        for task, leaves in wanted:
            prio = OPPORTUNISTIC if (task.role, task.index) in job.downgraded else None
            for leaf in leaves:
                s._occupy(leaf, job, prio)
            job.placed[(task.role, task.index)] = (
                task_placement(task.role, task.index, leaves),
                leaves,
            )
            if job.share:  # the first share restored onto its GPU hosts the others
                vc_name = None if job.opportunistic else job.vc
                s.shares.book.open(leaves[0], vc_name, job.prio, job.job_id, job.share)

    def _join_share_exactly(self, job: Job, tasks: tuple[TaskPlacement, ...]) -> bool:
        """A restored share whose GPU already hosts shares joins them (True); False when its
        GPU hosts none yet (it is placed as any job then, and hosts the others)."""
        s = self._sched
        ids = [c for t in tasks for c in (t.cells or tuple(f"{t.node}/{g}" for g in t.gpus))]
        leaf = s.tree.leaf.get(ids[0]) if len(ids) == 1 else None
        if leaf is None:
            return False
        vc = None if job.opportunistic else job.vc
        try:
            joined = s.shares.book.join_exactly(leaf, vc, job.prio, job.job_id, job.share)
        except ShareMismatch as err:
            raise AdoptRefused(str(err)) from None
        if joined:
            (task,) = tasks
            job.placed[(task.role, task.index)] = (
                task_placement(task.role, task.index, [leaf]),
                [leaf],
            )
        return joined

    def _place_cpu_exactly(self, job: Job, tasks: tuple[TaskPlacement, ...]) -> None:
        """A CPU-only job back on its nodes, holding their CPUs and memory again."""
        s = self._sched
        for task in tasks:
            room = s.cpu.nodes.get(task.node)
            if room is None:
                raise AdoptRefused(f"node {task.node} does not exist in this cluster")
            if not room.healthy:
                raise AdoptRefused(f"node {task.node} is down")
        for task in tasks:
            s.cpu.hold(task.node, s._role(job, task.role))
            job.placed[(task.role, task.index)] = (replace(task, gpus=(), cells=()), [])

    def _own(self, vc: VC, leaf: Cell, bound: list[Cell]) -> bool:
        s = self._sched
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
            root = s.tree.free_root(cell)
            if root is not None and s.vcs.can_bind(vc, cell, root):
                s.vcs.bind(vc, cell)
                s._bound(vc, cell)
                bound.append(cell)
                return True
        return False
