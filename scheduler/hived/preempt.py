"""Carrying out a placement plan: preempt its victims, or downgrade them, then start the job.

HiveD preempts strictly lower priorities only, opportunistic jobs first; a victim with lazy
preemption is downgraded to opportunistic instead and keeps running unless the preemptor, searching
again, still needs its very GPUs (``_lazy``). Each victim loses its unit of preemption (a task, an
affinity group, or the whole job: ``base._unit_of``) and waits again.
"""

from __future__ import annotations

from labhive.scheduler.core.jobs import OPPORTUNISTIC
from labhive.scheduler.core.model import Decision, Downgrade, Preempt, Start, StopTasks
from labhive.scheduler.hived.base import HivedBase, task_placement
from labhive.scheduler.hived.cells import Cell
from labhive.scheduler.hived.job import Job
from labhive.scheduler.hived.placement import Plan
from labhive.scheduler.hived.vc import VC


class Preemption:
    """``commit``: a plan's victims preempted or downgraded, its job started.

    A part ``core.HivedScheduler`` holds (``self.preemption``), not a base it inherits. It
    keeps no state of its own: the victims, cells and VCs it changes are the scheduler's,
    through its bookkeeping (``_occupy_task``, ``_vacate_job``, ``_stop_tasks``, ``_settle``)."""

    def __init__(self, sched: HivedBase) -> None:
        #: The scheduler whose jobs, cells and VCs a plan changes (its bookkeeping does).
        self._sched = sched

    def commit(self, job: Job, plan: Plan, out: list[Decision]) -> bool:
        """Carry ``plan`` out: preempt or downgrade its victims, start ``job``; False when lazy
        preemption's second search found no room after all."""
        s = self._sched
        vc = s.vcs.by_name.get(job.vc) if job.prio != OPPORTUNISTIC else None
        touched: set[Cell] = set()
        if plan.busy:  # (the usual plan takes free GPUs only: nothing to preempt)
            again = self._preempt(job, vc, plan, touched, out)
            if again is None:
                return False
            plan = again
        elif vc is not None and plan.bound:
            s._bind_counters(vc, plan)
        started = []
        run: list[Cell] = []  # the leaves of consecutive tasks on one node: taken in one step
        run_node = None
        placed = job.placed
        for task, node, leaves in plan.placed:
            if node is not run_node:
                if run_node is not None:
                    s._occupy_task(run, run_node, job)
                run, run_node = [], node
            run += leaves
            key = (task.role, task.index)
            # a one-GPU task's placement, made once per leaf (``task_placement``), read inline
            placement = leaves[0].placements.get(key) if len(leaves) == 1 else None
            if placement is None:
                placement = task_placement(task.role, task.index, leaves)
            placed[key] = (placement, leaves)
            started.append(placement)
        if run_node is not None:
            s._occupy_task(run, run_node, job)
        out.append(Start(job.job_id, tuple(started), job.opportunistic))
        if touched:
            s._settle(touched)
        return True

    def _preempt(
        self, job: Job, vc: VC | None, plan: Plan, touched: set[Cell], out: list[Decision]
    ) -> Plan | None:
        """Stop (or downgrade) the jobs ``plan`` takes GPUs of; the plan to start ``job`` on
        (another, if lazy preemption searched again; None if that search failed)."""
        s = self._sched
        victims = [s._jobs[v] for v in plan.victims()]
        book = s.shares.book
        if book.hosts:  # a GPU with shares is taken whole: all of them stop
            victims = _with_sharers(victims, book.sharers(plan.taken), s._jobs)
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
                return None
            plan = again
            victims = [s._jobs[v] for v in plan.victims()]
        if vc is not None:
            s._bind_counters(vc, plan)
        for victim in sorted(victims, key=lambda v: (v.prio, -v.seq)):
            hit = _hit(victim, plan)
            reason = self._preempt_reason(victim, job, hit)
            part = s._unit_of(victim, hit) if s._splits(victim) else None
            if part is None:
                out.append(Preempt(victim.job_id, job.job_id, reason))
                s._vacate_job(victim, touched)
            else:
                stopped = s._stop_tasks(victim, part, touched)
                out.append(StopTasks(victim.job_id, stopped, reason, job.job_id))
            s.queue.enqueue(victim)
        return plan

    def _lazy(
        self, job: Job, vc: VC, plan: Plan, lazy: list[Job], out: list[Decision]
    ) -> Plan | None:
        """HiveD's lazy preemption: downgrade the victims to opportunistic and look again; they
        keep running unless the preemptor still needs their very GPUs."""
        s = self._sched
        units = {v.job_id: s._unit_of(v, _hit(v, plan)) for v in lazy}
        s.attempt.placer.undo(vc, plan)
        touched: set[Cell] = set()
        for victim in lazy:
            part = units[victim.job_id]
            keys = set(victim.placed) if part is None else part
            for key in keys:
                for leaf in victim.placed[key][1]:
                    s._vacate(leaf, touched)
            if part is None:
                victim.prio = OPPORTUNISTIC
                victim.downgraded_by = job.job_id
            for key in keys:
                if part is not None:
                    victim.downgraded[key] = job.job_id
                for leaf in victim.placed[key][1]:
                    s._occupy(leaf, victim, OPPORTUNISTIC)
        s._settle(touched)
        unit = [
            (r, i)
            for r, i in job.waiting_tasks
            if (r.name, i) in {(t.role, t.index) for t, _, _ in plan.placed}
        ]
        again = s.attempt.find(job, unit)
        for victim in lazy:
            part = units[victim.job_id]
            hit = _hit(victim, again) if again is not None else set()
            if hit:
                hit = s._unit_of(victim, hit) or set(victim.placed)
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

    def _preempt_reason(self, victim: Job, by: Job, hit: set[tuple[str, int]]) -> str:
        # Tasks lazy preemption downgraded run opportunistically: a job of the victim's own
        # priority may take their GPUs ("priority 0 > 0" said otherwise).
        if victim.opportunistic or (victim.downgraded and hit <= victim.downgraded.keys()):
            return f"preempted by {by.spec.name}: opportunistic jobs yield to guaranteed ones"
        return (
            f"preempted by {by.spec.name} (priority {by.spec.priority} > "
            f"{victim.spec.priority}) in {by.vc}"
        )


def _with_sharers(victims: list[Job], sharers: list[str], jobs: dict[str, Job]) -> list[Job]:
    named = {v.job_id for v in victims}
    return victims + [jobs[s] for s in dict.fromkeys(sharers) if s not in named]


def _hit(job: Job, plan: Plan) -> set[tuple[str, int]]:
    """The tasks of ``job`` holding leaf cells that ``plan`` takes."""
    return {
        key for key, (_, leaves) in job.placed.items() if any(id(x) in plan.taken for x in leaves)
    }
