"""SJF with an oracle: the waiting job with the shortest known duration starts first.

The duration is the job's recorded one (``JobSpec.duration``; a trace knows it, a live cluster
does not, hence "oracle"); jobs without one go last, in submission order. Non-preemptive.
Strict by default (the shortest job that cannot be placed blocks longer ones);
``backfill=true`` lets jobs of a smaller GPU count skip past it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from mypy_extensions import mypyc_attr

from labhive.scheduler.policies.queued import QueuedJob, QueuedPolicy
from labhive.scheduler.policies.vc_nodes import VcNodes, per_vc_from_config

if TYPE_CHECKING:
    from labhive.scheduler.core.config import ClusterConfig


# open to subclasses written in Python, as QueuedPolicy is (docs/policies.md)
@mypyc_attr(allow_interpreted_subclasses=True)
class SjfPolicy(QueuedPolicy):
    name = "sjf"

    def order_key(self, job: QueuedJob) -> Any:
        duration = job.spec.duration
        return (math.inf if duration is None else duration, job.seq)


def create(config: ClusterConfig, **options: Any) -> SjfPolicy | VcNodes:
    return per_vc_from_config(SjfPolicy, config, options, per_vc=False)
