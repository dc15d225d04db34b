"""What an executor may do beyond the ``Executor`` protocol, each part declared as a protocol.

The service asks ``isinstance(executor, NodeHealth)`` (a ``runtime_checkable`` protocol), not
``getattr(executor, "node_events", None)``: the name of each optional part, its signature and
what "not supported" means live here, in one place, where mypy can check both sides. Which
executor has which part (tests/test_executor_capabilities.py holds the table):

================  ======  ==========  =====  ==========
part              local   kubernetes  slurm  meaning when missing
================  ======  ==========  =====  ==========
Notices           yes     no          no     a stop notice is a job event only, no file
NodeHealth        no      yes         yes    nodes change only by the admin's ``node down``
TaskAddresses     no      yes         no     tasks' addresses are known at launch (or never)
OutputCapped      yes     yes         yes    the service's ``--output-cap`` is not passed on
DeviceGuard       yes     no          no     the cluster manager keeps GPUs apart (banner "")
================  ======  ==========  =====  ==========

The required parts (``Executor``) are checked once, when an executor enters the service
(``require_executor``), so a backend that lacks ``poll`` fails at start, not in a pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from labhive.scheduler.executors.base import Executor, TaskHandle, TaskKey

if TYPE_CHECKING:
    from labhive.scheduler.core.model import NodeDown, NodeUp
    from labhive.scheduler.executors.limits import LimitSupport


@runtime_checkable
class Notices(Protocol):
    """Writes stop notices where the task can read them (``notice_file``) before a drain."""

    def notify(self, handles: Sequence[TaskHandle], notice: dict[str, Any] | None) -> None:
        """Write (None: remove) the tasks' notice files."""


@runtime_checkable
class NodeHealth(Protocol):
    """Knows the health of its nodes (Slurm's and Kubernetes' own node states)."""

    def node_events(self) -> list[NodeDown | NodeUp]:
        """Node health changes since the last call (the first: every node bad from the
        start); the loop calls it every pass."""


@runtime_checkable
class TaskAddresses(Protocol):
    """Learns a task's address only after its launch (a pod's IP)."""

    def addresses(self) -> dict[TaskKey, str]:
        """Addresses learnt since the last call."""


@runtime_checkable
class OutputCapped(Protocol):
    """Keeps each task's output to a cap the service sets (``--output-cap``; None: no cap)."""

    output_cap: int | None


@runtime_checkable
class DeviceGuard(Protocol):
    """Keeps tasks to their own GPU device nodes itself; says how in ``devices_enforced``."""

    limit_support: LimitSupport


#: The members every executor must have: the ``Executor`` protocol's, read from it so that a
#: member added there is checked here too.
REQUIRED: tuple[str, ...] = tuple(
    sorted(
        {*Executor.__annotations__, *(n for n, v in vars(Executor).items() if callable(v))}
        - {n for n in vars(Protocol) if n.startswith("_")}
        - {n for n in vars(Executor) if n.startswith("_")}
    )
)


def missing_members(executor: object) -> list[str]:
    """The ``Executor`` members ``executor`` lacks (empty: it has them all)."""
    return [name for name in REQUIRED if not hasattr(executor, name)]


def require_executor(executor: object) -> Executor:
    """``executor`` as an ``Executor``, or a ``TypeError`` naming what it lacks: checked where
    an executor enters the service, so a half-written backend fails at start, not when the
    first pass calls the method it has not got."""
    missing = missing_members(executor)
    if missing:
        raise TypeError(
            f"{type(executor).__name__} is not an executor: it lacks {', '.join(missing)} "
            "(see labhive.scheduler.executors.base.Executor for what each must do)"
        )
    return executor  # type: ignore[return-value]  # checked member by member above
