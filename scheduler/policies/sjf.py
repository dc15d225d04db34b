"""SJF with an oracle: the waiting job with the shortest known duration starts first.

The duration is the job's recorded one (``JobSpec.duration``; a trace knows it, a live cluster
does not, hence "oracle"); jobs without one go last, in submission order. Non-preemptive.
Strict by default (the shortest job that cannot be placed blocks longer ones);
``backfill=true`` lets jobs of a smaller GPU count skip past it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from labhive.scheduler.queue_policy import (
    QueuedJob,
    QueuedPolicy,
    policy_options,
    pool_from_config,
    vc_gpus,
)

if TYPE_CHECKING:
    from labhive.scheduler.config import ClusterConfig


class SjfPolicy(QueuedPolicy):
    name = "sjf"

    def __init__(self, *args: Any, backfill: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.backfill = backfill

    def order_key(self, job: QueuedJob) -> Any:
        duration = job.spec.duration
        return (math.inf if duration is None else duration, job.seq)

    def group_key(self, job: QueuedJob) -> Hashable:
        return job.gpus if self.backfill else None


def create(config: ClusterConfig, **options: Any) -> SjfPolicy:
    opts = policy_options(options, locality="consolidated", backfill=False)
    return SjfPolicy(
        pool_from_config(config, opts["locality"]),
        vc_gpus(config),
        backfill=opts["backfill"],
        pool_factory=lambda c: pool_from_config(c, opts["locality"]),
    )
