"""Where the job service's ids meet the policy's: the one place that converts them.

The store numbers jobs (``int``) and the service speaks those numbers everywhere; a policy names
jobs by ``str`` (the simulator and replay use a trace's names as ids, ``model.JobId``). The
``PolicyPort`` wraps the loop's ``Scheduler``: it takes events about int ids and hands back the
decisions, job views and cluster view with int ids. The pure ETA forecast
(``scheduler/forecast/eta.py``, on str ids) gets its jobs and gives its estimates through the
functions below, and an executor's ``TaskKey``, which names the job by text (pod, container and
cgroup names), is made and read here too. ``Preempt.by``, ``Downgrade.by`` and the views'
``downgraded`` stay text: the service only shows them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, TypeVar

from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import (
    Adopt,
    Cancel,
    ClusterView,
    Decision,
    Downgrade,
    Event,
    Finish,
    JobView,
    NodeDown,
    NodeUp,
    Preempt,
    Reconfigure,
    Requeue,
    Scheduler,
    Start,
    Stop,
    StopTasks,
    Submit,
    TasksEnded,
    Tick,
)
from labhive.scheduler.executors.base import TaskKey
from labhive.scheduler.forecast.eta import RunningJob, Spread, WaitingJob

T = TypeVar("T")

#: What the service tells its policy (job events name jobs by their store id).
ServiceEvent = (
    Submit[int]
    | Finish[int]
    | Requeue[int]
    | Cancel[int]
    | NodeDown
    | NodeUp
    | Reconfigure
    | Tick
    | Adopt[int]
    | TasksEnded[int]
)
#: What the policy tells the service, with the store's ids.
ServiceDecision = Start[int] | Preempt[int] | Downgrade[int] | Stop[int] | StopTasks[int]


def policy_id(job_id: int) -> str:
    """The name a policy, the forecast and an executor know the stored job by."""
    return str(job_id)


def service_id(job_id: str) -> int:
    """The store's id of a job a policy, the forecast or an executor names."""
    return int(job_id)


def _with(record: Any, **changes: object) -> Any:
    """``record`` (a model dataclass) with ``changes``, its other fields as they are: the id
    is the one field the two sides spell apart, so nothing else is copied by name."""
    return replace(record, **changes)


def _to_policy(event: ServiceEvent) -> Event:
    if isinstance(event, NodeDown | NodeUp | Reconfigure | Tick):
        return event
    out: Event = _with(event, job_id=policy_id(event.job_id))
    return out


def _to_service(decision: Decision) -> ServiceDecision:
    out: ServiceDecision = _with(decision, job_id=service_id(decision.job_id))
    return out


def _view_to_service(view: JobView) -> JobView[int]:
    out: JobView[int] = _with(view, job_id=service_id(view.job_id))
    return out


def _cluster_to_service(view: ClusterView) -> ClusterView[int]:
    """The cluster with its GPUs' holders named by the store's ids."""
    nodes = tuple(
        _with(
            n,
            used={g: service_id(j) for g, j in n.used.items()},
            shares={g: {service_id(j): m for j, m in h.items()} for g, h in n.shares.items()},
        )
        if n.used
        else n
        for n in view.nodes
    )
    out: ClusterView[int] = _with(view, nodes=nodes)
    return out


class PolicyPort:
    """The loop's policy as the service sees it: int job ids in and out. Not thread-safe, as
    the policy is not (the loop holds its lock around every call)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def handle(self, event: ServiceEvent) -> list[ServiceDecision]:
        return [_to_service(d) for d in self.scheduler.handle(_to_policy(event))]

    def job(self, job_id: int) -> JobView[int] | None:
        view = self.scheduler.job(policy_id(job_id))
        return None if view is None else _view_to_service(view)

    def jobs(self) -> list[JobView[int]]:
        return [_view_to_service(v) for v in self.scheduler.jobs()]

    def cluster(self) -> ClusterView[int]:
        return _cluster_to_service(self.scheduler.cluster())

    def next_wakeup(self) -> float | None:
        return self.scheduler.next_wakeup()


# ---- the ETA forecast (pure, on str ids) ------------------------------------------------


def running_job(view: JobView[int], spec: JobSpec, left: Spread) -> RunningJob:
    """A running job as the forecast takes it, from its view and what is left of its run."""
    return RunningJob(
        policy_id(view.job_id),
        spec,
        view.tasks,
        left,
        view.opportunistic,
        view.downgraded,
        view.ended,
    )


def waiting_job(job_id: int, spec: JobSpec, submitted: float, spread: Spread) -> WaitingJob:
    return WaitingJob(policy_id(job_id), spec, submitted, spread)


def by_service_id(found: Mapping[str, T]) -> dict[int, T]:
    """The forecast's answers (estimates, VCs), keyed by the store's ids."""
    return {service_id(k): v for k, v in found.items()}


# ---- the executors' task keys ----------------------------------------------------------------


def task_key(job_id: int, attempt: int, role: str, index: int, generation: int = 1) -> TaskKey:
    return TaskKey(policy_id(job_id), attempt, role, index, generation)


def key_job(key: TaskKey) -> int:
    """The store's id of the job a task key names."""
    return service_id(key.job_id)
