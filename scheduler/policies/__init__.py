"""Scheduling policies: one module each, all behind ``labhive.scheduler.core.model.Scheduler``.

A policy module ``labhive.scheduler.policies.NAME`` exposes ``create(config, **options)``
returning a ``Scheduler``; ``get_policy`` finds it by name, so adding a policy is adding one file.
The same policies serve the trace simulator and the live service (``labhive serve --policy``).
``queued`` is no policy: it holds ``QueuedPolicy``, the base of the queue-ordering ones (with
``queued_job``, ``queued_pass``, ``queued_views`` and ``queued_config``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from labhive.scheduler.core.errors import UserError

if TYPE_CHECKING:
    from labhive.scheduler.core.config import ClusterConfig
    from labhive.scheduler.core.jobs import JobSpec
    from labhive.scheduler.core.model import Scheduler


#: Modules of this package that hold what policies share, not a policy (vc_nodes: a per-VC mode;
#: queued_*: the parts of ``queued``; policy_base: what HiveD and the queue policies share;
#: backfill, head_index, node_pool, preempt_probe, size_refusals: the queue policies' parts;
#: capacity_pass: Capacity's pass).
BASES = {
    "backfill",
    "capacity_pass",
    "head_index",
    "node_pool",
    "policy_base",
    "preempt_probe",
    "queued",
    "queued_config",
    "queued_job",
    "queued_pass",
    "queued_views",
    "size_refusals",
    "vc_nodes",
}


def available() -> list[str]:
    """Names of the policies shipped in this package."""
    return sorted(
        m.name
        for m in pkgutil.iter_modules(__path__)
        if not m.name.startswith("_") and m.name not in BASES
    )


def _module(name: str) -> Any:
    """The module of the policy called ``name``; a clear error for a name we do not ship."""
    if name not in available():
        raise UserError(f"unknown policy {name!r}; choose one of: {', '.join(available())}")
    return importlib.import_module(f"{__name__}.{name}")


def get_policy(name: str, config: ClusterConfig, **options: Any) -> Scheduler:
    """The policy called ``name``, built for ``config``."""
    return _module(name).create(config, **options)  # type: ignore[no-any-return]


def admission(name: str, config: ClusterConfig, **options: Any) -> Callable[[JobSpec], None]:
    """How a driver checks a submission for the policy ``name`` on ``config`` once, before
    it stores the job and sends a ``Submit(admitted=True)``: the policy module's own
    ``admission`` where it has one (HiveD's: a pure function of numbers derived from the config,
    safe in any thread), else the ``check`` of a fresh policy (the queue policies', which reads
    only what the policy derived from the config)."""
    pure = getattr(_module(name), "admission", None)
    if pure is not None:
        return pure(config, **options)  # type: ignore[no-any-return]
    return get_policy(name, config, **options).check
