"""The event-heap driver: a policy, a stream of jobs and scripted events, in virtual time.

The driver owns time and the job lifecycle; the policy only turns events into decisions. A
job's attempt ends when its remaining service time has run (its recorded duration: failed
and killed trace jobs replay just as long as they ran), unless a decision stops it first. A
preempted or stopped job keeps the progress up to its last checkpoint (``checkpoint``
seconds apart from its start; none by default, so it reruns its whole duration) and waits
again. At one instant, ends of attempts are applied before scripted events, and those before
new submissions, so freed GPUs are seen by the jobs that arrive then.

Cost: one heap push per attempt and per policy wake-up; submissions stream from the sorted
job list without entering the heap; the metrics integrals update in O(1) per change.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from labhive.scheduler.jobs import JobSpec
from labhive.scheduler.model import (
    Cancel,
    Decision,
    Downgrade,
    Event,
    Finish,
    NodeDown,
    NodeUp,
    Preempt,
    Requeue,
    Scheduler,
    SpecRejected,
    Start,
    Stop,
    Submit,
    TaskPlacement,
    Tick,
)
from labhive.scheduler.sim.timeline import Timeline

# event kinds, in the order they apply at one instant
_END, _SCRIPT, _SUBMIT, _TICK = 0, 1, 2, 3


@dataclass(slots=True, eq=False)
class SimJob:
    """A job's life in the simulation; the per-job CSV is made of these."""

    job_id: str
    spec: JobSpec
    submit: float
    duration: float
    vc: str = ""  # the VC it is reported under (the trace's), which may differ from spec.vc
    user: str = ""
    status: str = "Pass"
    state: str = "PENDING"  # PENDING, WAITING, RUNNING, DONE, FAILED, CANCELLED, REJECTED
    remaining: float = 0.0
    first_start: float | None = None
    end: float | None = None
    run_start: float = 0.0
    gpus_held: int = 0
    gpu_seconds: float = 0.0  # GPU time held, lost work included
    preemptions: int = 0
    stops: int = 0
    attempts: int = 0
    reason: str = ""
    tasks: tuple[TaskPlacement, ...] = ()
    token: int = 0

    def __post_init__(self) -> None:
        self.remaining = self.duration
        self.vc = self.vc or self.spec.vc
        self.user = self.user or (self.spec.user or "")

    @property
    def gpus(self) -> int:
        return self.spec.total_gpus

    @property
    def jct(self) -> float | None:
        return None if self.end is None or self.state != "DONE" else self.end - self.submit

    @property
    def queue_delay(self) -> float | None:
        return None if self.first_start is None else self.first_start - self.submit


@dataclass(frozen=True, slots=True)
class Scripted:
    """An event from a scenario: ``kind`` is finish, fail, cancel, node_down or node_up."""

    time: float
    kind: str
    target: str
    reason: str = ""


@dataclass
class SimResult:
    policy: str
    jobs: list[SimJob]
    timeline: Timeline
    total_gpus: int
    end_time: float
    events: int = 0
    wakeups: int = 0
    steps: list[dict[str, Any]] = field(default_factory=list)


class Simulation:
    """Drive ``policy`` through ``jobs`` (sorted by submit time) and ``script``."""

    def __init__(
        self,
        policy: Scheduler,
        jobs: Sequence[SimJob],
        *,
        total_gpus: int,
        script: Iterable[Scripted] = (),
        checkpoint: float | None = None,
        progress: Callable[[int], None] | None = None,
        observe: Callable[[Simulation, float, str], None] | None = None,
    ) -> None:
        if checkpoint is not None and checkpoint <= 0:
            raise ValueError("checkpoint interval must be positive")
        self.policy = policy
        self.jobs = list(jobs)
        if any(j.state != "PENDING" for j in self.jobs):
            raise ValueError("a SimJob records one run; build fresh jobs for each simulation")
        self.by_id: dict[str, SimJob] = {}
        self.checkpoint = checkpoint
        self.progress = progress
        self.observe = observe
        self.timeline = Timeline(total_gpus)
        self.total_gpus = total_gpus
        self._heap: list[tuple[float, int, int, Any]] = []
        self._n = 0
        self._wake: float | None = None
        self.now = 0.0
        self.events = 0
        self.wakeups = 0
        for s in script:
            self._push(s.time, _SCRIPT, s)

    def _push(self, time: float, kind: int, payload: Any) -> None:
        heapq.heappush(self._heap, (time, kind, self._n, payload))
        self._n += 1

    # ---- main loop -----------------------------------------------------------------------

    def run(self) -> SimResult:
        jobs, heap = self.jobs, self._heap
        i, n = 0, len(jobs)
        done_since_report = 0
        while i < n or heap:
            if heap and (i >= n or heap[0][:2] <= (jobs[i].submit, _SUBMIT)):
                time, kind, _, payload = heapq.heappop(heap)
                self._advance(time)
                if kind == _END:
                    job, token = payload
                    if token != job.token:
                        continue
                    self._end_attempt(job)
                    done_since_report += 1
                    label = f"finish {job.job_id}"
                elif kind == _SCRIPT:
                    label = self._scripted(payload)
                else:
                    if self._wake is None or time < self._wake - 1e-9:
                        continue  # superseded by an earlier wake-up request
                    self._wake = None
                    self.wakeups += 1
                    self._apply(self.policy.handle(Tick(time)))
                    label = "tick"
            else:
                job = jobs[i]
                i += 1
                self._advance(job.submit)
                self._submit(job)
                label = f"submit {job.job_id}"
            self.events += 1
            self._plan_wakeup()
            if self.observe is not None:
                self.observe(self, self.now, label)
            if self.progress is not None and done_since_report >= 256:
                self.progress(done_since_report)
                done_since_report = 0
        if self.progress is not None and done_since_report:
            self.progress(done_since_report)
        self.timeline.close(self.now)
        return SimResult(
            policy=getattr(self.policy, "name", type(self.policy).__name__),
            jobs=self.jobs,
            timeline=self.timeline,
            total_gpus=self.total_gpus,
            end_time=self.now,
            events=self.events,
            wakeups=self.wakeups,
        )

    def _advance(self, time: float) -> None:
        if time > self.now:
            self.timeline.advance(time)
            self.now = time

    def _plan_wakeup(self) -> None:
        wake = self.policy.next_wakeup()
        if wake is not None and (self._wake is None or wake < self._wake - 1e-9):
            self._wake = max(wake, self.now)
            self._push(self._wake, _TICK, None)

    # ---- lifecycle -----------------------------------------------------------------------

    def _submit(self, job: SimJob) -> None:
        self.by_id[job.job_id] = job
        try:
            self.policy.check(job.spec)
            decisions = self.policy.handle(Submit(job.job_id, job.spec, self.now))
        except SpecRejected as err:
            job.state = "REJECTED"
            job.reason = str(err)
            return
        job.state = "WAITING"
        self.timeline.wait(job, +1)
        self._apply(decisions)

    def _end_attempt(self, job: SimJob) -> None:
        """The job ran its remaining service time: it is done."""
        self._stop_running(job)
        job.state = "DONE"
        job.end = self.now
        job.remaining = 0.0
        self._apply(self.policy.handle(Finish(job.job_id, self.now)))

    def _scripted(self, ev: Scripted) -> str:
        label = f"{ev.kind} {ev.target}"
        if ev.kind in ("node_down", "node_up"):
            event: Event = (
                NodeDown(ev.target, self.now, ev.reason)
                if ev.kind == "node_down"
                else NodeUp(ev.target, self.now)
            )
            self._apply(self.policy.handle(event))
            return label
        job = self.by_id.get(ev.target)
        if job is None or job.state not in ("WAITING", "RUNNING"):
            return label
        if ev.kind == "fail" and job.attempts <= job.spec.retries and job.state == "RUNNING":
            self._stop_running(job, keep=0.0)
            job.remaining = job.duration
            job.state = "WAITING"
            self.timeline.wait(job, +1)
            self._apply(self.policy.handle(Requeue(job.job_id, self.now)))
            return label
        was_waiting = job.state == "WAITING"
        if job.state == "RUNNING":
            self._stop_running(job)
        elif was_waiting:
            self.timeline.wait(job, -1)
        job.state = {"finish": "DONE", "fail": "FAILED"}.get(ev.kind, "CANCELLED")
        job.end = self.now
        event = (
            Finish(job.job_id, self.now) if ev.kind != "cancel" else Cancel(job.job_id, self.now)
        )
        self._apply(self.policy.handle(event))
        return label

    def _stop_running(self, job: SimJob, keep: float | None = None) -> None:
        """End the running attempt; ``remaining`` drops by the checkpointed progress."""
        ran = self.now - job.run_start
        job.gpu_seconds += ran * job.gpus_held
        self.timeline.run(job, -job.gpus_held)
        job.gpus_held = 0
        job.tasks = ()
        job.token += 1
        if keep is None:
            keep = ran if job.state == "DONE" else self._saved(ran)
        job.remaining = max(0.0, job.remaining - keep)

    def _saved(self, ran: float) -> float:
        if self.checkpoint is None:
            return 0.0
        return math.floor(ran / self.checkpoint + 1e-9) * self.checkpoint

    def _apply(self, decisions: list[Decision]) -> None:
        for d in decisions:
            job = self.by_id.get(d.job_id)
            if job is None:
                continue
            if isinstance(d, Start):
                self._start(job, d)
            elif isinstance(d, Preempt | Stop) and job.state == "RUNNING":
                self._stop_running(job)
                job.state = "WAITING"
                job.reason = d.reason
                if isinstance(d, Preempt):
                    job.preemptions += 1
                else:
                    job.stops += 1
                self.timeline.wait(job, +1)
                self.timeline.preempted(job)
            elif isinstance(d, Downgrade):
                job.reason = d.reason

    def _start(self, job: SimJob, d: Start) -> None:
        gpus = sum(len(t.gpus) for t in d.tasks)
        if job.state == "RUNNING":  # more tasks of an incremental job
            job.gpu_seconds += (self.now - job.run_start) * job.gpus_held
            job.run_start = self.now
            job.tasks = job.tasks + d.tasks
            job.gpus_held += gpus
            self.timeline.run(job, gpus)
            return
        self.timeline.wait(job, -1)
        job.state = "RUNNING"
        job.attempts += 1
        job.run_start = self.now
        job.tasks = d.tasks
        job.gpus_held = gpus
        job.reason = ""
        if job.first_start is None:
            job.first_start = self.now
        self.timeline.run(job, gpus)
        job.token += 1
        self._push(self.now + job.remaining, _END, (job, job.token))
