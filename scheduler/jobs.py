"""The job model every driver shares.

A job is parsed once, from the short form or an OpenPAI v2 file, into a frozen ``JobSpec``; the
scheduling core, the simulator and the service all read that one shape, so a job behaves the same
in a scenario replay, a trace simulation and a live cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: OpenPAI's priority classes (HiveD's ``jobPriorityClass``) and their numeric values.
PRIORITY_CLASSES: dict[str, int] = {"crit": 120, "prod": 100, "test": 10, "oppo": -1}
#: Opportunistic: may use any VC's idle cells, is never guaranteed, never preempts.
OPPORTUNISTIC = -1
#: Guaranteed priorities lie in this closed range.
MIN_GUARANTEED, MAX_GUARANTEED = 0, 1000


@dataclass(frozen=True, slots=True)
class RoleSpec:
    """One task role: ``instances`` identical tasks, each needing these resources."""

    name: str
    instances: int = 1
    gpu: int = 1
    cpu: float = 1.0
    memory_mb: int = 1024
    sku: str | None = None
    commands: tuple[str, ...] = ()
    min_succeeded: int | None = None
    min_failed: int | None = None


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job as the scheduler sees it, whatever form it was submitted in."""

    name: str
    vc: str
    priority: int
    roles: tuple[RoleSpec, ...]
    gang: bool = True
    retries: int = 0
    duration: float | None = None
    lazy_preemption: bool = False
    user: str | None = None
    image: str | None = None
    observe: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def opportunistic(self) -> bool:
        return self.priority == OPPORTUNISTIC

    @property
    def task_count(self) -> int:
        return sum(r.instances for r in self.roles)

    @property
    def total_gpus(self) -> int:
        return sum(r.instances * r.gpu for r in self.roles)
