"""A job's lifecycle in virtual time (scenario replay and the simulator): the job record and
how decisions and attempt ends change it.

The states are ``states.JobState`` and the rules for an ended attempt (retries, reason texts)
are ``attempts``'s, which the service applies too; this module only keeps them on a record.
WAITING -> RUNNING -> SUCCEEDED | FAILED | STOPPED; a failed attempt with retries left goes
back to WAITING (attempt + 1); a preempted or stopped attempt goes back to WAITING without
spending a retry. REJECTED is for a spec refused at submit, which never reaches the policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from labhive.scheduler.core.frozen_build import frozen_builder
from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import (
    Decision,
    Downgrade,
    Finish,
    Preempt,
    Requeue,
    Start,
    Stop,
    StopTasks,
    TaskPlacement,
)
from labhive.scheduler.core.states import TERMINAL, JobState
from labhive.scheduler.drivers import attempts

#: Read twice a run, as a module constant: an Enum class's attribute costs ten times a global.
_RUNNING = JobState.RUNNING

__all__ = ["TERMINAL", "JobRecord", "apply_decision", "cancel", "end_attempt", "rejected"]


class _NoStops(dict[tuple[str, int], str]):
    """The stopped tasks of a record none of whose tasks was ever stopped on its own: one empty
    dict, shared by every such record, that refuses to be filled (``_stop_tasks`` gives the
    record a dict of its own first; emptying it, as ``end_attempt`` does, leaves it empty).

    Why: nearly no job has a task stopped on its own, and a million-job run's waiting jobs each
    held an empty dict of their own (80 bytes, made by the dataclass's factory call, eight
    bytecodes a job). It is a ``dict``, so the record reads, prints and compares as before."""

    __slots__ = ()
    #: (Hashed by identity, as the dataclass asks of a default: no one hashes it.)
    __hash__ = object.__hash__  # type: ignore[assignment]

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError("a record's shared empty stopped tasks are not to be filled")

    # (one a line: mypyc compiles no chained assignment in a class body)
    __setitem__ = _refuse
    setdefault = _refuse  # type: ignore[assignment]
    update = _refuse
    __ior__ = _refuse  # type: ignore[assignment]


#: Every record's ``stopped`` until one of its tasks stops on its own.
NO_STOPS = _NoStops()


@dataclass(slots=True)
class JobRecord:
    job_id: str
    spec: JobSpec
    submitted: float
    state: JobState = JobState.WAITING
    attempt: int = 1
    retries_used: int = 0
    reason: str = ""  # why the last transition happened ("" for a fresh submission)
    tasks: tuple[TaskPlacement, ...] = ()
    opportunistic: bool = False
    started: float | None = None  # when the current attempt first ran
    ended: float | None = None
    generation: int = 0  # bumped whenever a run is cut short, to drop stale completions
    preemptions: int = 0
    preempted_by: str = ""  # the job that preempted it last
    downgraded_by: str = ""  # while it runs downgraded (lazy preemption): by whom
    downgrades: int = 0
    interrupted: tuple[float, str] | None = None  # when and why the last run was cut short
    # Tasks stopped on their own (``StopTasks``) that wait to be placed again -> why (until
    # the first such stop, the shared empty ``NO_STOPS``).
    stopped: dict[tuple[str, int], str] = NO_STOPS
    preempted_tasks: tuple[str, ...] = ()  # the tasks its last preemption stopped (() all)
    downgraded_tasks: tuple[str, ...] = ()  # the tasks its last downgrade hit (() all)

    @property
    def retries_left(self) -> int:
        return attempts.retries_left(self.spec.retries, self.retries_used)

    @property
    def done(self) -> bool:
        return self.state in TERMINAL


def rejected(job_id: str, spec: JobSpec, now: float, message: str) -> JobRecord:
    return JobRecord(job_id, spec, now, state=JobState.REJECTED, reason=message, ended=now)


def apply_decision(record: JobRecord, decision: Decision, now: float) -> bool:
    """Update the record for a policy decision; True when a run starts (time it)."""
    match decision:
        case Start():
            fresh = record.state != _RUNNING
            # (The decision's own tuple when none ran: no copy, once per run.)
            record.tasks = (*record.tasks, *decision.tasks) if record.tasks else decision.tasks
            if not fresh and record.stopped:
                return _restarted(record, decision.tasks, now)
            record.state = _RUNNING
            record.opportunistic = decision.opportunistic
            if fresh:
                record.reason = "running opportunistically" if decision.opportunistic else "started"
                if record.interrupted and record.interrupted[0] == now:
                    record.reason += f" again at once after it was {record.interrupted[1]}"
                record.started = now
            return fresh
        case Preempt():
            _back_to_waiting(record, decision.reason, now)
            record.preemptions += 1
            record.preempted_by = decision.by
            record.preempted_tasks = ()
        case StopTasks():
            _stop_tasks(record, decision, now)
        case Stop():
            _back_to_waiting(record, f"stopped: {decision.reason}", now)
        case Downgrade():
            record.opportunistic = not decision.tasks
            record.reason = decision.reason
            record.downgraded_tasks = tuple(task_name(t) for t in decision.tasks)
            if decision.tasks:
                record.reason = f"task {', '.join(record.downgraded_tasks)} {decision.reason}"
            record.downgraded_by = decision.by
            record.downgrades += 1
    return False


def task_name(task: TaskPlacement) -> str:
    """How messages name one task: its role and index (``worker-2``)."""
    return f"{task.role}-{task.index}"


def _stop_tasks(record: JobRecord, decision: StopTasks, now: float) -> None:
    """Some tasks stop, the others run on: the job stays RUNNING, its current run is cut
    (``generation``: the stopped tasks' work is lost, so its end is timed again once they run
    again) and its reason names the waiting tasks."""
    gone = {(t.role, t.index) for t in decision.tasks}
    record.tasks = tuple(t for t in record.tasks if (t.role, t.index) not in gone)
    why = decision.reason if decision.by else f"stopped: {decision.reason}"
    stopped = record.stopped
    if stopped is NO_STOPS:  # its first task stopped on its own: a dict of its own
        stopped = record.stopped = {}
    for task in decision.tasks:
        stopped[(task.role, task.index)] = why
    record.generation += 1
    record.interrupted = (now, decision.reason)
    if decision.by:
        record.preemptions += 1
        record.preempted_by = decision.by
        record.preempted_tasks = tuple(task_name(t) for t in decision.tasks)
    names = ", ".join(task_name(t) for t in decision.tasks)
    record.reason = f"{_running(record)}; task {names} {why}, waiting to be placed again"


def _running(record: JobRecord) -> str:
    return f"{len(record.tasks)} of {sum(r.instances for r in record.spec.roles)} tasks running"


def _restarted(record: JobRecord, tasks: tuple[TaskPlacement, ...], now: float) -> bool:
    """Stopped tasks run again; once none waits, the run is timed afresh (True)."""
    for task in tasks:
        record.stopped.pop((task.role, task.index), None)
    if record.stopped:
        names = ", ".join(f"{r}-{i}" for r, i in sorted(record.stopped))
        record.reason = f"{_running(record)}; task {names} waits to be placed again"
        return False
    record.reason = "every task running again"
    if record.interrupted and record.interrupted[0] == now:
        record.reason += f" at once after it was {record.interrupted[1]}"
    record.generation += 1
    return True


def _back_to_waiting(record: JobRecord, reason: str, now: float) -> None:
    record.stopped.clear()
    record.interrupted = (now, reason)
    record.downgraded_by = ""
    record.state = JobState.WAITING
    record.tasks = ()
    record.reason = reason
    record.started = None
    record.generation += 1


def end_attempt(record: JobRecord, ok: bool, now: float) -> Finish | Requeue:
    """The attempt ended; the event to give the policy (a retry requeues the job)."""
    record.generation += 1
    record.tasks = ()
    record.stopped.clear()
    record.started = None
    # (A success ends the same way whatever the retries, and a failure without retries
    # allowed as ``attempts.after_failure`` ends it, FAILED: no call for either, once a job.)
    if ok:
        end = attempts.SUCCEEDED
    else:
        retries = record.spec.retries
        end = attempts.after_failure(retries, record.retries_used) if retries else attempts.FAILED
    record.state, record.reason = end.state, end.text
    if end.requeued:
        record.attempt += 1
        record.retries_used += end.spend_retry
        return Requeue(record.job_id, now)
    record.ended = now
    return _finished(record.job_id, now)


#: ``Finish(job_id, now)``, the same frozen event, built without ``__init__`` (once per job).
_finished: Callable[[str, float], Finish] = frozen_builder(Finish)


def cancel(record: JobRecord, now: float) -> None:
    record.generation += 1
    record.state, record.reason, record.ended, record.tasks = JobState.STOPPED, "cancelled", now, ()
