"""Scheduling policies: one module each, all behind ``labhive.scheduler.model.Scheduler``.

A policy module ``labhive.scheduler.policies.NAME`` exposes ``create(config, **options)``
returning a ``Scheduler``; ``get_policy`` finds it by name, so adding a policy is adding one file.
The same policies serve the trace simulator and the live service (``labhive serve --policy``).
``queued`` is no policy: it holds ``QueuedPolicy``, the base of the queue-ordering ones.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

from labhive.scheduler.errors import UserError

if TYPE_CHECKING:
    from labhive.scheduler.config import ClusterConfig
    from labhive.scheduler.model import Scheduler


#: Modules of this package that hold what policies share, not a policy.
BASES = {"queued"}


def available() -> list[str]:
    """Names of the policies shipped in this package."""
    return sorted(
        m.name
        for m in pkgutil.iter_modules(__path__)
        if not m.name.startswith("_") and m.name not in BASES
    )


def get_policy(name: str, config: ClusterConfig, **options: Any) -> Scheduler:
    """The policy called ``name``, built for ``config``."""
    if name not in available():
        raise UserError(f"unknown policy {name!r}; choose one of: {', '.join(available())}")
    module = importlib.import_module(f"{__name__}.{name}")
    return module.create(config, **options)  # type: ignore[no-any-return]
