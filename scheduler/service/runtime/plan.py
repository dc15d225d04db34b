"""What one pass decided: the store changes for its single transaction, the stops to hand to
the workers, and what to tell observers once it is recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from labhive.scheduler.core.model import Start
from labhive.scheduler.executors.base import TaskExit, TaskHandle, TaskKey
from labhive.scheduler.service.policy_port import ServiceDecision
from labhive.scheduler.service.runtime.runs import Launch, PartDrain, Running, Settle


@dataclass(frozen=True)
class StopOrder:
    """Stop an attempt's tasks (``only`` these, when given): what a worker needs, taken on the
    loop thread when the stop is ordered, and the launches still in flight before it (the
    worker reads their handles once they are done, as it runs after them)."""

    job_id: int
    token: int
    attempt: int
    known: tuple[TaskHandle, ...]  # the handles the loop had collected when it ordered the stop
    launches: tuple[Launch, ...]
    only: frozenset[TaskKey] | None
    why: str  # the stop notice's text
    notify: tuple[TaskHandle, ...]  # the tasks whose files get the stop notice first

    @classmethod
    def of(
        cls,
        job_id: int,
        token: int,
        run: Running,
        only: set[TaskKey] | None,
        why: str,
        notify: list[TaskHandle],
    ) -> StopOrder:
        frozen = None if only is None else frozenset(only)
        known = tuple(h for k, h in run.handles.items() if frozen is None or k in frozen)
        launches = tuple(run.launching)
        return cls(job_id, token, run.attempt, known, launches, frozen, why, tuple(notify))

    def handles(self) -> list[TaskHandle]:
        """(A worker, after the launches before it.) Every handle this stop covers."""
        out = {h.key: h for h in self.known}
        for launch in self.launches:
            for h in launch.handles:
                if self.only is None or h.key in self.only:
                    out.setdefault(h.key, h)
        return list(out.values())


@dataclass
class Plan:
    """The store changes one pass accumulates for its single transaction, and the actions it
    orders once they are recorded."""

    ended_tasks: list[tuple[int, int | None]] = field(default_factory=list)
    settled: list[Settle] = field(default_factory=list)
    cancelled_waiting: list[int] = field(default_factory=list)
    rejected: list[tuple[int, str]] = field(default_factory=list)
    decisions: list[ServiceDecision] = field(default_factory=list)  # in the policy's order
    starts: list[Start[int]] = field(default_factory=list)  # those still standing after the commit
    new_jobs: list[int] = field(default_factory=list)
    stopping: list[tuple[int, str]] = field(default_factory=list)  # (job, why) now draining
    tasks_stopped: list[PartDrain] = field(default_factory=list)  # some tasks are gone
    handles: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (task id, info)
    held_whys: list[tuple[int, str]] = field(default_factory=list)  # starts held back: why
    released: list[Start[int]] = field(default_factory=list)  # held starts now recorded
    #: Stops for the workers, in the order they were decided (``_actuate``).
    stops: list[StopOrder] = field(default_factory=list)
    #: Task exits that were failures, for the observers (monitoring's tally).
    failed_exits: list[tuple[int, TaskExit]] = field(default_factory=list)
    culled: list[tuple[float, float]] = field(default_factory=list)  # (GPUs, idle seconds)
    #: What the policy was given and gave back, in order (the journal: ``service/journal/``).
    journal: list[tuple[Any, list[Any] | str]] = field(default_factory=list)
    #: Set when the policy was built afresh before this pass: what a replay must build.
    fresh_policy: dict[str, Any] | None = None

    def changes_store(self) -> bool:
        """Whether the pass has something to record even when the policy hears nothing."""
        return bool(
            self.ended_tasks or self.settled or self.handles or self.stopping or self.tasks_stopped
        )
