"""A job as every driver reads it: the frozen ``JobSpec`` with its roles, priorities, and the
error a spec that cannot be read raises. Parsing lives in ``jobs.py`` and its readers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from labhive.scheduler.core.errors import UserError

#: OpenPAI's priority classes (HiveD's ``jobPriorityClass``) and their numeric values.
PRIORITY_CLASSES: dict[str, int] = {"crit": 120, "prod": 100, "test": 10, "oppo": -1}
#: Opportunistic: may use any VC's idle cells, is never guaranteed, never preempts.
OPPORTUNISTIC = -1
#: Guaranteed priorities lie in this closed range.
MIN_GUARANTEED, MAX_GUARANTEED = 0, 1000
#: What a task may run under (``observe``; OpenPAI: ``extras.observe``). Checked here, at
#: intake: the executors launch only these (``executors/local.py::_argv``), and a job that
#: names anything else was accepted, then failed at launch with exit 127.
OBSERVATIONS = ("strace",)


class GuaranteeAndLimit:
    """What a task is guaranteed (``cpu``/``memory_mb``: what placement counts) and what it may
    use (``cpu_limit``/``memory_limit_mb``: what the executor enforces; None: the guarantee),
    for a role of a job and for one task's launch alike."""

    __slots__ = ()
    cpu: float
    memory_mb: int
    cpu_limit: float | None
    memory_limit_mb: int | None

    @property
    def cpu_max(self) -> float:
        """The CPUs a task may use (its cgroup's quota): the limit, else the guarantee."""
        return self.cpu if self.cpu_limit is None else self.cpu_limit

    @property
    def memory_max_mb(self) -> int:
        """The memory a task may use before the OOM killer: the limit, else the guarantee."""
        return self.memory_mb if self.memory_limit_mb is None else self.memory_limit_mb


@dataclass(frozen=True, slots=True)
class RoleSpec(GuaranteeAndLimit):
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
    pinned_cell: str | None = None  # HiveD's pinnedCellId: run only in this pinned cell
    affinity_group: str | None = None  # OpenPAI's affinityGroupName: placed whole, apart
    #: What the executor enforces (cgroup quota, memory limit), at least the guarantee
    #: (``cpu``/``memory_mb``, what placement counts); None: the guarantee. A notebook server
    #: idles on 0.1 CPU guaranteed and bursts to its limit (zero-to-jupyterhub's guarantee/limit).
    cpu_limit: float | None = None
    memory_limit_mb: int | None = None
    #: A share of one GPU in thousandths (``gpu_share``: 500, 250 or 125, with ``gpu`` 1); 0:
    #: ``gpu`` whole GPUs. Placement gives the task the GPU; shares of one GPU sum to <= 1000.
    share_milli: int = 0


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
    #: The most seconds one attempt may run (``time_limit``; ``extras.labhive.timeLimit``).
    time_limit: float | None = None
    #: Where its tasks run (an absolute path the user can read, entered as the user); None:
    #: a fresh per-task work dir (what an older client, or a job file without one, gets).
    cwd: str | None = None
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

    @property
    def share_milli(self) -> int:
        """The GPU share of its one task in thousandths (``gpu_share``); 0: whole GPUs."""
        return self.roles[0].share_milli if len(self.roles) == 1 else 0

    @property
    def gpu_amount(self) -> float:
        """What its tasks hold of GPUs, a share counted as its fraction (accounting, views)."""
        share = self.share_milli
        return share / 1000 if share else float(self.total_gpus)


class SpecError(UserError):
    """A job spec that cannot be read; the message names the key (and the line)."""


def parse_priority(value: Any) -> int:
    """``crit``/``prod``/``test``/``oppo`` or a number: 0..1000 guaranteed, -1 opportunistic."""
    if isinstance(value, str) and value.strip().lower() in PRIORITY_CLASSES:
        return PRIORITY_CLASSES[value.strip().lower()]
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
        number = int(value)
    if number is not None and (
        number == OPPORTUNISTIC or MIN_GUARANTEED <= number <= MAX_GUARANTEED
    ):
        return number
    raise ValueError(
        f"unknown priority {value!r}; use crit, prod, test, oppo, a number 0..1000 "
        "(guaranteed) or -1 (opportunistic)"
    )
