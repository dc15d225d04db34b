"""HiveD's algorithm (``labhive.scheduler.hived.core``) as a policy the drivers can pick by name."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from labhive.scheduler.config import ClusterConfig
from labhive.scheduler.hived.admission import Admission, reject_if_never_runs
from labhive.scheduler.hived.core import HivedScheduler
from labhive.scheduler.jobs import JobSpec


def create(config: ClusterConfig, **options: Any) -> HivedScheduler:
    """The HiveD scheduler for ``config``; it takes no options."""
    _no_options(options)
    return HivedScheduler(config)


def admission(config: ClusterConfig, **options: Any) -> Callable[[JobSpec], None]:
    """HiveD's check of a submission, without a scheduler: what ``HivedScheduler.check`` asks,
    of the same numbers of ``config`` (``hived.admission``)."""
    _no_options(options)
    return partial(reject_if_never_runs, Admission.of(config))


def _no_options(options: dict[str, Any]) -> None:
    if options:
        from labhive.scheduler.errors import UserError

        raise UserError(f"policy hived takes no options, got {', '.join(sorted(options))}")
