"""FIFO: jobs start in submission order.

Strict by default: a job that cannot be placed blocks every job behind it (head-of-line
blocking, the behaviour the classic comparisons measure). ``backfill=true`` lets a job that
fits start past a blocked larger one (smaller GPU counts skip ahead; equal ones keep order).
"""

from __future__ import annotations

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


class FifoPolicy(QueuedPolicy):
    name = "fifo"

    def __init__(self, *args: Any, backfill: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.backfill = backfill

    def group_key(self, job: QueuedJob) -> Hashable:
        return job.gpus if self.backfill else None


def create(config: ClusterConfig, **options: Any) -> FifoPolicy:
    opts = policy_options(options, locality="consolidated", backfill=False)
    return FifoPolicy(
        pool_from_config(config, opts["locality"]),
        vc_gpus(config),
        backfill=opts["backfill"],
        pool_factory=lambda c: pool_from_config(c, opts["locality"]),
    )
