"""The trace simulator: the scenario replayer's virtual-time driver, fed by a job stream.

``Simulation`` is a ``VirtualTimeDriver`` (``scheduler/drivers/replay.py``): the same clock, the
same job records and lifecycle (``scheduler/drivers/lifecycle.py``), the same way decisions are
applied, so a scenario gives the same placements under ``labhive replay`` and ``labhive simulate``.
What the simulator adds:
- submissions stream from the sorted trace instead of sitting in the heap (100k jobs);
- a run lasts the job's *remaining* service time: a preempted or stopped run keeps the
  progress up to its last checkpoint (``checkpoint`` seconds apart; none by default, so it
  reruns its whole duration, as in replay), and a restart after a preemption costs
  ``restart_cost`` more seconds of service (restoring state; 0 by default); the progress
  lost and the restart costs are the job's *wasted* GPU time;
- a task (or affinity group) stopped on its own (``StopTasks``) loses its progress since the
  last checkpoint, and so does the job (its tasks train in step): the job's remaining time
  grows back by what the task lost, the job makes no progress until the task runs again, and
  then it runs its remaining time afresh;
- a trace job that ended Failed or Killed ends FAILED after its recorded duration;
- a job with a declared time limit shorter than its remaining time is cut at its limit and ends
  FAILED (as the service stops it);
- ``Tick`` events at the times the policy asks for (``next_wakeup``, e.g. LAS demotions);
- the metrics: each job's first start, end and GPU time, and a ``Timeline`` of integrals.
At one instant, completions run first, then scripted actions and wake-ups, then arrivals, and
only then does the policy decide, once, on all of them: ``VirtualTimeDriver.drive`` is the loop.
"""

from __future__ import annotations

import dataclasses
import gc
import math
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field
from functools import partial
from heapq import heappush
from operator import attrgetter
from typing import Any

from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import (
    Decision,
    Preempt,
    Scheduler,
    Start,
    Stop,
    StopTasks,
    TaskPlacement,
    Tick,
)
from labhive.scheduler.core.states import JobState
from labhive.scheduler.drivers.lifecycle import JobRecord, apply_decision, end_attempt
from labhive.scheduler.drivers.replay import ACTION, COMPLETION, VirtualTimeDriver
from labhive.scheduler.sim.jobtable import JobTable
from labhive.scheduler.sim.timeline import Timeline

#: Trace statuses that mean the job ended well; any other ends it FAILED.
OK_STATUSES = frozenset({"", "pass", "passed", "succeeded", "success", "completed", "ok"})
#: Trace statuses seen, and whether each is in ``OK_STATUSES`` (``SimJob.ok``).
_OK_BY_STATUS: dict[str, bool] = {}
#: States read a few times a job, as module constants: reading an Enum class's attribute
#: costs 0.06 us, ten times a global's.
_RUNNING, _REJECTED = JobState.RUNNING, JobState.REJECTED
#: A run without end (a scenario job until its scripted finish): ``remaining == _INF``.
_INF = math.inf
#: Wake-up times closer than this are one instant: a wake-up no earlier than the planned one
#: less this is planned already (``_plan_wakeup``, and ``_count_decided``'s test before its
#: call), and a tick whose wanted time is no later than now plus this is due (``tick``). One
#: name for the three tests, so that they cannot come to disagree on which times are one.
WAKE_SLACK = 1e-9
#: A task's GPU indices (``_time_run`` sums their lengths in C).
_GPUS_OF = attrgetter("gpus")
#: Record states in which a job has ended after running (its JCT counts).
ENDED = frozenset({JobState.SUCCEEDED, JobState.FAILED})


@dataclass(slots=True, eq=False)
class SimJob:
    """One job of the workload and what happened to it; the per-job CSV is made of these."""

    job_id: str
    spec: JobSpec
    submit: float
    duration: float
    vc: str = ""  # the VC it is reported under (the trace's), which may differ from spec.vc
    user: str = ""
    status: str = "Pass"  # as the trace recorded it
    record: JobRecord | None = None
    remaining: float = 0.0
    first_start: float | None = None
    end: float | None = None
    running: bool = False
    run_start: float = 0.0
    gpus_held: int = 0
    gpu_seconds: float = 0.0  # GPU time held, lost work included
    wasted_gpu_seconds: float = 0.0  # progress lost to preemptions, plus restart costs
    run_seconds: float = 0.0  # time running, over all runs
    stops: int = 0
    placed: tuple[TaskPlacement, ...] = ()  # its last run's tasks
    # The spec's, read on every change (a property cost 4%); -1: summed from the spec's roles
    # here, unless the caller knows it (a trace job's, without the sum: 0.4 us a job).
    gpus: int = -1
    row: int = -1  # its row in the run's ``JobTable``
    timed_at: float = 0.0  # when its current run was timed (progress counts from there)
    partial: bool = False  # some tasks were stopped on their own and wait: no progress
    entered: bool = False  # arrived this instant, not yet waiting in the timeline (``_enter``)

    def __post_init__(self) -> None:
        self.remaining = self.duration
        self.vc = self.vc or self.spec.vc
        self.user = self.user or (self.spec.user or "")
        if self.gpus < 0:
            self.gpus = self.spec.total_gpus

    @property
    def nodes(self) -> tuple[str, ...]:
        """Where its last run ran (worked out when asked: only per-job output asks)."""
        return tuple(sorted({t.node for t in self.placed}))

    @property
    def state(self) -> str:
        return self.record.state if self.record is not None else "PENDING"

    @property
    def ok(self) -> bool:
        # Each status's verdict worked out once (a trace has a few): asked once per run.
        ok = _OK_BY_STATUS.get(self.status)
        if ok is None:
            ok = self.status.strip().lower() in OK_STATUSES
            if len(_OK_BY_STATUS) < 1024:
                _OK_BY_STATUS[self.status] = ok
        return ok

    @property
    def tasks(self) -> tuple[TaskPlacement, ...]:
        return self.record.tasks if self.record is not None else ()

    @property
    def reason(self) -> str:
        return self.record.reason if self.record is not None else ""

    @property
    def preemptions(self) -> int:
        return self.record.preemptions if self.record is not None else 0

    @property
    def attempts(self) -> int:
        return self.record.attempt if self.record is not None else 0

    @property
    def jct(self) -> float | None:
        return self.end - self.submit if self.end is not None and self.state in ENDED else None

    @property
    def queue_delay(self) -> float | None:
        return None if self.first_start is None else self.first_start - self.submit


#: ``SimJob``'s fields, as ``trace_sim_job`` sets them (it fails at import if they change).
_SIM_JOB_FIELDS = (
    *("job_id", "spec", "submit", "duration", "vc", "user", "status", "record", "remaining"),
    *("first_start", "end", "running", "run_start", "gpus_held", "gpu_seconds"),
    *("wasted_gpu_seconds", "run_seconds", "stops", "placed", "gpus", "row", "timed_at"),
    *("partial", "entered"),
)
if tuple(f.name for f in dataclasses.fields(SimJob)) != _SIM_JOB_FIELDS:
    raise ImportError("SimJob's fields changed: update _SIM_JOB_FIELDS and trace_sim_job")


def trace_sim_job(
    job_id: str,
    spec: JobSpec,
    submit: float,
    duration: float,
    vc: str,
    user: str,
    status: str,
    gpus: int,
) -> SimJob:
    """``SimJob(job_id, spec, submit, duration, vc, user, status, gpus=gpus)``, the same job,
    its slots set here: the dataclass's ``__init__`` binds 25 arguments and calls
    ``__post_init__``, 1,700 instructions a trace job more than this."""
    job: SimJob = SimJob.__new__(SimJob)
    job.job_id = job_id
    job.spec = spec
    job.submit = submit
    job.duration = duration
    job.vc = vc or spec.vc
    job.user = user or (spec.user or "")
    job.status = status
    job.record = None
    job.remaining = duration
    job.first_start = None
    job.end = None
    job.running = False
    job.run_start = 0.0
    job.gpus_held = 0
    job.gpu_seconds = 0.0
    job.wasted_gpu_seconds = 0.0
    job.run_seconds = 0.0
    job.stops = 0
    job.placed = ()
    job.gpus = gpus
    job.row = -1
    job.timed_at = 0.0
    job.partial = False
    job.entered = False
    return job


@dataclass
class SimResult:
    policy: str
    jobs: list[SimJob]  # every job, unless the run was told not to keep them (``keep_jobs``)
    timeline: Timeline
    total_gpus: int
    end_time: float
    events: int = 0
    wakeups: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    table: JobTable = field(default_factory=JobTable)  # every job's figures, for the metrics


class Records(MutableMapping[str, JobRecord]):
    """The simulator's ``records``: each job's record, read from its ``SimJob`` by id.

    ``VirtualTimeDriver`` keeps records in a dict of their own; the simulator holds every job
    it has not forgotten in ``sim_jobs`` already, and the job holds its record (``_admit``
    sets it there), so a second dict with an entry a job (set once, popped once, up to a
    million entries: a cache miss each, at a million jobs) only repeated it. The same
    mapping to its readers (``end``, ``cancel``, scenarios' actions, tests): a job's id to
    its last submission's record, for the jobs not forgotten (``_done``), in arrival order."""

    __slots__ = ("_jobs",)

    def __init__(self, jobs: dict[str, SimJob]) -> None:
        self._jobs = jobs

    def __getitem__(self, job_id: str) -> JobRecord:
        record = self._jobs[job_id].record
        if record is None:  # (a job between its arrival and its record: none yet)
            raise KeyError(job_id)
        return record

    def __setitem__(self, job_id: str, record: JobRecord) -> None:
        self._jobs[job_id].record = record

    def __delitem__(self, job_id: str) -> None:
        self._jobs[job_id].record = None

    def __iter__(self) -> Iterator[str]:
        return (job_id for job_id, job in self._jobs.items() if job.record is not None)

    def __len__(self) -> int:
        return sum(job.record is not None for job in self._jobs.values())


class Simulation(VirtualTimeDriver):
    """Drive ``scheduler`` through ``jobs`` (sorted by submit time) and scheduled actions.

    ``jobs`` may be any iterable, a generator too: it is read as virtual time reaches each
    submission, so a million-job trace never sits in memory as a list of jobs. With
    ``keep_jobs=False`` a job that is done is only a row of figures in ``table`` (its record
    and ``SimJob`` are dropped), so memory holds just the jobs in flight; per-job output
    (``SimResult.jobs``) then is empty."""

    now: float

    def __init__(
        self,
        scheduler: Scheduler,
        jobs: Iterable[SimJob],
        *,
        total_gpus: int,
        checkpoint: float | None = None,
        restart_cost: float = 0.0,
        progress: Callable[[int], None] | None = None,
        observe: Callable[[Simulation, str], None] | None = None,
        keep_jobs: bool = True,
    ) -> None:
        super().__init__(scheduler)
        self.keep_jobs = keep_jobs
        self.table = JobTable()
        if checkpoint is not None and checkpoint <= 0:
            raise ValueError("checkpoint interval must be positive")
        self.jobs = iter(jobs)
        self.sim_jobs: dict[str, SimJob] = {}
        # A job's record is its ``SimJob``'s (``_admit`` sets it there): ``records`` reads them
        # through ``sim_jobs``, so a job is an entry in one big dict, not two (``Records``).
        self.records = Records(self.sim_jobs)
        self.checkpoint = checkpoint
        if restart_cost < 0:
            raise ValueError("restart cost must not be negative")
        self.restart_cost = restart_cost
        self.progress = progress
        self.observe = observe
        self.timeline = Timeline(total_gpus)
        self.total_gpus = total_gpus
        self.events = 0
        self.wakeups = 0
        self._wake: float | None = None
        self._entered: list[SimJob] = []  # jobs that arrived this instant (``_enter``)
        self._ended = 0  # jobs ended since the last progress report

    # ---- the loop ------------------------------------------------------------------------

    def run(self) -> SimResult:
        """Replay every job and action to the end; the result and its metrics.

        The cyclic garbage collector is off meanwhile (and back as it was after): a replay
        makes no reference cycles (tests/test_sim_no_cycles.py holds every policy to it, on
        both of ``drive``'s paths), so the collector's passes found nothing to free, yet each
        walked what had lived since the last: at a million contended jobs, with up to a
        million queued objects alive, they cost 8% of a Capacity run's CPU seconds and 5% of
        a DRF run's (one sitting, off against the eighth session's setting of 100 times rarer
        passes with what existed before the run frozen). What an ``observe`` or ``progress``
        callback makes in cycles is freed at the first collection after the run."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run()
        finally:
            if enabled:
                gc.enable()

    def _run(self) -> SimResult:
        # Without an observer or a progress bar, an event is only counted (``_count``).
        counted = self.observe is None and self.progress is None
        if counted:  # (an instant only moves the timeline on: ``_count_decided``)
            instant = self.timeline.advance
            self.drive(self._count, self.jobs, self._arrive, instant, self._count_decided)
        else:
            self.drive(self._seen, self.jobs, self._arrive, self._instant)
        if self.progress is not None and self._ended:
            self.progress(self._ended)
        self._count_entered()
        self.timeline.close(self.now)
        for left in self.sim_jobs.values():  # jobs not done (and, when kept, all of them)
            self.table.fill(left.row, left)
        return SimResult(
            policy=getattr(self.scheduler, "name", type(self.scheduler).__name__),
            jobs=list(self.sim_jobs.values()) if self.keep_jobs else [],
            timeline=self.timeline,
            total_gpus=self.total_gpus,
            end_time=self.now,
            events=self.events,
            wakeups=self.wakeups,
            table=self.table,
        )

    def _instant(self, time: float) -> None:
        """An instant begins (the driver moves the clock to it next): time moved on, so the
        jobs that arrived and did not start are waiting, and the timeline's integrals grow."""
        if time > self.now or self.timeline.start is None:
            if self._entered:
                self._count_entered()
            self.timeline.advance(time)

    def _count(self, label: str) -> None:
        """One event done and decided, where no one watches: count it, plan a wake-up."""
        self.events += 1
        wake = self.scheduler.next_wakeup()
        if wake is not None:  # (none: nothing to plan, and no call to say so)
            self._plan_wakeup(wake)

    def _count_decided(self, labels: list[str]) -> None:
        """One decision's events, where no one watches: count them, plan a wake-up. The
        policy is asked once per decision, not per event: nothing changes it between its
        events' questions, so each would get the same answer (LAS ranks its waiting heads to
        answer: 8% of its work, asked per event). The wake-up is planned once, not once per
        event: a second ``_plan_wakeup`` of the same time either returns at once (the first
        planned it, or an earlier one) or, where the time wanted has passed, pushes a tick for
        ``now`` behind the first one's, which finds ``_wake`` reset by the first (nothing
        decides between the two: the instant's events wait for its one decision) and does
        nothing; the same instants, ticks and figures (``test_sim_wakeups``).

        The jobs that arrived and did not start wait from here for the timeline (``_instant``
        counts them when time moves on where someone watches): every arrival is followed by
        its decision before time moves, and a wait counted at the instant it begins adds to
        no integral until time moves, so the figures are the same, and the instant itself is
        only ``Timeline.advance`` (no call of ``_instant`` twice a job)."""
        if self._entered:
            self._count_entered()
        self.events += len(labels)
        wake = self.scheduler.next_wakeup() if labels else None
        if wake is not None:
            # ``_plan_wakeup``'s own first test, before its call (``not >=``: a NaN as it):
            # LAS mostly wants the wake-up it has planned already, and the call returned at
            # once (2.7 calls a job).
            planned = self._wake
            if planned is None or not wake >= planned - WAKE_SLACK:
                self._plan_wakeup(wake)

    def _seen(self, label: str) -> None:
        """One event done and decided: count it, ask for the next wake-up, report progress."""
        self._count(label)
        if self.observe is not None:
            self.observe(self, label)
        if self.progress is not None and label.endswith(("finished", "failed")):
            self._ended += 1
            if self._ended == 512:
                self.progress(self._ended)
                self._ended = 0

    def _arrive(self, job: SimJob) -> str:
        """A trace job arrives: ``_enter`` for a job never seen (it cannot have entered in
        this instant already), written out: once a job, one call less."""
        if job.record is not None:
            raise ValueError("a SimJob records one run; build fresh jobs for each simulation")
        self.sim_jobs[job.job_id] = job
        job.row = self.table.add(job)
        job.entered = True
        self._entered.append(job)
        record = self._admit(job.job_id, job.spec, job)
        if record.state == _REJECTED:
            job.entered = False
            self._done(job)
        if self.observe is None:  # the label is only counted: no one reads the job's name
            return "submitted"
        return f"{job.spec.name} submitted" + (
            " (rejected)" if record.state == JobState.REJECTED else ""
        )

    def _plan_wakeup(self, wake: float | None) -> None:
        if wake is None or (self._wake is not None and wake >= self._wake - WAKE_SLACK):
            return
        self._wake = when = max(wake, self.now)

        def tick() -> str | None:
            if self._wake != when:
                return None  # superseded by an earlier request
            self._wake = None
            wanted = self.scheduler.next_wakeup()
            if wanted is None or wanted > self.now + WAKE_SLACK:
                self._plan_wakeup(wanted)  # what it was for is gone (the job ended): not a step
                return None
            self.wakeups += 1
            self.feed(Tick(self.now))
            return "tick"

        # (``at``, without its call, as ``_time_end``'s: LAS plans a tick about once a job.)
        heappush(self._heap, (when, ACTION, next(self._order), tick))

    # ---- lifecycle hooks (the records themselves are the replayer's) ----------------------

    def submit(self, job_id: str, spec: JobSpec, duration: float | None = None) -> JobRecord:
        job = self.sim_jobs.get(job_id)
        if job is None:  # a scenario submission, not from the trace
            job = self.sim_jobs[job_id] = SimJob(job_id, spec, self.now, duration or 0.0)
            job.row = self.table.add(job)
            if duration is None:
                job.remaining = math.inf  # runs until a scripted finish, fail or cancel
        return self._enter(job, spec)

    def _enter(self, job: SimJob, spec: JobSpec) -> JobRecord:
        """``submit`` once the job is known (where a trace job's arrival starts); its run
        is timed by ``job.remaining``, not by the replayer's ``durations``.

        The job waits from now, but the timeline counts it only when time moves on, unless it
        starts (or is rejected) first: its integrals grow only with time, so a wait and a start
        at one instant add nothing, and most jobs start as they arrive (two updates a job)."""
        if job.entered:  # submitted again in this instant (a scenario may): counted now
            self.timeline.wait(job, +1)
        else:
            job.entered = True
            self._entered.append(job)
        # (``_admit`` gives the job its new record before the policy is fed: a policy without
        # ``handle_batch`` decides inside it, on the new record, not its last submission's.)
        record = self._admit(job.job_id, spec, job)
        if record.state == _REJECTED:
            job.entered = False
            self._done(job)
        return record

    def end(self, job_id: str, ok: bool) -> None:
        job = self.sim_jobs.get(job_id)
        record = None if job is None else job.record
        if job is None or record is None or not job.running:
            return super().end(job_id, ok)
        self._end_run(job, record, ok)

    def _end_run(self, job: SimJob, record: JobRecord, ok: bool) -> None:
        """``end`` of a running job, found (where its timed completion comes in).

        The run ends having served all it had to (``_stopped(job, job.remaining)``, written
        out, once a job): nothing is lost, and ``remaining`` drops to 0.0 (``x - x`` is 0.0,
        and ``inf - inf``, NaN, was clamped to 0.0 too)."""
        now = self.now
        ran = now - job.run_start
        held = job.gpus_held
        job.gpu_seconds += ran * held
        job.run_seconds += ran
        self.timeline.run(job, -held)
        job.gpus_held = 0
        job.running = job.partial = False
        job.remaining = 0.0
        # (``record.retries_left > 0``, without the property's two calls: once a failed job.)
        retry = not ok and record.spec.retries > record.retries_used
        if retry:  # the next attempt runs from the start, and may start at once
            job.remaining = job.duration
            self.timeline.wait(job, +1)
        else:
            job.end = now
        # ``_end_attempt(record, ok)``, written out (once a job): the instant's batch is open
        # (``drive``) unless a scenario ends the job.
        if record.state == _RUNNING:
            event = end_attempt(record, ok, now)
            batch = self._batch
            if batch is not None:
                batch.append(event)
            else:
                self.feed(event)
        if not retry:
            self._done(job)

    def cancel(self, job_id: str) -> None:
        job = self.sim_jobs.get(job_id)
        record = None if job is None else job.record
        if job is not None and record is not None and not record.done:
            if job.running:
                self._stopped(job, keep=0.0)
            elif job.entered:
                job.entered = False  # (never counted as waiting)
            else:
                self.timeline.wait(job, -1)
            job.end = self.now
        super().cancel(job_id)
        if job is not None and record is not None and record.done:
            self._done(job)

    def _count_entered(self) -> None:
        """The jobs that arrived this instant and did not start wait, for the timeline."""
        for job in self._entered:
            if job.entered:
                job.entered = False
                self.timeline.wait(job, +1)
        self._entered.clear()

    def _done(self, job: SimJob) -> None:
        """The job will not change again: its figures go to the table; unless jobs are kept,
        the job and its record are forgotten (a million-job run holds only those in flight)."""
        self.table.fill(job.row, job)
        if not self.keep_jobs:
            self.sim_jobs.pop(job.job_id, None)  # (its record with it: ``Records``)

    def apply(self, decisions: list[Decision]) -> None:
        """The replayer's ``apply``, each decision's ``apply_one`` written out (a call less for
        every start of every job)."""
        self.decisions += len(decisions)
        sim_jobs = self.sim_jobs
        for d in decisions:
            # Every record is a job's (``_admit`` sets it before the policy is fed, so one
            # decided inside ``_admit`` finds it too): one look-up a decision.
            job = sim_jobs.get(d.job_id)
            if job is None:
                continue
            record = job.record
            if record is None:
                continue
            if job.running:
                self._apply_running(record, job, d)
            elif apply_decision(record, d, self.now):  # a waiting job starts (a ``Start``)
                self._time_run(record, job)

    def apply_one(self, record: JobRecord, d: Decision) -> None:
        """The replayer's ``apply_decision``, with the simulator's bookkeeping around it: a
        run cut short is accounted before the record changes, so a job stopped and restarted
        in one instant is timed right."""
        job = self.sim_jobs.get(d.job_id)
        if job is not None and job.running:
            self._apply_running(record, job, d)
        elif apply_decision(record, d, self.now):  # a waiting job starts (True: a ``Start``)
            self._time_run(record, job)

    def _apply_running(self, record: JobRecord, job: SimJob, d: Decision) -> None:
        """``apply_one`` for a job that runs: stopped, preempted, or more of its tasks."""
        if isinstance(d, Preempt | Stop):
            self._stopped(job, keep=None)
            self.timeline.wait(job, +1)
            if isinstance(d, Preempt):
                self.timeline.preempted(job)
            else:
                job.stops += 1
        elif isinstance(d, StopTasks):
            self._tasks_stopped(job, d)
        apply_decision(record, d, self.now)
        if isinstance(d, Start):  # more tasks of an incremental job, or stopped ones again
            more = sum(len(t.gpus) for t in d.tasks)
            job.gpu_seconds += (self.now - job.run_start) * job.gpus_held
            job.run_start = self.now
            job.gpus_held += more
            job.placed = record.tasks
            self.timeline.run(job, more)
            if job.partial and not record.stopped:  # every stopped task runs again
                job.partial = False
                self._time_end(record, job)

    def _tasks_stopped(self, job: SimJob, d: StopTasks) -> None:
        """Some tasks stop, the others run on (they hold their GPUs); the first such stop of
        a run costs the job its progress since the last checkpoint."""
        lost = sum(len(t.gpus) for t in d.tasks)
        job.gpu_seconds += (self.now - job.run_start) * job.gpus_held
        job.run_start = self.now
        job.gpus_held -= lost
        self.timeline.run(job, -lost)
        if d.by:
            self.timeline.preempted(job)
        else:
            job.stops += 1
        if job.partial or job.remaining == _INF:
            return
        job.partial = True
        ran = self.now - job.timed_at
        keep = min(self._saved(ran), job.remaining)
        job.wasted_gpu_seconds += (ran - keep + self.restart_cost) * lost
        job.remaining = max(0.0, job.remaining - keep) + self.restart_cost

    def _time_run(self, record: JobRecord, job: SimJob | None = None) -> None:
        """A run starts: time its end by the job's remaining service time."""
        job = self.sim_jobs[record.job_id] if job is None else job
        job.running = True
        job.run_start = self.now
        # Its GPUs, summed in C (no bytecode a task: a trace job is a gang of 1-GPU tasks).
        job.gpus_held = held = sum(map(len, map(_GPUS_OF, record.tasks)))
        job.placed = record.tasks
        if job.first_start is None:
            job.first_start = self.now
        if job.entered:  # it starts as it arrives: it never waited for the timeline
            job.entered = False
            entered = self._entered
            if entered[-1] is job:  # (the usual case: the instant's last arrival, no walk)
                entered.pop()
            self.timeline.run(job, held)
        else:
            self.timeline.started(job, held)
        self._time_end(record, job)

    def _time_end(self, record: JobRecord, job: SimJob) -> None:
        """Time the run's end by the job's remaining service time, from now."""
        job.timed_at = self.now
        if job.remaining == _INF:  # (no call of ``math.isinf``: once a run)
            return
        # A declared time limit cuts the run short, as the service stops it: it ends FAILED.
        limit = record.spec.time_limit
        run_for = job.remaining if limit is None else min(job.remaining, limit)
        # (``at``, without its call: once a run. The completion is a ``partial`` of
        # ``_complete``, not a closure: two objects a run, not a function and five cells.)
        complete: Callable[[], str | None] = partial(
            self._complete, record, record.generation, job, run_for < job.remaining
        )
        heappush(self._heap, (self.now + run_for, COMPLETION, next(self._order), complete))

    def _complete(self, record: JobRecord, generation: int, job: SimJob, cut: bool) -> str | None:
        """A timed run's end comes: unless the run was cut short since (``generation``), the
        job ends, FAILED if its trace says so or its time limit ``cut`` it."""
        if record.generation != generation or record.state != _RUNNING:
            return None
        # (``job.ok``'s verdict, known after a job of its status: no property call.)
        ok = _OK_BY_STATUS.get(job.status)
        if ok is None:
            ok = job.ok
        ok = ok and not cut
        # The record is the job's, and in ``records``: it runs, so it was not dropped.
        if job.running and job.record is record:
            self._end_run(job, record, ok)  # ``end``'s look-ups, already done
        else:
            self.end(record.job_id, ok)
        if self.observe is None:  # the label is only counted, as an end if it says so
            return "finished" if ok else "failed"
        return f"{record.spec.name} {'finished' if ok else 'failed'}"

    def _stopped(self, job: SimJob, keep: float | None) -> None:
        """The run ends; ``remaining`` drops by ``keep`` (None: cut short by the policy, so
        the checkpointed progress is kept, the rest is lost and the restart costs extra)."""
        ran = self.now - job.run_start
        job.gpu_seconds += ran * job.gpus_held
        job.run_seconds += ran
        self.timeline.run(job, -job.gpus_held)
        held, job.gpus_held = job.gpus_held, 0
        job.running = False
        job.partial = False
        extra = 0.0
        if keep is None:
            keep = min(self._saved(ran), job.remaining)
            extra = self.restart_cost if job.remaining != _INF else 0.0
            job.wasted_gpu_seconds += (ran - keep + extra) * held
        left = job.remaining - keep
        job.remaining = (left if left > 0.0 else 0.0) + extra  # (``max(0.0, left)``, no call)

    def _saved(self, ran: float) -> float:
        if self.checkpoint is None:
            return 0.0
        return math.floor(ran / self.checkpoint + 1e-9) * self.checkpoint
