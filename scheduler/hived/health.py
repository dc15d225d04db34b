"""Nodes going down and up: what ran on a failed node stops and waits again, and the node's
cells leave (or rejoin) every count of free capacity.

A job loses only its units with tasks on the node (``base._unit_of``) when its driver can stop
parts of jobs (``partial_stops``), else the whole job; the stop reason names the node and the
``NodeDown``'s reason, in the words both policy families use (``policy_base.node_down``).
"""

from __future__ import annotations

from labhive.scheduler.core.model import Decision, Stop, StopTasks
from labhive.scheduler.hived.base import HivedBase
from labhive.scheduler.hived.cells import Cell
from labhive.scheduler.hived.job import Job
from labhive.scheduler.policies.policy_base import node_down


class NodeHealth(HivedBase):
    """``NodeDown`` and ``NodeUp``."""

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
                | {
                    j.job_id
                    for j in self._jobs.values()
                    if (j.cpu_only or j.share) and _on(j, node)
                },
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


def _on(job: Job, node: str) -> bool:
    return any(p.node == node for p, _ in job.placed.values())
