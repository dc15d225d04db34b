"""What drivers show: a job's state, place in its queue and why it waits; nodes; VC usage.

Built on demand from the core's state, never on the scheduling path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from labhive.scheduler.model import JobView, NodeView, VCView
from labhive.scheduler.why import why_waiting

if TYPE_CHECKING:
    from labhive.scheduler.core import HivedScheduler, Job


def job_view(sched: HivedScheduler, job: Job) -> JobView:
    tasks = tuple(sorted((p for p, _ in job.placed.values()), key=lambda p: (p.role, p.index)))
    position = length = None
    why = None
    queue = sched._queues.get(job.vc)
    if not job.placed and queue is not None:
        position = queue.position(job.spec.priority, job.seq, job.job_id)
        length = len(queue.order)
    if job.waiting_tasks:
        why = why_waiting(sched, job, position, length)
    elif job.downgraded_by is not None:
        by = sched._jobs.get(job.downgraded_by)
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


def node_views(sched: HivedScheduler) -> tuple[NodeView, ...]:
    """One view per node name; a node in two chains shows all its GPUs."""
    out = []
    for name, cells in sched.tree.nodes.items():
        leaves = [leaf for cell in cells for leaf in cell.leaf_cells()]
        healthy = all(c.bad == 0 for c in cells)
        out.append(
            NodeView(
                name,
                sched.tree.chains[cells[0].chain].leaf_type,
                tuple(sorted(leaf.gpu or 0 for leaf in leaves)),
                healthy,
                {leaf.gpu or 0: leaf.job for leaf in leaves if leaf.job},
                "" if healthy else sched.down_reasons.get(name) or "down",
            )
        )
    return tuple(out)


def vc_views(sched: HivedScheduler) -> dict[str, VCView]:
    used: dict[str, int] = {}
    oppo: dict[str, int] = {}
    waiting: dict[str, int] = {}
    for job in sched._jobs.values():
        n = sum(len(leaves) for _, leaves in job.placed.values())
        target = oppo if job.opportunistic else used
        target[job.vc] = target.get(job.vc, 0) + n
        if not job.placed:
            waiting[job.vc] = waiting.get(job.vc, 0) + 1
    return {
        name: VCView(
            name,
            vc.leaves(sched.tree),
            used.get(name, 0),
            oppo.get(name, 0),
            waiting.get(name, 0),
        )
        for name, vc in sched.vcs.by_name.items()
    }
