"""FIFO: jobs start in submission order.

Strict by default: a job that cannot be placed blocks every job behind it (head-of-line
blocking, the behaviour the classic comparisons measure). ``backfill=true`` lets a job that
fits start past a blocked larger one (smaller GPU counts skip ahead; equal ones keep order).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mypy_extensions import mypyc_attr

from labhive.scheduler.policies.queued import QueuedPolicy
from labhive.scheduler.policies.vc_nodes import VcNodes, per_vc_from_config

if TYPE_CHECKING:
    from labhive.scheduler.core.config import ClusterConfig


# open to subclasses written in Python, as QueuedPolicy is (docs/policies.md)
@mypyc_attr(allow_interpreted_subclasses=True)
class FifoPolicy(QueuedPolicy):
    name = "fifo"


def create(config: ClusterConfig, **options: Any) -> FifoPolicy | VcNodes:
    return per_vc_from_config(FifoPolicy, config, options, per_vc=False)
