"""HiveD's algorithm (``labhive.scheduler.hived.core``) as a policy the drivers can pick by name."""

from __future__ import annotations

from typing import Any

from labhive.scheduler.config import ClusterConfig
from labhive.scheduler.hived.core import HivedScheduler


def create(config: ClusterConfig, **options: Any) -> HivedScheduler:
    """The HiveD scheduler for ``config``; it takes no options."""
    if options:
        from labhive.scheduler.errors import UserError

        raise UserError(f"policy hived takes no options, got {', '.join(sorted(options))}")
    return HivedScheduler(config)
