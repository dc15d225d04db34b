"""The scheduler loop: the one thread that owns the policy and the executor.

Submissions and cancels are stored by the REST handlers and queued here; each pass drains
everything that arrived (so 1,000 submissions a second cost a few passes, not 1,000), feeds the
policy its events and applies the decisions in a fixed order that keeps the store true to what
runs:

1. drain inputs (workers' messages, exits, culls, cancels, submissions, node events),
2. plan: settle what ended, ask the policy, sort its decisions (``settle``),
3. record: one write transaction for the pass (``record.commit``): ended tasks, settled
   attempts, cancels, preemptions, and every start with its GPU allocations,
4. actuate: hand the stops and the committed starts' launches to the workers,
5. notify: observers and those waiting for a change.

A kill -9 between any two steps leaves the store describing a state the next start can settle:
a started job without handles is handed to ``Executor.adopt`` by its task keys and requeued if
nothing runs; the policy itself is rebuilt from the store (``recovery``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import (
    Adopt,
    ClusterView,
    JobView,
    NodeDown,
    NodeUp,
    Scheduler,
    Submit,
    Tick,
)
from labhive.scheduler.executors.base import Executor, TaskExit, TaskHandle, TaskKey
from labhive.scheduler.executors.capabilities import require_executor
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service import notices as nt
from labhive.scheduler.service.backoff import LoopHealth
from labhive.scheduler.service.policy_port import (
    PolicyPort,
    ServiceDecision,
    ServiceEvent,
)
from labhive.scheduler.service.runtime import actuation, record, recovery, settle
from labhive.scheduler.service.runtime.changes import Changes
from labhive.scheduler.service.runtime.decide import decide
from labhive.scheduler.service.runtime.inputs import Inputs
from labhive.scheduler.service.runtime.launch import LaunchBuilder, prepare
from labhive.scheduler.service.runtime.nodes import Nodes
from labhive.scheduler.service.runtime.observers import PassObserver
from labhive.scheduler.service.runtime.plan import Plan, StopOrder
from labhive.scheduler.service.runtime.runs import Inbox, Launch, Runs, Settle, Stopped
from labhive.scheduler.service.store import Store

if TYPE_CHECKING:
    from labhive.scheduler.forecast.eta import Estimate
    from labhive.scheduler.service.eta import EtaTracker, WaitsFor

log = logging.getLogger("labhive.service.loop")


class SchedulerLoop:
    def __init__(
        self,
        store: Store,
        make_scheduler: Callable[[], Scheduler],
        executor: Executor,
        load_spec: recovery.SpecLoader,
        *,
        virtual: bool = False,
        grace_s: float = 10.0,
        poll_s: float = 0.2,
        clock: Callable[[], float] = time.time,
        launch_builder: LaunchBuilder | None = None,
        node_events: Callable[[], Sequence[ServiceEvent]] | None = None,
        addresses: Callable[[], dict[TaskKey, str]] | None = None,
        partial_stops: bool = True,
        stop_notice_s: float = nt.DEFAULT_NOTICE_S,
        observers: Sequence[PassObserver] = (),
        forecast: Callable[[SchedulerLoop], EtaTracker | None] | None = None,
        journal: bool = True,
    ) -> None:
        self.store = store
        self.executor = require_executor(executor)  # a missing method fails here, at start
        self._make_scheduler = make_scheduler
        self._load_spec = load_spec
        self.virtual = virtual
        self.grace_s = grace_s
        self.poll_s = poll_s
        self.clock = clock
        self._launch_builder = launch_builder
        self._node_events = node_events  # node health from the executor (Kubernetes)
        self._addresses = addresses  # task addresses learnt after a launch (a pod's IP)
        #: Stop some tasks of a running job (HiveD's unit of preemption) rather than whole jobs,
        #: where the executor can (``Executor.partial_stops``): ``labhive serve --stops tasks``,
        #: the default; ``--stops jobs`` stops whole jobs (docs/scheduler-core.md).
        self.partial_stops = partial_stops
        # Stop notices (service/notices.py): time limits this long ahead, culls, drains.
        self.stop_notice_s = stop_notice_s
        self.notices = nt.Notices()
        self._observers = tuple(observers)
        #: The policy, which the service reaches through this port only (int job ids).
        self.policy = PolicyPort(self.new_policy())
        #: Record each pass's events and decisions (``service/journal/``); off only to measure
        #: what the journal costs (``LABHIVE_JOURNAL=off``, benchmarks/bench_service.py).
        self.journal = journal
        #: What the journal records of a policy built afresh, until a pass commits with it.
        self._fresh_policy: dict[str, object] | None = self._policy_record()
        self._sched_lock = threading.Lock()  # guards the policy: the pass and the views
        self.reading = self._sched_lock  # held to read the policy's state (pass_views.py)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._inputs = Inputs(self._wake)  # from any thread, taken by each pass
        self.nodes = Nodes(store, clock, self._wake)
        self._inbox = Inbox(self._wake)  # the workers' reports
        # Owned by the loop thread.
        self.runs = Runs()
        self._pending_events: list[ServiceEvent] = []
        self._pending_exits: list[TaskExit] = []
        self._inflight_exits: list[TaskExit] = []
        self._actuator = actuation.Actuator()
        self._must_recover = False  # a pass or a recovery failed: rebuild before the next
        self.last_pass = 0.0  # clock() of the last pass that completed
        self.passes = 0
        self.health = LoopHealth()  # failure streak and last good pass, for /health
        self._changes = Changes()
        self.changed = self._changes.changed  # notified after every pass that changed the store
        #: The ETA thread (service/eta.py), started with the loop; it follows the loop's passes.
        self.eta = forecast(self) if forecast is not None else None

    # ---- inputs (any thread) -------------------------------------------------------------

    def submitted(self, job_id: int, spec: JobSpec, *, admitted: bool = False) -> None:
        """A stored job; ``admitted``: checked already (``policies.admission``), so the
        policy keeps it without checking it again."""
        self._inputs.submitted(job_id, spec, admitted)

    def submitted_many(self, new: list[tuple[int, JobSpec]]) -> None:
        """A committed batch of submissions (intake.py), admitted by ``Service.admit``: one
        wake-up of the loop for all."""
        self._inputs.submitted_many(new)

    def cancel(self, job_id: int) -> None:
        self._inputs.cancel(job_id)

    def cull(self, job_id: int, why: str, idle_s: float) -> None:
        """Stop a running job now, culled (it ends STOPPED, reason ``culled``)."""
        self._inputs.cull(job_id, why, idle_s)

    def inject(self, events_in: list[ServiceEvent]) -> None:
        """Node health events (``NodeDown``/``NodeUp``); an admin's mark wins (``nodes``)."""
        self.nodes.inject(events_in)

    def take_down(self, node: str, reason: str, by: str) -> NodeDown:
        return self.nodes.take_down(node, reason, by)

    def bring_up(self, node: str) -> NodeUp | NodeDown:
        return self.nodes.bring_up(node)

    # ---- views (any thread) --------------------------------------------------------------

    @property
    def held(self) -> dict[str, str]:
        """Nodes an admin took down -> why."""
        return self.nodes.held

    @property
    def estimates(self) -> Mapping[int, Estimate | WaitsFor]:
        """Waiting jobs' estimated starts, as the ETA thread last published them."""
        return self.eta.estimates if self.eta is not None else {}

    @property
    def scheduler(self) -> Scheduler:
        """The policy itself (str ids): for what it is, never for what it holds."""
        return self.policy.scheduler

    def view(self, job_id: int) -> JobView[int] | None:
        with self._sched_lock:
            return self.policy.job(job_id)

    def views(self) -> list[JobView[int]]:
        with self._sched_lock:
            return self.policy.jobs()

    def forecast_state(
        self, job_ids: Iterable[int]
    ) -> tuple[list[JobView[int]], dict[int, JobSpec], dict[str, str]]:
        """What an ETA forecast starts from: the policy's views of these jobs (the running
        ones: a running job's view is cheap, a waiting one's why-text is not, and the lock
        stalls the pass meanwhile), the specs of all, the nodes down."""
        with self._sched_lock:
            views = [v for j in job_ids if (v := self.policy.job(j)) is not None]
            specs = dict(self.runs.specs)
        return views, specs, self.nodes.down()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def cluster(self) -> ClusterView[int]:
        with self._sched_lock:
            return self.policy.cluster()

    def handles(self, job_id: int) -> dict[TaskKey, TaskHandle]:
        run = self.runs.run_of(job_id)
        return dict(run.handles) if run else {}

    async def next_change(self, timeout: float) -> None:
        """Wait for the next pass that changed the store (``cancel?wait=``), or ``timeout``."""
        await self._changes.next_change(timeout)

    # ---- life ----------------------------------------------------------------------------

    def start(self) -> None:
        """Rebuild from the store and run; a store that cannot be read yet (the database is
        still starting) is retried by the loop with backoff, and /health says so meanwhile."""
        try:
            self.recover()
        except Exception as err:
            self._must_recover = True
            self.health.failed(err, log, "rebuilding the scheduler from the store")
        self._thread = threading.Thread(target=self._run, name="labhive-loop", daemon=True)
        self._thread.start()
        if self.eta is not None:
            self.eta.start()

    def stop(self, stop_tasks: bool = False) -> None:
        """End the loop; with ``stop_tasks`` every running job is stopped and requeued (so the
        next start runs it again) instead of being left for re-adoption."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        # Launches and stops in flight finish first when the tasks are to be stopped; else a
        # restart re-adopts (or requeues) what they would have done.
        self._actuator.close(wait=stop_tasks)
        if stop_tasks:
            self._requeue_all("the service stopped")

    def _run(self) -> None:
        while not self._stopping.is_set():
            if self.health.failing:  # back off: new work must not cut the wait short
                self._stopping.wait(self.health.delay())
            else:
                self._wake.wait(self.poll_s)
            self._wake.clear()
            if self._stopping.is_set():
                break
            self.try_pass()

    def try_pass(self) -> bool:
        """One pass, after rebuilding from the store if the last one failed. A failure (the
        database is down, the executor broke) is counted, never raised: the loop must outlive
        it. Returns whether the pass ran."""
        try:
            if self._must_recover:
                self.recover()
                self._must_recover = False
            self.step()
        except Exception as err:  # whatever it was, the in-memory state may be half-applied
            self._must_recover = True
            self.health.failed(err, log, "scheduler pass")
            return False
        self.health.passed(log)
        return True

    def new_policy(self) -> Scheduler:
        """A fresh policy as this loop runs it: for a recovery, and for the ETA forecast, which
        must stop what the loop stops (a task, or the whole job)."""
        scheduler = self._make_scheduler()
        if self.partial_stops and self.executor.partial_stops:
            return scheduler
        return whole_job_stops(scheduler)

    def _policy_record(self) -> dict[str, object]:
        """What the journal says of a fresh policy: a replay builds the same one
        (``journal/twin.py``) and stops what this loop stops (tasks, or whole jobs)."""
        scheduler = self.policy.scheduler
        partial = getattr(scheduler, "partial_stops", None)
        return {"name": scheduler.name, "partial_stops": partial}

    def recover(self) -> None:
        """Rebuild the policy and the running set from the store; adopt running tasks."""
        # Launches finish first, so every task they start is known to the executor when it
        # re-adopts the store's tasks (stops in flight are chained again by the re-drains).
        self._actuator.wait_idle(timeout=self.grace_s + 30)
        # Submissions queued from here on are either read below or deduplicated at intake.
        self._inputs.forget_intake()
        stored = record.read_stored(self.store)
        with self._sched_lock:
            self.policy = PolicyPort(self.new_policy())
            self._fresh_policy = self._policy_record()
        self.runs.clear()
        t = self.clock()
        found = recovery.rebuild(stored, self.runs, self._load_spec, t)
        self._inputs.cancel_all(found.cancels)
        if found.unloadable:
            by_job = recovery.tasks_by_job(stored.tasks)
            recovery.fail_unloadable(
                self.store, self.executor, self.grace_s, found.unloadable, by_job, t
            )
        # The Tick asks for a pass once everything is restored: an Adopt places nothing, and a
        # job with some tasks stopped alone has those waiting even when nothing is submitted.
        in_cluster = {n.name for n in self.cluster().nodes}
        down = self.nodes.restore(stored.marks, in_cluster, t)
        self._pending_events = found.adopts + down + found.submits + [Tick(t)]
        self._pending_exits = recovery.adopt(self.executor, found.handles) + self._inflight_exits
        self._inflight_exits = []
        self._wake.set()

    # ---- one pass ------------------------------------------------------------------------

    def step(self) -> bool:
        """Drain inputs, plan, record, actuate, notify. Returns whether anything changed."""
        t = self.clock()
        plan = Plan()
        # Events in an order that keeps the policy's view and the store's in step: restored jobs
        # first, then what ended, then new work (which may preempt), then cancels.
        recovered = self._pending_events
        self._pending_events = []
        events_in: list[ServiceEvent] = [e for e in recovered if isinstance(e, Adopt)]
        messages = self._inbox.drain()
        launched = [m for m in messages if isinstance(m, Launch)]
        failed = [ex for m in launched if m.error is not None for ex in m.exits()]
        exits = self._pending_exits + failed + list(self.executor.poll())
        self._pending_exits = []
        self._inflight_exits = exits  # kept until committed: a failed pass must not lose them
        taken = self._inputs.take()
        plan.handles += self.runs.collect_launched(launched)
        if self._addresses is not None:
            plan.handles += self.runs.collect_addresses(self._addresses())
        stopped = [m for m in messages if isinstance(m, Stopped)]
        settle.finish_drains(self.runs, stopped, plan, events_in)
        settle.settle_exits(self.runs, exits, plan, events_in, t, self.grace_s)
        settle.cull(self.runs, self._inputs.take_culls(), plan, t, self.grace_s)
        self._announce_limits(t)
        settle.stop_expired(self.runs, plan, t, self.grace_s)
        events_in.extend(self.nodes.take_events())  # node health, before new work
        events_in.extend(e for e in recovered if not isinstance(e, Adopt))
        if self._node_events is not None:
            events_in.extend(self.nodes.health(list(self._node_events())))
        for job_id, spec, admitted in taken.intake:
            if job_id in self.runs.specs:
                continue  # already loaded from the store by a recovery
            self.runs.specs[job_id] = spec
            events_in.append(Submit(job_id, spec, t, admitted=admitted))
            plan.new_jobs.append(job_id)
        # after the submits: a job cancelled right after it was submitted must be known here
        events_in.extend(settle.cancel_jobs(self.runs, taken.cancels, plan, t, self.grace_s))
        with self._sched_lock:
            due = self.policy.next_wakeup()
        if due is not None and due <= t:
            events_in.append(Tick(t))
        if not events_in and not plan.changes_store():
            self._inflight_exits = []
            self.last_pass = t
            return False
        decisions = self._decide(events_in, plan)
        plan.released = self.runs.reserved.release()  # held starts whose GPUs are free now
        plan.decisions = list(plan.released)
        settle.apply(self.runs, decisions, plan, t, self.grace_s)
        if self.journal:
            plan.fresh_policy = self._fresh_policy
        else:
            plan.journal = []
        stale = record.commit(self.store, plan, self.runs, self.view, t)
        self._fresh_policy = None  # the journal has it: replays start from here
        if stale:
            self._pending_events.extend(stale)
            self._wake.set()
        self._inflight_exits = []
        self._actuate(plan)
        self.last_pass = t
        self.passes += 1
        self._notify(plan)
        return True

    def _announce_limits(self, t: float) -> None:
        """A job nearing its time limit gets its notice (in the store and the tasks' files)."""
        for job_id, run in self.runs.running.items():
            spec = self.runs.specs.get(job_id)
            limit = spec.time_limit if spec is not None else None
            notice = nt.time_limit_notice(run.deadline, limit, self.stop_notice_s, run.attempt, t)
            if notice is not None and self.notices.put(job_id, notice):  # new: say it
                handles = list(run.handles.values())
                nt.announce(self.store, self.executor, job_id, handles, notice, t)
        self.notices.keep_only(set(self.runs.running) | set(self.runs.reserved.draining))

    def _decide(self, events_in: list[ServiceEvent], plan: Plan) -> list[ServiceDecision]:
        with self._sched_lock:
            decisions, refused = decide(self.policy, events_in, self.runs, plan, self._observers)
        for job_id, message in refused:
            # Its cells are gone or taken (the cluster changed while the service was down):
            # stop what runs there and queue the job again, without spending a retry.
            run = self.runs.running.pop(job_id, None)
            if run is not None:
                self.executor.stop(list(run.handles.values()), self.grace_s)
            why = f"could not keep its cells after a restart: {message}"
            plan.settled.append(Settle(job_id, lc.WAITING, "requeued", why))
            spec = self.runs.specs.get(job_id)
            if spec is not None:  # (else the next recovery loads it WAITING and submits it)
                self._pending_events.append(Submit(job_id, spec, self.clock()))
            self._wake.set()
        return decisions

    # ---- actuate and notify ----------------------------------------------------------------

    def _actuate(self, plan: Plan) -> None:
        """The stops, each after its notice, then the committed starts' launches; a launch
        that cannot even be described (its environment cannot be built) fails its attempt
        like a failed launch."""
        for order in plan.stops:
            self._stop(order)
        for start in plan.starts:
            made = prepare(self.store, self._launch_builder, self.virtual, self.runs, start)
            if made is None:
                continue
            launch, tasks = made
            if tasks is None:  # failed: its exits settle the attempt next pass
                self._inbox.post(launch)
                continue
            work = partial(actuation.launch_tasks, self.executor, self._inbox, launch, tasks)
            self._actuator.submit(launch.job_id, work)

    def _stop(self, order: StopOrder) -> None:
        """A stop begins: its grace period is the notice, in the tasks' files before SIGTERM."""
        notice = nt.drain_notice(order.why, self.grace_s, order.attempt, self.clock())
        self.notices.put(order.job_id, notice)
        nt.write_files(self.executor, list(order.notify), notice.doc())
        work = partial(
            actuation.stop_tasks, self.executor, self._inbox, order, self.grace_s, self._stopping
        )
        self._actuator.submit(order.job_id, work)

    def _notify(self, plan: Plan) -> None:
        for observer in self._observers:
            for job_id, ex in plan.failed_exits:
                observer.task_failed(job_id, ex)
        for gpus, idle_s in plan.culled:
            self.notices.culled(gpus, idle_s)
        self._changes.notify()

    def _requeue_all(self, why: str) -> None:
        t = self.clock()
        done = Plan()  # jobs whose stop completed end as decided (cancelled, failed ...)
        messages = self._inbox.drain()  # the workers have finished (``stop`` waited for them)
        done.handles += self.runs.collect_launched([m for m in messages if isinstance(m, Launch)])
        stopped = [m for m in messages if isinstance(m, Stopped)]
        settle.finish_drains(self.runs, stopped, done, [])
        record.commit(self.store, done, self.runs, self.view, t)
        reserved = self.runs.reserved
        draining = [(job_id, d.run) for job_id, d in reserved.draining.items()]
        for job_id, run in list(self.runs.running.items()) + draining:
            self.executor.stop(list(run.handles.values()), self.grace_s)
            record.requeue(self.store, job_id, why, t)
        self.runs.running.clear()
        reserved.clear()


def whole_job_stops(scheduler: Scheduler) -> Scheduler:
    """A policy that stops and downgrades whole jobs: ``labhive serve --stops jobs``, and always
    for an executor that cannot stop some tasks of a job and start them again (its names carry
    no task generation: Kubernetes, Slurm)."""
    if hasattr(scheduler, "partial_stops"):
        scheduler.partial_stops = False
    return scheduler
