"""The jobs a journal recorded: each submission, its spec as the policy saw it, and how long it
really ran, for ``labhive whatif`` and ``labhive journal export``.

Pure: passes in (``table.read``), jobs out. A job's runs are read off the decisions and events
the loop journalled: a run opens at the policy's ``Start`` for it (or at an ``Adopt`` after a
restart, when none was open) and closes at its ``Finish``, ``Cancel`` or ``Requeue``, a
``Preempt``/``Stop`` decision, or a ``Submit`` of it again (a recovery that found it waiting).
Times are the events' own (the loop stamps them with the wall clock), else the pass's. Read
from ``--since`` on, a job submitted before that is not in the recording (its later events are
passed over, counted when it is adopted), and a job the service found waiting at a restart in
the span is submitted again there (``Submit`` on recovery): it counts from its first
``Submit`` seen.
What this cannot see: a start the service held back while a preempted job drained shows as
starting when the policy placed it (seconds early, at most the grace period), and a job's
outcome (the journal's ``Finish`` says the attempt ended, not how): the export reads the store
for that (``outcomes``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import (
    Adopt,
    Cancel,
    Finish,
    Preempt,
    Requeue,
    Start,
    Stop,
    Submit,
    TaskPlacement,
)
from labhive.scheduler.service.journal.table import Pass

#: How a recorded job left the policy; ``RUNNING``/``WAITING``: it had not by the recording's end.
FINISHED, CANCELLED, RUNNING, WAITING = "finished", "cancelled", "running", "waiting"


@dataclass
class Run:
    """One stretch of a job holding GPUs, and where."""

    start: float
    end: float | None = None
    tasks: tuple[TaskPlacement, ...] = ()


@dataclass
class RecordedJob:
    job_id: int
    spec: JobSpec
    submit: float
    runs: list[Run] = field(default_factory=list)
    left: float | None = None  # when it left the policy (finished or cancelled)
    how: str = WAITING

    @property
    def run_seconds(self) -> float:
        """Its real service time: every closed run, summed (as Philly's "run" time is)."""
        return sum(r.end - r.start for r in self.runs if r.end is not None)

    @property
    def first_start(self) -> float | None:
        return self.runs[0].start if self.runs else None

    @property
    def gpus(self) -> int:
        return self.spec.total_gpus

    @property
    def ran(self) -> bool:
        return bool(self.runs)


@dataclass
class Recording:
    """The jobs, in submit order, and the span the journal covered."""

    jobs: list[RecordedJob]
    begin: float
    end: float
    skipped: Counter[str] = field(default_factory=Counter)  # jobs left out, by reason
    policy: str | None = None  # the policy the service ran (its last start's)


def recorded_jobs(passes: Iterable[Pass]) -> Recording:
    """Walk the journal once; every job submitted in it, with its runs."""
    jobs: dict[int, RecordedJob] = {}
    skipped: Counter[str] = Counter()
    begin: float | None = None
    end = 0.0
    policy: str | None = None
    for p in passes:
        if p.fresh and p.policy is not None:
            policy = p.policy.get("name") or policy
        if p.gap is not None:
            skipped["journal gap (a pass not recorded): jobs after it may miss events"] += 1
        for event, result in p.steps:
            t = float(getattr(event, "time", 0.0) or p.t)
            begin = t if begin is None else min(begin, t)
            end = max(end, t)
            _event(jobs, event, t, skipped)
            if isinstance(result, list):
                _decisions(jobs, result, t)
    ordered = sorted(jobs.values(), key=lambda j: (j.submit, j.job_id))
    for job in ordered:
        if job.how == RUNNING and job.runs and job.runs[-1].end is None:
            job.runs[-1].end = end  # still running when the recording ends: censored
    return Recording(ordered, begin or 0.0, end, skipped, policy)


def _event(jobs: dict[int, RecordedJob], event: Any, t: float, skipped: Counter[str]) -> None:
    if isinstance(event, Submit):
        job = jobs.get(event.job_id)
        if job is None:
            jobs[event.job_id] = RecordedJob(event.job_id, event.spec, t)
        else:  # a recovery found it waiting: whatever run was open ended unseen
            _close(job, t, WAITING)
        return
    if isinstance(event, Adopt):
        job = jobs.get(event.job_id)
        if job is None:  # submitted before the span (``--since``, or a pruned journal)
            skipped["submitted before the journal's span"] += 1
            return
        if not job.runs or job.runs[-1].end is not None:
            job.runs.append(Run(t, tasks=event.tasks))
        job.how = RUNNING
        return
    job_id = getattr(event, "job_id", None)
    job = jobs.get(job_id) if isinstance(job_id, int) else None
    if job is None:
        return
    if isinstance(event, Finish):
        _close(job, t, FINISHED)
        job.left = t
    elif isinstance(event, Cancel):
        _close(job, t, CANCELLED)
        job.left = t
    elif isinstance(event, Requeue):
        _close(job, t, WAITING)


def _decisions(jobs: dict[int, RecordedJob], decisions: list[Any], t: float) -> None:
    for d in decisions:
        job = jobs.get(getattr(d, "job_id", None))  # type: ignore[arg-type]
        if job is None:
            continue
        if isinstance(d, Start):
            if not job.runs or job.runs[-1].end is not None:
                job.runs.append(Run(t, tasks=d.tasks))
            else:  # another task of an incremental job: the run goes on, wider
                job.runs[-1].tasks += d.tasks
            job.how = RUNNING
        elif isinstance(d, Preempt | Stop):
            _close(job, t, WAITING)


def _close(job: RecordedJob, t: float, how: str) -> None:
    if job.runs and job.runs[-1].end is None:
        job.runs[-1].end = t
    job.how = how
