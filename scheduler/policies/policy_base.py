"""What both policy families (HiveD in ``core``, the queue policies in ``policies/queued``)
share: how an event reaches its handler, the texts drivers show for what the cluster did to a
job, and the order ``jobs()`` lists jobs in.

They had been written twice and had drifted apart ("node n1 went down (disk)" in one,
"node n1 is down disk" in the other); a subclass now supplies only the handlers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from mypy_extensions import mypyc_attr

from labhive.scheduler.core.model import (
    Adopt,
    Cancel,
    Decision,
    Event,
    Finish,
    NodeDown,
    NodeUp,
    Reconfigure,
    Requeue,
    Submit,
    TasksEnded,
    Tick,
)

if TYPE_CHECKING:
    from labhive.scheduler.core.config import ClusterConfig
    from labhive.scheduler.core.jobs import JobSpec

J = TypeVar("J")
T = TypeVar("T")


# (compiled by mypyc, it may still be subclassed by interpreted classes: HiveD's scheduler,
# ``hived.core.HivedScheduler``, is not compiled)
@mypyc_attr(allow_interpreted_subclasses=True)
class PolicyBase(Generic[J]):
    """Event dispatch for a policy whose jobs are ``J``; subclasses implement the handlers."""

    def _apply(self, event: Event, out: list[Decision]) -> J | None:
        """One event's state change, no scheduling; the new job of a ``Submit``, if kept."""
        # A simulation's events are submits and finishes, one each a job: told apart by their
        # type first, as a class pattern costs more (``match`` then asks for the rest).
        if type(event) is Submit:
            return self._submit(event.job_id, event.spec, admitted=event.admitted)
        if type(event) is Finish:
            self._remove(event.job_id)
            return None
        if type(event) is Tick:  # (LAS's, about one a job: the ``match`` below asks 8 cases)
            self.on_tick()
            return None
        match event:
            case Submit():
                return self._submit(event.job_id, event.spec, admitted=event.admitted)
            case Finish() | Cancel():
                self._remove(event.job_id)
            case Requeue():
                self._requeue(event.job_id)
            case NodeDown():
                self._node_health(event.node, False, out, event.reason)
            case NodeUp():
                self._node_health(event.node, True, out, "")
            case Reconfigure():
                self._reconfigure(event.config, out)
            case Adopt():
                self._adopt(event, out)
            case TasksEnded():
                self._tasks_ended(event.job_id, event.tasks, out)
            case Tick():
                self.on_tick()
        return None

    def _submit(self, job_id: str, spec: JobSpec, *, admitted: bool = False) -> J | None:
        """Keep a new job; ``check`` it first unless the driver did (``Submit.admitted``)."""
        raise NotImplementedError

    def _remove(self, job_id: str) -> None:
        """The job finished or was cancelled: forget it, freeing what it held."""
        raise NotImplementedError

    def _requeue(self, job_id: str) -> None:
        """The job's attempt ended and it waits again (its driver retries it)."""
        raise NotImplementedError

    def _node_health(self, node: str, healthy: bool, out: list[Decision], reason: str) -> None:
        """The node went down (stop what runs there: ``Stop(job, node_down(...))``) or up."""
        raise NotImplementedError

    def _reconfigure(self, config: ClusterConfig, out: list[Decision]) -> None:
        raise NotImplementedError

    def _tasks_ended(
        self, job_id: str, tasks: tuple[tuple[str, int], ...], out: list[Decision]
    ) -> None:
        """Some tasks of a running job are done (``TasksEnded``). By default nothing changes:
        a policy that places jobs whole (the queue policies) keeps their GPUs until the job
        ends; HiveD, which places an incremental job task by task, frees them."""

    def _adopt(self, event: Adopt, out: list[Decision]) -> None:
        """A driver restores a job that runs on exactly ``event.tasks``."""
        raise NotImplementedError

    def on_tick(self) -> None:
        """Hook: a ``Tick`` arrived (policies that reorder over time override it)."""


def node_down(node: str, reason: str) -> str:
    """Why a job was stopped by its node's failure (``reason``: the ``NodeDown``'s, if any)."""
    return f"node {node} went down" + (f" ({reason})" if reason else "")


def reconfigured(detail: str) -> str:
    """Why a running job was stopped by a new cluster config."""
    return f"reconfigured: {detail}"


def position_tail(position: int | None, length: int | None, vc: str) -> str:
    """The end of a waiting job's why-text: where it stands in its VC's line."""
    return f"; position {position} of {length} in {vc}" if position else ""


def listing_order(
    running: Iterable[T],
    waiting: Iterable[T],
    seq: Callable[[T], int],
    wait_key: Callable[[T], Any],
) -> list[T]:
    """``jobs()``'s order: running jobs as they were submitted, then waiting ones in the order
    the policy would start them (``wait_key``)."""
    return [*sorted(running, key=seq), *sorted(waiting, key=wait_key)]
