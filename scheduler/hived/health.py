"""Nodes going down and up: what ran on a failed node stops and waits again, and the node's
cells leave (or rejoin) every count of free capacity.

A job loses only its units with tasks on the node (``base._unit_of``) when its driver can stop
parts of jobs (``partial_stops``), else the whole job; the stop reason names the node and the
``NodeDown``'s reason, in the words both policy families use (``policy_base.node_down``).

``NodeHealth`` is a part ``core.HivedScheduler`` holds (not a base it inherits): its own state
is which nodes are down and why; the cells, VCs and jobs it changes are the scheduler's, and it
changes them through the scheduler's bookkeeping (vacate, stop tasks, enqueue, settle).
"""

from __future__ import annotations

from labhive.scheduler.core.model import Decision, Stop, StopTasks
from labhive.scheduler.hived.base import HivedBase
from labhive.scheduler.hived.cells import Cell
from labhive.scheduler.hived.job import Job
from labhive.scheduler.policies.policy_base import node_down


class NodeHealth:
    """``NodeDown`` and ``NodeUp`` of one scheduler."""

    def __init__(self, sched: HivedBase) -> None:
        #: The scheduler whose nodes' cells, VCs and jobs a node's change touches.
        self._sched = sched
        #: Node -> the reason its ``NodeDown`` gave, until its ``NodeUp`` (the views show it);
        #: a node not here is up. A ``Reconfigure`` leaves it as it is, though the cells it
        #: builds start healthy (as before this part had its own object).
        self.down_reasons: dict[str, str] = {}

    def change(self, node: str, healthy: bool, out: list[Decision], reason: str) -> None:
        """The node went down (what runs there stops and waits again) or came back up."""
        s = self._sched
        cells = s.tree.nodes.get(node)
        if cells is None:
            raise ValueError(f"unknown node {node!r}")
        touched: set[Cell] = set()
        if node in s.cpu.nodes:
            s.cpu.nodes[node].healthy = healthy
        if healthy:
            self.down_reasons.pop(node, None)
        else:
            self.down_reasons[node] = reason
            self._stop_jobs_on(node, cells, out, reason, touched)
        for cell in cells:
            for leaf in cell.leaf_cells():
                owner = leaf.owner()
                if owner is not None and leaf.job is None and (leaf.bad == 0) != healthy:
                    s.vcs[owner.vc or ""].free_in += 1 if healthy else -1
            s.tree.set_health(cell, healthy)
            for vc in s.vcs.by_name.values():
                vc.refresh_open(cell)
        s._settle(touched)
        for vc in s.vcs.by_name.values():
            s._bump(vc)
        s._bump_oppo()

    def _stop_jobs_on(
        self, node: str, cells: list[Cell], out: list[Decision], reason: str, touched: set[Cell]
    ) -> None:
        """Each job with tasks on the failed node, oldest first, loses its units there (or
        all of it) and waits again."""
        s = self._sched
        hit = sorted(
            {leaf.job for cell in cells for leaf in cell.leaf_cells() if leaf.job}
            | {j.job_id for j in s._jobs.values() if (j.cpu_only or j.share) and _on(j, node)},
            key=lambda j: s._jobs[j].seq,
        )
        for job_id in hit:
            job = s._jobs[job_id]
            why = node_down(node, reason)
            there = {k for k, (p, _) in job.placed.items() if p.node == node}
            part = s._unit_of(job, there)
            if part is None:
                out.append(Stop(job_id, why))
                s._vacate_job(job, touched)
            else:
                out.append(StopTasks(job_id, s._stop_tasks(job, part, touched), why))
            s.queue.enqueue(job)


def _on(job: Job, node: str) -> bool:
    return any(p.node == node for p, _ in job.placed.values())
