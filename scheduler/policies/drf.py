"""DRF: Dominant Resource Fairness over GPUs, CPU and memory, between users.

A user's dominant share is the largest of their running jobs' shares of the cluster's GPUs,
CPU and memory (dimensions the cluster config gives no size for are left out). The user with
the smallest dominant share starts their next job first; each user's jobs keep submission
order, and a user whose next job cannot be placed is passed over until resources free up.
Non-preemptive. Jobs without a user count as one anonymous user.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from labhive.scheduler.policies.queued import QueuedJob, QueuedPolicy, from_config

if TYPE_CHECKING:
    from labhive.scheduler.core.config import ClusterConfig


class DrfPolicy(QueuedPolicy):
    name = "drf"
    HEAD_INDEX = True  # a line per user: a pass must not rank every waiting user afresh

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._usage: dict[str, list[float]] = {}

    def line_key(self, job: QueuedJob) -> Hashable:
        return job.user

    def group_priority(self, head: QueuedJob) -> Any:
        return (self.dominant_share(head.user), head.seq)

    def dominant_share(self, user: str) -> float:
        gpu, cpu, mem = self._usage.get(user, (0.0, 0.0, 0.0))
        pool = self.pool
        share = gpu / pool.total_gpus if pool.total_gpus else 0.0
        if 0 < pool.total_cpu < math.inf:
            share = max(share, cpu / pool.total_cpu)
        if 0 < pool.total_memory < math.inf:
            share = max(share, mem / pool.total_memory)
        return share

    def _add(self, job: QueuedJob, sign: int) -> None:
        usage = self._usage.setdefault(job.user, [0.0, 0.0, 0.0])
        usage[0] += sign * job.gpus
        usage[1] += sign * job.cpu
        usage[2] += sign * job.memory_mb

    def on_started(self, job: QueuedJob) -> None:
        self._add(job, +1)
        self.priority_changed(job)

    def on_stopped(self, job: QueuedJob) -> None:
        self._add(job, -1)
        self.priority_changed(job)

    def wait_reason(self, job: QueuedJob) -> str:
        return (
            f"needs {job.gpus} GPUs, {self.pool.free_gpus} free; user {job.user or '(none)'} "
            f"holds a dominant share of {self.dominant_share(job.user):.1%}"
        )


def create(config: ClusterConfig, **options: Any) -> DrfPolicy:
    return from_config(DrfPolicy, config, options)
