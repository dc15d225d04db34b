"""Driving a policy in virtual time: the scenario replayer, and the clock the simulator reuses.

``VirtualTimeDriver`` owns time and the job lifecycle: it turns timed actions (submit, finish,
fail, cancel, node changes, reconfiguration) into policy events, applies the decisions, and
finishes running jobs when their duration has passed. A preempted or stopped run is dropped
and reruns its whole duration. ``replay`` runs a scenario on it and checks expectations.

Same-time events: ``step_time`` runs every action due at one virtual time and only then lets
the policy decide (``model.handle_together``), so a batch submission is ordered by the policy
(SJF starts the short jobs first) rather than by the order of the lines in the file.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from labhive.scheduler.core.config import ClusterConfig
from labhive.scheduler.core.frozen_build import frozen_builder
from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import (
    Cancel,
    Decision,
    Event,
    NodeDown,
    NodeUp,
    Reconfigure,
    Scheduler,
    SpecRejected,
    Start,
    Submit,
    handle_together,
)
from labhive.scheduler.core.states import JobState
from labhive.scheduler.drivers.lifecycle import (
    JobRecord,
    apply_decision,
    cancel,
    end_attempt,
    rejected,
)
from labhive.scheduler.drivers.scenario import Expectation, Scenario, ScenarioEvent


class Timed(Protocol):
    """What ``VirtualTimeDriver.drive`` reads of an arrival (the simulator's ``SimJob``)."""

    @property
    def job_id(self) -> str: ...

    @property
    def submit(self) -> float: ...


Arrival = TypeVar("Arrival", bound=Timed)


class Holder(Protocol):
    """What keeps a job's record where ``records`` does not (the simulator's ``SimJob``):
    ``_admit`` sets it."""

    record: JobRecord | None


#: Read once a job (``_end_attempt``), as a module constant: an Enum class's attribute costs
#: ten times a global.
_RUNNING = JobState.RUNNING
#: Completions sort before actions that happen at the same virtual time.
COMPLETION, ACTION = 0, 1
#: The time of the next arrival once there is none (``drive``).
_NEVER = math.inf

#: ``Submit(job_id, spec, now)``, the same frozen event, built without ``__init__`` (once per
#: job: 0.22 us, not 0.48; ``frozen_build``).
_submitted: Callable[[str, JobSpec, float], Submit] = frozen_builder(Submit)


def _no_instant(time: float) -> None:
    """``drive``'s ``instant`` for a caller that has nothing to do as an instant begins."""


class VirtualTimeDriver:
    """A policy, a virtual clock and every job's record."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.now = 0.0
        # Every job's record by id (a subclass may serve it from where it keeps them: the
        # simulator's from its jobs, ``engine.Records``).
        self.records: MutableMapping[str, JobRecord] = {}
        self.durations: dict[str, float | None] = {}
        # Per job, (preemptions, downgrades) the last ``snapshot`` showed: what a step adds.
        self.shown: dict[str, tuple[int, int]] = {}
        self.decisions = 0
        self._heap: list[tuple[float, int, int, Callable[[], str | None]]] = []
        #: Each timed action's number, in the order they were timed: actions due at one time
        #: and of one kind run in that order (``next`` of a C counter, once a job).
        self._order = itertools.count(1)
        #: Events held back until every action of the instant has run (None: feed at once).
        self._batch: list[Event] | None = None
        self._batches = hasattr(scheduler, "handle_batch")

    # ---- scheduling work in virtual time -----------------------------------------------------

    def at(self, time: float, action: Callable[[], str | None], kind: int = ACTION) -> None:
        """Run ``action`` at ``time``; it returns a description of what happened, or None."""
        heapq.heappush(self._heap, (time, kind, next(self._order), action))

    def drive(
        self,
        seen: Callable[[str], None],
        arrivals: Iterator[Arrival] | None = None,
        arrive: Callable[[Arrival], str] | None = None,
        instant: Callable[[float], None] | None = None,
        decided: Callable[[list[str]], None] | None = None,
    ) -> None:
        """The event loop of every virtual-time run (``replay`` and the simulator), to the end.

        An instant: ``instant(time)`` is told it begins (before the clock moves to it), then
        every timed action due runs (completions first), then every arrival due (``arrive``
        admits it and labels it), and only then does the policy decide, once, on all their
        events (``model.handle_together``); ``seen`` gets each label once it is decided (a
        policy without ``handle_batch`` decides after each event, and is seen after each);
        with ``decided``, a decision's labels go to it together instead (one call a decision,
        not one an event: the simulator's count). The instant repeats while its decision
        timed more actions for that same time.

        ``arrivals`` (sorted by ``submit``) is read as time reaches each one, so a
        million-job trace never sits in memory, and never sits in the heap either.

        Hot: it runs once per event of a million-job simulation, so the heap is read in place
        and the steps of an instant are inline (``docs/scheduler-core.md``)."""
        heap, pop = self._heap, heapq.heappop
        batches, scheduler, apply = self._batches, self.scheduler, self.apply
        if arrivals is None:
            arrivals = iter(())
        job = next(arrivals, None)
        if job is not None and arrive is None:
            raise TypeError("drive: arrivals need arrive")
        if instant is None:  # (every hot caller tells: no test of None an instant)
            instant = _no_instant
        if decided is None:  # each label of a decision seen on its own

            def each(labels: list[str]) -> None:
                for label in labels:
                    seen(label)

            decided = each
        # The next arrival's time, kept here (``_NEVER`` once there is none): an instant reads
        # it twice, an arrival once, and ``job is not None and job.submit`` cost twice as much.
        submit = _NEVER if job is None else job.submit
        batch: list[Event] | None = None
        # ``head``: the heap's first action's time (``_NEVER`` while it is empty), asked once
        # here and then at the end of each round, where it is the question of whether the
        # instant goes on, and kept for the next instant's: nothing runs between the two
        # (an instant read it twice, 9 bytecodes each).
        head = heap[0][0] if heap else _NEVER
        while heap or job is not None:
            # ``due``: the heap's first action is due at this instant, known here, so the loop
            # below does not ask the heap again before its first pop.
            due = head <= submit
            time = head if due else submit
            instant(time)
            if time > self.now:  # (``max``, without its call)
                self.now = time
            while True:
                if batches:  # events wait for the instant's one decision
                    batch = self._batch = []
                labels: list[str] = []
                while due:
                    # (Its time is ``time`` or earlier, and ``now`` is ``time`` already.)
                    label = pop(heap)[3]()
                    if label is not None:
                        if batches:
                            labels.append(label)
                        else:
                            seen(label)
                    due = heap[0][0] <= time if heap else False
                while submit <= time:
                    label = arrive(job)  # type: ignore[misc,arg-type]  # (checked above)
                    if batches:
                        labels.append(label)
                    else:
                        seen(label)
                    job = next(arrivals, None)
                    submit = _NEVER if job is None else job.submit
                    if submit < time:
                        raise ValueError(
                            f"job {job.job_id} is submitted at {submit}, before {time}: "  # type: ignore[union-attr]
                            "the jobs must come sorted by submit time"
                        )
                if batches:
                    self._batch = None
                    if batch:  # one event straight to ``handle``, as ``handle_together`` does
                        decisions = (
                            scheduler.handle(batch[0])
                            if len(batch) == 1
                            else handle_together(scheduler, batch)
                        )
                        if decisions:
                            apply(decisions)
                decided(labels)
                head = heap[0][0] if heap else _NEVER
                if head > time:
                    break
                due = True

    def pending(self) -> bool:
        return bool(self._heap)

    # ---- actions -----------------------------------------------------------------------------

    def submit(self, job_id: str, spec: JobSpec, duration: float | None = None) -> JobRecord:
        self.durations[job_id] = duration if duration is not None else spec.duration
        return self._admit(job_id, spec)

    def _admit(self, job_id: str, spec: JobSpec, holder: Holder | None = None) -> JobRecord:
        """``submit`` but for the duration (which the simulator keeps on its own jobs): the
        spec checked, the job's record, its ``Submit`` fed; or the record of its rejection.

        The record goes to ``holder.record`` where a holder is given (the simulator's job,
        which it reaches by id: no entry a job in a second big dict), else to ``records``;
        either way before the ``Submit`` is fed, as a policy without ``handle_batch``
        decides as it is fed, and its decisions look for the record."""
        try:
            self.scheduler.check(spec)
        except SpecRejected as err:
            return self._keep(job_id, rejected(job_id, spec, self.now, str(err)), holder)
        record = JobRecord(job_id, spec, self.now)
        if holder is None:  # (``_keep``, written out: once a job)
            self.records[job_id] = record
        else:
            holder.record = record
        batch = self._batch  # (``feed``'s common case, once a job: the instant's batch)
        if batch is not None:
            batch.append(_submitted(job_id, spec, self.now))
        else:
            self.feed(_submitted(job_id, spec, self.now))
        return record

    def _keep(self, job_id: str, record: JobRecord, holder: Holder | None) -> JobRecord:
        """The record kept where ``_admit`` keeps it: on ``holder``, else in ``records``."""
        if holder is None:
            self.records[job_id] = record
        else:
            holder.record = record
        return record

    def end(self, job_id: str, ok: bool) -> None:
        """The job's attempt ended on its own (finished or failed)."""
        self._end_attempt(self.records[job_id], ok)

    def _end_attempt(self, record: JobRecord, ok: bool) -> None:
        if record.state != _RUNNING:
            return
        event = end_attempt(record, ok, self.now)
        batch = self._batch  # (``feed``'s common case, once a job, as in ``_admit``)
        if batch is not None:
            batch.append(event)
        else:
            self.feed(event)

    def cancel(self, job_id: str) -> None:
        record = self.records[job_id]
        if record.done:
            return
        cancel(record, self.now)
        self.feed(Cancel(job_id, self.now))

    def feed(self, event: Event) -> list[Decision]:
        """Give the policy one event and apply what it decides (held while ``hold`` is on)."""
        if self._batch is not None:
            self._batch.append(event)
            return []
        decisions = self.scheduler.handle(event)
        if decisions:  # (most events decide nothing)
            self.apply(decisions)
        return decisions

    def apply(self, decisions: list[Decision]) -> None:
        self.decisions += len(decisions)
        for decision in decisions:
            record = self.records.get(decision.job_id)
            if record is not None:
                self.apply_one(record, decision)

    def apply_one(self, record: JobRecord, decision: Decision) -> None:
        if apply_decision(record, decision, self.now) and isinstance(decision, Start):
            self._time_run(record)

    def _time_run(self, record: JobRecord) -> None:
        duration = self.durations.get(record.job_id)
        if duration is None:
            return
        generation = record.generation

        def complete() -> str | None:
            if record.generation != generation or record.state != JobState.RUNNING:
                return None
            self.end(record.job_id, True)
            return f"{record.spec.name} finished"

        self.at(self.now + duration, complete, COMPLETION)


# ---- scenarios -------------------------------------------------------------------------------


@dataclass(slots=True)
class ReplayResult:
    steps: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def replay(scenario: Scenario, policy: str = "hived") -> ReplayResult:
    """Replay a scenario; a snapshot after every event and every failed expectation."""
    from labhive.scheduler.policies import get_policy

    driver = VirtualTimeDriver(get_policy(policy, scenario.cluster))
    result = ReplayResult()
    for event in scenario.events:
        driver.at(event.at, scenario_action(driver, event))
    expects = sorted(scenario.expects, key=lambda e: e.at)

    def checks_before(time: float) -> None:
        while expects and expects[0].at < time:
            _record(result, check(driver, expects.pop(0)))

    driver.drive(lambda label: result.steps.append(snapshot(driver, label)), instant=checks_before)
    for expect in expects:
        _record(result, check(driver, expect))
    return result


def _record(result: ReplayResult, failure: str | None) -> None:
    if failure:
        result.failures.append(failure)


def scenario_action(driver: VirtualTimeDriver, event: ScenarioEvent) -> Callable[[], str | None]:
    def run() -> str:
        name = event.target
        match event.action:
            case "submit":
                assert event.spec is not None
                record = driver.submit(name, event.spec, event.duration)
                if record.state == JobState.REJECTED:
                    return f"submit {name}: rejected"
            case "finish" | "fail":
                driver.end(name, event.action == "finish")
            case "cancel":
                driver.cancel(name)
            case "node_down":
                driver.feed(NodeDown(name, driver.now, event.reason))
            case "node_up":
                driver.feed(NodeUp(name, driver.now))
            case "reconfigure":
                assert isinstance(event.config, ClusterConfig)
                driver.feed(Reconfigure(event.config, driver.now))
        return event.describe()

    return run


def job_state(driver: VirtualTimeDriver, record: JobRecord) -> dict[str, Any]:
    """A job as the replay shows it: state, queue position, reason and tasks."""
    view = None if record.done else driver.scheduler.job(record.job_id)
    reason = record.reason
    position = None
    tasks = []
    if view is not None:
        position = view.queue_position if view.state == JobState.WAITING else None
        if (
            view.why
            and view.state == JobState.RUNNING
            and record.reason in ("started", "running opportunistically")
        ):
            reason = view.why
        elif view.why:
            reason = f"{reason}; {view.why}" if reason else view.why
        tasks = [
            {
                "role": t.role,
                "index": t.index,
                "node": t.node,
                "gpus": list(t.gpus),
                "state": JobState.RUNNING,
            }
            for t in view.tasks
        ]
        # Tasks stopped on their own (a task or affinity group preempted or on a failed node)
        # while the others run: what happened to each.
        tasks += [
            {
                "role": role,
                "index": index,
                "node": None,
                "gpus": [],
                "state": JobState.WAITING,
                "reason": why,
            }
            for (role, index), why in sorted(record.stopped.items())
        ]
    return {
        "name": record.spec.name,
        "vc": record.spec.vc,
        "priority": record.spec.priority,
        "state": record.state,
        "queue_position": position,
        "reason": reason,
        "tasks": tasks,
        "preemptions": record.preemptions,
        "preempted_by": _name(driver, record.preempted_by),
        "downgraded": record.state == JobState.RUNNING and bool(record.downgraded_by),
    }


def _name(driver: VirtualTimeDriver, job_id: str) -> str | None:
    record = driver.records.get(job_id)
    return record.spec.name if record is not None else job_id or None


def snapshot(driver: VirtualTimeDriver, description: str) -> dict[str, Any]:
    """The state after one event: jobs, VC usage, whom this event preempted and downgraded
    (and by whom), and with HiveD each VC's bound cells and free cells per level."""
    vcs = driver.scheduler.cluster().vcs
    preempted, downgraded = [], []
    for record in driver.records.values():
        was = driver.shown.get(record.job_id, (0, 0))
        now = (record.preemptions, record.downgrades)
        if now == was:
            continue
        driver.shown[record.job_id] = now
        name = record.spec.name
        if now[0] > was[0]:
            entry: dict[str, Any] = {"job": name, "by": _name(driver, record.preempted_by)}
            if record.preempted_tasks:
                entry["tasks"] = list(record.preempted_tasks)
            preempted.append(entry)
        if now[1] > was[1]:
            entry = {"job": name, "by": _name(driver, record.downgraded_by)}
            if record.downgraded_tasks:
                entry["tasks"] = list(record.downgraded_tasks)
            downgraded.append(entry)
    cells = getattr(driver.scheduler, "cells", None)
    bindings = cells() if callable(cells) else {"vcs": {}, "free_list": {}}
    return {
        "t": driver.now,
        "event": description,
        "jobs": [job_state(driver, r) for r in driver.records.values()],
        "preempted": preempted,
        "downgraded": downgraded,
        "vcs": {
            name: {
                "guaranteed_gpus": v.guaranteed_gpus,
                "used_gpus": v.used_gpus,
                "opportunistic_gpus": v.opportunistic_gpus,
                **bindings["vcs"].get(name, {}),
            }
            for name, v in vcs.items()
        },
        "free_list": bindings["free_list"],
    }


def check(driver: VirtualTimeDriver, expect: Expectation) -> str | None:
    """None when the job matches the expectation now, else what differs."""
    record = next((r for r in driver.records.values() if r.spec.name == expect.job), None)
    if record is None:
        return f"{expect.describe()}: the job was not submitted by then"
    state = job_state(driver, record)
    problems = []
    for key, want in expect.checks.items():
        if key == "nodes":
            got: Any = sorted({t["node"] for t in state["tasks"] if t["node"]})
            ok = got == sorted(str(n) for n in want)
        elif key == "reason":
            got = state["reason"]
            ok = str(want) in got
        elif key == "preempted":  # ever preempted by then, not a word in the reason
            got = state["preemptions"] > 0
            ok = got == want
        else:
            got = state[key]
            ok = got == want
        if not ok:
            problems.append(f"{key} is {got!r}")
    if problems:
        return f"{expect.describe()}: {'; '.join(problems)}"
    return None
