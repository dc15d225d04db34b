"""What a queue policy shows: each job's view with its place in line and why it waits, and the
cluster's view per VC. A mixin of ``queued.QueuedPolicy``, which holds the state it reads; it
changes nothing."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from mypy_extensions import mypyc_attr

from labhive.scheduler.core.model import ClusterView, JobView, Start, TaskPlacement, VCView
from labhive.scheduler.policies.node_pool import NodePool
from labhive.scheduler.policies.policy_base import PolicyBase, listing_order, position_tail
from labhive.scheduler.policies.queued_job import NOT_WAITING, QueuedJob


# open to subclasses written in Python, as QueuedPolicy is (docs/policies.md)
@mypyc_attr(allow_interpreted_subclasses=True)
class QueuedViews(PolicyBase[QueuedJob]):
    """``job``, ``jobs`` and ``cluster`` of a queue policy, with the texts of why jobs wait."""

    # the state of ``QueuedPolicy`` these read
    name: str
    pool: NodePool
    vc_gpus: dict[str, int]
    vc_used: dict[str, int]
    vc_borrowed: dict[str, int]
    _jobs: dict[str, QueuedJob]
    _counts_vcs: bool

    # (``QueuedPolicy``'s, declared here for the views: a class body of plain statements,
    # as mypyc compiles it)
    def order_key(self, job: QueuedJob) -> Any:
        raise NotImplementedError

    def wait_reason(self, job: QueuedJob) -> str:
        raise NotImplementedError

    # (and for the pass, ``QueuedPass``: ``admit``'s is not counted by its ``__init_subclass__``)
    def group_priority(self, head: QueuedJob) -> Any:
        raise NotImplementedError

    def _head(self, group: Hashable) -> QueuedJob | None:
        raise NotImplementedError

    def victims(self, job: QueuedJob, opportunistic: bool) -> Iterable[QueuedJob]:
        raise NotImplementedError

    def within_quota(self, job: QueuedJob) -> bool:
        raise NotImplementedError

    def victim_gpus(self, job: QueuedJob, opportunistic: bool) -> int:
        raise NotImplementedError

    def preempt_reason(self, victim: QueuedJob) -> str:
        raise NotImplementedError

    def group_key(self, job: QueuedJob) -> Hashable:
        raise NotImplementedError

    def admit(self, job: QueuedJob) -> tuple[bool, bool]:
        raise NotImplementedError

    def _stop(self, job: QueuedJob, *, release: bool = True) -> None:
        raise NotImplementedError

    def _start(self, job: QueuedJob, tasks: tuple[TaskPlacement, ...], opp: bool) -> Start:
        raise NotImplementedError

    def _enqueue(self, job: QueuedJob) -> None:
        raise NotImplementedError

    def job(self, job_id: str) -> JobView | None:
        job = self._jobs.get(job_id)
        if job is None:
            return None
        if job.running:
            return self._view(job, None, None)
        for view in self.jobs():
            if view.job_id == job_id:
                return view
        return None

    def _waiting_jobs(self) -> list[QueuedJob]:
        """The jobs waiting in a line (``group`` set: ``NOT_WAITING`` while a job does not
        wait), in the order they were submitted; the callers sort or count them."""
        return [j for j in self._jobs.values() if j.group is not NOT_WAITING]

    def jobs(self) -> list[JobView]:
        waiting = self._waiting_jobs()
        listed = listing_order(
            (j for j in self._jobs.values() if j.running),
            waiting,
            seq=lambda j: j.seq,
            wait_key=lambda j: (self.order_key(j), j.seq),
        )
        per_vc: dict[str, int] = {}
        for j in waiting:
            per_vc[j.vc] = per_vc.get(j.vc, 0) + 1
        views: list[JobView] = []
        position: dict[str, int] = {}
        for j in listed:
            if j.running:
                views.append(self._view(j, None, None))
                continue
            position[j.vc] = position.get(j.vc, 0) + 1
            views.append(self._view(j, position[j.vc], per_vc[j.vc]))
        return views

    def cluster(self) -> ClusterView:
        waiting: dict[str, int] = dict.fromkeys(self.vc_gpus, 0)
        for j in self._waiting_jobs():
            waiting[j.vc] = waiting.get(j.vc, 0) + 1
        used, borrowed = self.vc_use()
        vcs = {
            vc: VCView(
                name=vc,
                guaranteed_gpus=self.vc_gpus.get(vc, 0),
                used_gpus=used.get(vc, 0) - borrowed.get(vc, 0),
                opportunistic_gpus=borrowed.get(vc, 0),
                waiting=waiting.get(vc, 0),
            )
            for vc in sorted(waiting)
        }
        return ClusterView(nodes=self.pool.views(), vcs=vcs)

    def vc_use(self) -> tuple[dict[str, int], dict[str, int]]:
        """The GPUs each VC's running jobs hold, and of them borrowed: ``vc_used`` and
        ``vc_borrowed`` where the policy keeps them up (``_counts_vcs``), else counted from
        the running jobs now (the same sums: each start adds a job's GPUs, each stop takes
        them back, borrowed where it started as opportunistic)."""
        if self._counts_vcs:
            return self.vc_used, self.vc_borrowed
        used: dict[str, int] = {}
        borrowed: dict[str, int] = {}
        for j in self._jobs.values():
            if j.running:
                used[j.vc] = used.get(j.vc, 0) + j.gpus
                if j.opportunistic:
                    borrowed[j.vc] = borrowed.get(j.vc, 0) + j.gpus
        return used, borrowed

    def _view(self, job: QueuedJob, position: int | None, length: int | None) -> JobView:
        why = None
        if not job.running:
            why = self._why(job, position, length)
        elif job.opportunistic:
            why = f"running on GPUs borrowed beyond {job.vc}'s quota; preempted first"
        return JobView(
            job_id=job.job_id,
            name=job.spec.name,
            vc=job.vc,
            priority=job.spec.priority,
            state="RUNNING" if job.running else "WAITING",
            tasks=self.pool.placement(job.job_id),
            opportunistic=job.opportunistic,
            queue_position=position,
            queue_length=length,
            why=why,
        )

    def _why(self, job: QueuedJob, position: int | None, length: int | None) -> str:
        where = (
            " on one node"
            if self.pool.locality == "consolidated" and job.gpus <= self.pool.max_node_gpus
            else ""
        )
        text = self.wait_reason(job) or (
            f"needs {job.gpus} GPUs{where}; {self.pool.free_gpus} of {self.pool.total_gpus} free"
        )
        return text + position_tail(position, length, job.vc)
