"""The scheduler loop: the one thread that owns the policy and the executor.

Submissions and cancels are stored by the REST handlers and queued here; each pass drains
everything that arrived (so 1,000 submissions a second cost a few passes, not 1,000), feeds the
policy its events and applies the decisions in a fixed order that keeps the store true to what
runs:

1. stop what must stop (cancelled jobs, preemption victims, the rest of a decided gang),
2. one write transaction for the pass: ended tasks, settled attempts, cancels, preemptions,
   and every start with its GPU allocations,
3. launch the started tasks, then record their handles.

A kill -9 between any two steps leaves the store describing a state the next start can settle:
a started job without handles is handed to ``Executor.adopt`` by its task keys and requeued if
nothing runs; the policy itself is rebuilt from the store (``Adopt`` for RUNNING jobs, ``Submit``
in submission order for WAITING ones).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, TypeVar

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from labhive.scheduler import attempts
from labhive.scheduler.executors.base import (
    NOT_STARTED,
    Executor,
    TaskExit,
    TaskHandle,
    TaskKey,
    TaskLaunch,
)
from labhive.scheduler.executors.env import free_port, task_env
from labhive.scheduler.gpu_share import held_gpus
from labhive.scheduler.jobs import JobSpec
from labhive.scheduler.model import (
    Adopt,
    Cancel,
    ClusterView,
    Downgrade,
    Finish,
    JobView,
    NodeDown,
    NodeUp,
    Preempt,
    Requeue,
    Scheduler,
    SpecRejected,
    Start,
    Stop,
    StopTasks,
    Submit,
    TaskPlacement,
    TasksEnded,
    Tick,
)
from labhive.scheduler.observe.tally import failure_reason
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service import notices as nt
from labhive.scheduler.service.actuation import Actuator, Drain, PartDrain, Reservations, Settle
from labhive.scheduler.service.backoff import LoopHealth
from labhive.scheduler.service.policy_port import (
    PolicyPort,
    ServiceDecision,
    ServiceEvent,
    key_job,
    policy_id,
    task_key,
)
from labhive.scheduler.service.store import Store, job_row, jobs, node_marks
from labhive.scheduler.time_limits import deadline, limit_reached

log = logging.getLogger("labhive.service.loop")
#: Every event the policy is given and what it decided, at DEBUG (``--log-level debug``).
decisions_log = logging.getLogger("labhive.service.decisions")
E = TypeVar("E", bound=ServiceEvent)
T = TypeVar("T")

#: Builds the tasks' launch descriptions for a start (the local executor's env builder plugs in).
LaunchBuilder = Callable[[dict[str, Any], JobSpec, tuple[TaskPlacement, ...]], list[TaskLaunch]]


def default_launches(
    job: dict[str, Any], spec: JobSpec, placements: tuple[TaskPlacement, ...], virtual: bool
) -> list[TaskLaunch]:
    """One ``TaskLaunch`` per placed task, with OpenPAI's environment (rendezvous included)."""
    roles = {r.name: r for r in spec.roles}
    port = free_port() if spec.task_count > 1 else 0
    out = []
    for p in placements:
        role = roles[p.role]
        env = task_env(
            policy_id(job["id"]), spec, placements, job["attempt"], p.role, p.index,
            master_port=port, virtual=virtual,
        )  # fmt: skip
        out.append(
            TaskLaunch(
                key=task_key(job["id"], job["attempt"], p.role, p.index),
                job_name=job["name"],
                command="\n".join(role.commands),
                node=p.node,
                gpus=p.gpus,
                virtual=virtual,
                cpu=role.cpu,
                memory_mb=role.memory_mb,
                cpu_limit=role.cpu_limit,
                memory_limit_mb=role.memory_limit_mb,
                cwd=spec.cwd,
                env=env,
                image=spec.image,
                user=job["user"],
                observe=spec.observe,
                vc=spec.vc,
                time_limit=spec.time_limit,
            )
        )
    return out


@dataclass
class _Running:
    """What the loop keeps in memory about a running attempt."""

    attempt: int
    handles: dict[TaskKey, TaskHandle] = field(default_factory=dict)
    task_ids: dict[TaskKey, int] = field(default_factory=dict)
    codes: dict[tuple[str, int], int | None] = field(default_factory=dict)
    #: What the executor knows beyond a code ("killed: over its memory limit of 256 MiB").
    notes: dict[tuple[str, int], str] = field(default_factory=dict)
    lost: bool = False
    gpus: set[tuple[str, int]] = field(default_factory=set)  # (node, GPU) the attempt holds
    deadline: float | None = None  # clock() at which its time limit stops it
    #: The newest generation recorded per task, those stopped alone included.
    generations: dict[tuple[str, int], int] = field(default_factory=dict)


@dataclass
class _Pass:
    """The store changes one pass accumulates for its single transaction."""

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


class SchedulerLoop:
    def __init__(
        self,
        store: Store,
        make_scheduler: Callable[[], Scheduler],
        executor: Executor,
        load_spec: Callable[[dict[str, Any]], JobSpec],
        *,
        virtual: bool = False,
        grace_s: float = 10.0,
        poll_s: float = 0.2,
        clock: Callable[[], float] = time.time,
        launch_builder: LaunchBuilder | None = None,
        node_events: Callable[[], list[ServiceEvent]] | None = None,
        addresses: Callable[[], dict[TaskKey, str]] | None = None,
        partial_stops: bool = True,
        stop_notice_s: float = nt.DEFAULT_NOTICE_S,
    ) -> None:
        self.store = store
        self.executor = executor
        self._make_scheduler = make_scheduler
        self._load_spec = load_spec
        self.virtual = virtual
        self.grace_s = grace_s
        self.poll_s = poll_s
        self.clock = clock
        self._launch_builder = launch_builder
        self._node_events = node_events  # node health from the executor (Kubernetes)
        #: Task addresses the executor learns after a launch (a pod's IP), and those that
        #: arrived before the launch's own handles, kept until they can be merged in.
        self._addresses = addresses
        self._early_addresses: dict[TaskKey, str] = {}
        #: Stop some tasks of a running job (HiveD's unit of preemption: a task of an
        #: incremental job, an affinity group) rather than whole jobs, where the executor can
        #: (``Executor.partial_stops``): ``labhive serve --stops tasks``, the default; ``--stops
        #: jobs`` stops whole jobs (docs/scheduler-core.md, "In the live service").
        self.partial_stops = partial_stops
        # Stop notices (service/notices.py): time limits this long ahead, culls, drains.
        self.stop_notice_s = stop_notice_s
        self.notices = nt.Notices()
        self._culls: deque[tuple[int, str, float]] = deque()  # (job, why, idle seconds)
        #: The policy, which the service reaches through this port only (int job ids).
        self.policy = PolicyPort(self.new_policy())
        self._sched_lock = threading.Lock()  # guards the policy: the pass and the views
        self.reading = self._sched_lock  # held to read the policy's state (pass_views.py)
        self._intake: deque[tuple[int, JobSpec, bool]] = deque()  # (id, spec, admitted)
        self._cancels: deque[int] = deque()
        self._pending_events: list[ServiceEvent] = []
        self._pending_exits: list[TaskExit] = []
        self._inflight_exits: list[TaskExit] = []
        self._specs: dict[int, JobSpec] = {}
        self._running: dict[int, _Running] = {}
        self._recheck: set[int] = set()  # re-adopted attempts already decided: settle them
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_pass = 0.0  # clock() of the last pass that completed
        self.passes = 0
        self.health = LoopHealth()  # failure streak and last good pass, for /health
        # Actuation (service/actuation.py): workers launch and stop; the pass only decides.
        self._actuator = Actuator()
        self._reserved = Reservations()  # draining jobs' GPUs and the starts waiting for them
        self._stopped: deque[tuple[int, int]] = deque()  # (job, drain token) from the workers
        self._launched: deque[tuple[int, int, list[TaskHandle]]] = deque()  # (job, attempt, ...)
        self._worker_exits: deque[TaskExit] = deque()  # launches that failed
        self._tokens = itertools.count(1)
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._waiters_lock = threading.Lock()
        self._must_recover = False  # a pass or a recovery failed: rebuild before the next
        self.changed = threading.Condition()  # notified after every pass that changed the store
        # Monitoring hooks (service/monitoring.py): node-health events in, timings and exits out.
        self._external: deque[ServiceEvent] = deque()
        self.held: dict[str, str] = {}  # nodes an admin took down -> why (see take_down)
        self.health_down: dict[str, str] = {}  # nodes health reports down -> why, whatever
        # admins say (kept so a rebuilt policy learns them again)
        self.on_decision: Callable[[float], None] | None = None
        self.on_task_exit: Callable[[int, TaskExit], None] | None = None
        # Waiting jobs' estimated starts, replaced whole by the ETA thread (service/eta.py).
        self.estimates: dict[int, Any] = {}
        self.eta: Any = None  # the ETA thread (service/eta.py), started with the loop

    # ---- inputs (any thread) -------------------------------------------------------------

    def submitted(self, job_id: int, spec: JobSpec, *, admitted: bool = False) -> None:
        """A stored job; ``admitted``: checked already (``policies.admission``), so the
        policy keeps it without checking it again."""
        self._intake.append((job_id, spec, admitted))
        self._wake.set()

    def submitted_many(self, new: list[tuple[int, JobSpec]]) -> None:
        """A committed batch of submissions (intake.py), admitted by ``Service.admit``: one
        wake-up of the loop for all."""
        self._intake.extend((job_id, spec, True) for job_id, spec in new)
        self._wake.set()

    def cancel(self, job_id: int) -> None:
        self._cancels.append(job_id)
        self._wake.set()

    def cull(self, job_id: int, why: str, idle_s: float) -> None:
        """Stop a running job now, culled (it ends STOPPED, reason ``culled``)."""
        self._culls.append((job_id, why, idle_s))
        self._wake.set()

    def inject(self, events_in: list[ServiceEvent]) -> None:
        """Events from outside the job lifecycle (``NodeDown``/``NodeUp`` from GPU health). A
        node an admin took down stays down: health saying it is fine does not bring it back."""
        self._external.extend(self._health(events_in))
        self._wake.set()

    def _health(self, events_in: list[ServiceEvent]) -> list[ServiceEvent]:
        """Node health as reported (GPU health, Kubernetes readiness), less what concerns nodes
        an admin holds down (they stay down, for the admin's reason); remembers which nodes
        health itself holds down."""
        out: list[ServiceEvent] = []
        for e in events_in:
            if isinstance(e, NodeDown):
                self.health_down[e.node] = e.reason
            elif isinstance(e, NodeUp):
                self.health_down.pop(e.node, None)
            if not (isinstance(e, NodeDown | NodeUp) and e.node in self.held):
                out.append(e)
        return out

    def take_down(self, node: str, reason: str, by: str) -> NodeDown:
        """An admin takes ``node`` out of service: its jobs are stopped and requeued, nothing
        starts there until ``bring_up``, and the mark is stored so a restart keeps it."""
        with self.store.write() as conn:
            conn.execute(delete(node_marks).where(node_marks.c.node == node))
            conn.execute(
                insert(node_marks).values(
                    node=node, reason=reason, marked_by=by, marked_at=self.clock()
                )
            )
        self.held[node] = _why_down(by, reason)
        return self._queue(NodeDown(node, self.clock(), self.held[node]))

    def bring_up(self, node: str) -> NodeUp | NodeDown:
        """Lift an admin's mark; the node takes work again unless health still holds it down
        (a broken GPU is not put back in service by hand)."""
        with self.store.write() as conn:
            conn.execute(delete(node_marks).where(node_marks.c.node == node))
        self.held.pop(node, None)
        broken = self.health_down.get(node)  # then it stays down, for health's reason
        if broken is None:
            return self._queue(NodeUp(node, self.clock()))
        return self._queue(NodeDown(node, self.clock(), broken))

    def _queue(self, event: E) -> E:
        """An admin's node event, past the health filter; returned so the caller can wait for
        the cluster view to show it."""
        self._external.append(event)
        self._wake.set()
        return event

    # ---- views (any thread) --------------------------------------------------------------

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
            specs = dict(self._specs)
        return views, specs, {**self.health_down, **self.held}

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def cluster(self) -> ClusterView[int]:
        with self._sched_lock:
            return self.policy.cluster()

    def handles(self, job_id: int) -> dict[TaskKey, TaskHandle]:
        running = self._running.get(job_id)
        if running is None and job_id in self._reserved.draining:
            running = self._reserved.draining[job_id].run
        return dict(running.handles) if running else {}

    async def next_change(self, timeout: float) -> None:
        """Wait, without holding a thread, for the next pass that changed the store (or for
        ``timeout``): what an async handler uses to follow a job (``cancel?wait=``)."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._waiters_lock:
            self._waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter[1].wait(), timeout)
        except TimeoutError:
            pass
        finally:
            with self._waiters_lock:
                self._waiters.remove(waiter)

    def _notify(self) -> None:
        with self.changed:
            self.changed.notify_all()
        with self._waiters_lock:
            waiters = list(self._waiters)
        for aloop, event in waiters:
            # its event loop may have closed: then nobody waits there any more
            with contextlib.suppress(RuntimeError):
                aloop.call_soon_threadsafe(event.set)

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
        if self.partial_stops and getattr(self.executor, "partial_stops", False):
            return scheduler
        return whole_job_stops(scheduler)

    # ---- recovery ------------------------------------------------------------------------

    def recover(self) -> None:
        """Rebuild the policy and the running set from the store; adopt running tasks."""
        # Launches finish first, so every task they start is known to the executor when it
        # re-adopts the store's tasks (stops in flight are chained again by the re-drains).
        self._actuator.wait_idle(timeout=self.grace_s + 30)
        # Submissions queued from here on are either read below or deduplicated at intake.
        self._intake.clear()
        with self.store.read() as conn:
            active = [
                dict(r)
                for r in conn.execute(
                    select(jobs).where(jobs.c.state.in_(lc.ACTIVE)).order_by(jobs.c.id)
                ).mappings()
            ]
            attempt_tasks = lc.attempt_tasks(conn, [j for j in active if j["state"] == lc.RUNNING])
            marks = list(conn.execute(select(node_marks)).mappings())
        by_job: dict[int, list[dict[str, Any]]] = {}
        for task in attempt_tasks:
            by_job.setdefault(task["job_id"], []).append(task)
        with self._sched_lock:
            self.policy = PolicyPort(self.new_policy())
        self._specs.clear()
        self._running.clear()
        self._recheck.clear()
        self._reserved.clear()
        adopts: list[ServiceEvent] = []
        submits: list[ServiceEvent] = []
        handles: list[TaskHandle] = []
        t = self.clock()
        unloadable: list[tuple[dict[str, Any], str]] = []
        for job in active:
            try:
                spec = self._load_spec(job)
            except Exception as err:  # stored before today's intake checks: fail it alone
                unloadable.append((job, _storable(f"{type(err).__name__}: {err}")))
                continue
            self._specs[job["id"]] = spec
            if job["cancel_requested"]:
                self._cancels.append(job["id"])
            if job["state"] == lc.WAITING:
                submits.append(Submit(job["id"], spec, t))
                continue
            run, adopt = self._restore(job, spec, by_job.get(job["id"], []), t)
            self._running[job["id"]] = run
            adopts.append(adopt)
            handles.extend(run.handles.values())
            if attempts.attempt_outcome(spec.roles, run.codes, lost=run.lost) is not None:
                # Decided before the restart (the rest of its tasks were being stopped): the
                # first pass settles it again, stopping what still runs.
                self._recheck.add(job["id"])
        if unloadable:
            self._fail_unloadable(unloadable, by_job, t)
        # The Tick asks for a pass once everything is restored: an Adopt places nothing, and a
        # job with some tasks stopped alone has those waiting even when nothing is submitted.
        self._pending_events = adopts + self._nodes_down(marks, t) + submits + [Tick(t)]
        self._pending_exits = self._adopt(handles) + self._inflight_exits
        self._inflight_exits = []
        self._wake.set()

    def _restore(
        self, job: dict[str, Any], spec: JobSpec, rows: list[dict[str, Any]], t: float
    ) -> tuple[_Running, Adopt[int]]:
        """A RUNNING job's attempt as the store has it: the loop's record of it (task ids,
        generations, handles of the running tasks, codes of the ended ones) and the ``Adopt``
        that puts its running tasks back on their GPUs. Each task counts in its latest
        generation; one stopped alone waits to be placed again, one that ended is done (its
        cells are free: ``TasksEnded``)."""
        run = _Running(job["attempt"])
        placements = []
        downgraded = []  # tasks running opportunistic on their own (lazy preemption)
        ended = []
        for task in _latest_generations(rows):
            at = (task["role"], task["idx"])
            run.generations[at] = task["generation"]
            if task["state"] == lc.STOPPED:
                continue  # stopped alone: the policy places it again
            key = task_key(
                job["id"], task["attempt"], task["role"], task["idx"], task["generation"]
            )
            run.task_ids[key] = task["id"]
            if task["state"] != lc.RUNNING:
                run.codes[at] = task["exit_code"]
                ended.append(at)
                continue
            run.handles[key] = TaskHandle(key, task["handle"] or {})
            if task["downgraded_by"]:
                downgraded.append((task["role"], task["idx"], task["downgraded_by"]))
            gpus = tuple(task["gpus"])
            placements.append(TaskPlacement(*at, task["node"], gpus, tuple(task["cells"])))
            run.gpus.update((task["node"], g) for g in gpus)
        run.lost = any(c is None for c in run.codes.values())
        run.deadline = deadline(spec.time_limit, job["started_at"])
        adopt = Adopt(
            job["id"],
            spec,
            tuple(placements),
            opportunistic=job["opportunistic"],
            time=t,
            downgraded=tuple(downgraded),
            ended=tuple(ended),
        )
        return run, adopt

    def _fail_unloadable(
        self, bad: list[tuple[dict[str, Any], str]], tasks_of: dict[int, list[Any]], t: float
    ) -> None:
        """Jobs whose stored spec no longer parses (stored before intake refused it) fail with
        the reason, their tasks stopped, so they cannot wedge every rebuild of the loop."""
        for job, message in bad:
            log.warning("job %s cannot be loaded from the store: %s", job["id"], message)
            handles = [
                TaskHandle(
                    task_key(job["id"], r["attempt"], r["role"], r["idx"], r["generation"]),
                    r["handle"],
                )
                for r in tasks_of.get(job["id"], [])
                if r["state"] == lc.RUNNING and r["handle"]
            ]
            if handles:
                self.executor.stop(handles, self.grace_s)
        with self.store.write() as conn:
            for job, message in bad:
                row = job_row(conn, job["id"])
                if row is None or row["state"] not in lc.ACTIVE:
                    continue
                why = f"its stored spec is no longer valid ({message}); submit it again"
                if row["state"] == lc.RUNNING:
                    lc.end_attempt(conn, row, lc.FAILED, "rejected", why, t)
                else:
                    lc.transition(conn, row, lc.FAILED, "rejected", why, t, finished_at=t)

    def _nodes_down(self, marks: list[Any], t: float) -> list[ServiceEvent]:
        """What a rebuilt policy must learn again: nodes an admin marked (stored) and nodes
        health holds down (remembered), as ``NodeDown`` events. They follow the adopts, so a
        job adopted on such a node (a kill between the mark and its pass) is stopped there."""
        nodes = {n.name for n in self.cluster().nodes}
        self.held = {}
        for mark in marks:
            if mark["node"] not in nodes:
                log.warning("node %r is marked down but not in the cluster: ignored", mark["node"])
                continue
            self.held[mark["node"]] = _why_down(mark["marked_by"], mark["reason"])
        down = {n: why for n, why in self.health_down.items() if n in nodes} | self.held
        return [NodeDown(node, t, why) for node, why in down.items()]

    def _adopt(self, handles: list[TaskHandle]) -> list[TaskExit]:
        """Hand recorded tasks back to the executor; a task whose launch was never recorded (a
        kill between launch and commit) that the executor cannot find is settled as lost."""
        exits: list[TaskExit] = []
        for handle in handles:
            try:
                exits.extend(self.executor.adopt([handle]))
            except (KeyError, ValueError, OSError) as err:
                reason = f"could not re-adopt the task after a restart ({err!r})"
                exits.append(TaskExit(handle.key, None, reason, requeue=True))
        return exits

    # ---- one pass ------------------------------------------------------------------------

    def step(self) -> bool:
        """Drain inputs, decide, commit, hand launches and stops to the workers. Returns
        whether anything changed."""
        t = self.clock()
        work = _Pass()
        # Events in an order that keeps the policy's view and the store's in step: restored jobs
        # first, then what ended, then new work (which may preempt), then cancels.
        recovered = self._pending_events
        self._pending_events = []
        events_in: list[ServiceEvent] = [e for e in recovered if isinstance(e, Adopt)]
        exits = self._pending_exits + _drain(self._worker_exits) + list(self.executor.poll())
        self._pending_exits = []
        self._inflight_exits = exits  # kept until committed: a failed pass must not lose them
        # Cancels before submissions: a job's submission is queued before any cancel of it, so
        # every cancel drained here finds its job in the intake drained next.
        cancels = _drain(self._cancels)
        intake = _drain(self._intake)
        self._collect_launched(work)
        self._collect_addresses(work)
        self._finish_drains(work, events_in)
        self._settle_exits(exits, work, events_in, t)
        self._stop_noticed(work, t)
        self._stop_expired(work, t)
        events_in.extend(_drain(self._external))  # node health (monitoring), before new work
        events_in.extend(e for e in recovered if not isinstance(e, Adopt))
        if self._node_events is not None:
            events_in.extend(self._health(self._node_events()))
        for job_id, spec, admitted in intake:
            if job_id in self._specs:
                continue  # already loaded from the store by a recovery
            self._specs[job_id] = spec
            events_in.append(Submit(job_id, spec, t, admitted=admitted))
            work.new_jobs.append(job_id)
        # after the submits: a job cancelled right after it was submitted must be known here
        events_in.extend(self._cancel_jobs(cancels, work, t))
        with self._sched_lock:
            due = self.policy.next_wakeup()
        if due is not None and due <= t:
            events_in.append(Tick(t))
        if not events_in and not (
            work.ended_tasks or work.settled or work.handles or work.stopping or work.tasks_stopped
        ):
            self._inflight_exits = []
            self.last_pass = t
            return False
        decisions = self._decide(events_in, work)
        work.released = self._reserved.release()  # held starts whose GPUs are free now
        work.decisions = list(work.released)
        self._apply(decisions, work, t)
        self._commit(work, t)
        self._inflight_exits = []
        self._launch(work.starts, t)
        self.last_pass = t
        self.passes += 1
        self._notify()
        return True

    def _collect_launched(self, work: _Pass) -> None:
        """Handles of tasks the workers started, to record in this pass's transaction."""
        for job_id, attempt, handles in _drain(self._launched):
            run = self._running.get(job_id)
            drain = self._reserved.draining.get(job_id)
            run = run or (drain.run if drain else None)
            if run is None or run.attempt != attempt:
                continue  # ended meanwhile: nothing left to find again after a restart
            for h in handles:
                run.handles[h.key] = h
                if h.key in run.task_ids:
                    work.handles.append((run.task_ids[h.key], h.info))

    def _collect_addresses(self, work: _Pass) -> None:
        """Addresses learnt since the launch (a pod's IP) go into the tasks' recorded handles,
        where ``GET /jobs/{id}`` shows them. One that arrives before its launch's handles is
        kept for a later pass; one of an attempt that has ended is dropped."""
        if self._addresses is None:
            return
        learnt = {**self._early_addresses, **self._addresses()}
        self._early_addresses = {}
        for key, address in learnt.items():
            run = self._running.get(key_job(key))
            if run is None or run.attempt != key.attempt:
                continue
            handle = run.handles.get(key)
            if handle is None:
                if key in run.task_ids:  # launched, its handles not collected yet
                    self._early_addresses[key] = address
                continue
            if handle.info.get("address") != address:
                run.handles[key] = handle = TaskHandle(key, {**handle.info, "address": address})
                work.handles.append((run.task_ids[key], handle.info))

    def _finish_drains(self, work: _Pass, out: list[ServiceEvent]) -> None:
        """Jobs whose tasks are gone: record their end and tell the policy, which only now
        counts their GPUs free; the starts held back for those GPUs follow in this pass."""
        for job_id, token in _drain(self._stopped):
            part = self._reserved.parts.pop(token, None)
            if part is not None:  # some tasks of a running job are gone
                work.tasks_stopped.append(part)
                for run in (self._running.get(job_id), self._draining_run(job_id)):
                    for key in part.keys:
                        if run is not None:
                            run.handles.pop(key, None)
                continue
            drain = self._reserved.draining.get(job_id)
            if drain is None or drain.token != token:
                continue  # a drain the loop forgot when it rebuilt from the store
            del self._reserved.draining[job_id]
            work.settled.append(drain.settle)
            if drain.event is not None:
                out.append(drain.event)
            if drain.settle.ends:
                self._specs.pop(job_id, None)

    def _draining_run(self, job_id: int) -> _Running | None:
        drain = self._reserved.draining.get(job_id)
        return drain.run if drain is not None else None

    def _begin_drain(
        self,
        run: _Running,
        settle: Settle,
        event: ServiceEvent | None,
        work: _Pass,
        why: str,
        only: set[TaskKey] | None = None,
    ) -> None:
        """Stop the attempt's tasks (``only`` these, when given) off the pass; its GPUs stay
        reserved until they are gone, and the store shows the job RUNNING, "stopping", until
        then."""
        job_id = settle.job_id
        self._notice_stop(job_id, run, list(run.handles.values()), why)
        token = next(self._tokens)
        drain = Drain(job_id, run, frozenset(run.gpus), settle, event, token)
        self._reserved.draining[job_id] = drain
        work.stopping.append((job_id, f"{why}; waiting for its tasks to exit "
                                      f"(grace {self.grace_s:g} s)"))  # fmt: skip
        self._actuator.submit(job_id, partial(self._stop_tasks, job_id, token, run, only))

    def _unstart(self, job_id: int, which: set[tuple[str, int]], work: _Pass) -> None:
        """Tasks a start of this same pass placed (not yet recorded, or held back for GPUs
        still draining) that a later decision stops: they are never launched, so their start
        loses them, as a whole job displaced before it launched loses its start. (Stopping
        only what was recorded left such a task placed in the store while the policy had
        freed its GPUs: the next start there collided with it.)"""

        def without(starts: list[Any]) -> list[Any]:
            kept = []
            for x in starts:
                if isinstance(x, Start) and x.job_id == job_id:
                    tasks = tuple(p for p in x.tasks if (p.role, p.index) not in which)
                    if not tasks:
                        continue
                    x = replace(x, tasks=tasks)
                kept.append(x)
            return kept

        work.decisions = without(work.decisions)
        self._reserved.held = without(self._reserved.held)

    def _stop_some(self, d: StopTasks[int], work: _Pass) -> None:
        """Stop these tasks alone (the job keeps running): their GPUs stay reserved until the
        processes are gone; the store records them STOPPED then, and their restart is the next
        generation, so a late exit of the old process is not theirs."""
        job_id = d.job_id
        run = self._running.get(job_id)
        if run is None:
            return
        which = {(p.role, p.index) for p in d.tasks}
        keys = [k for k in run.task_ids if (k.role, k.index) in which]
        ids = tuple(run.task_ids.pop(k) for k in keys)
        gpus = frozenset((p.node, g) for p in d.tasks for g in p.gpus)
        run.gpus -= gpus
        for k in keys:
            run.codes.pop((k.role, k.index), None)
        names = ", ".join(f"{r}-{i}" for r, i in sorted(which))
        why = f"{names}: " + (f"preempted by job {d.by}: {d.reason}" if d.by else d.reason)
        token = next(self._tokens)
        part = PartDrain(job_id, run.attempt, frozenset(keys), ids, gpus, why)
        self._notice_stop(job_id, run, [run.handles[k] for k in keys if k in run.handles], why)
        self._reserved.parts[token] = part
        self._actuator.submit(job_id, partial(self._stop_tasks, job_id, token, run, set(keys)))

    def _stop_tasks(
        self, job_id: int, token: int, run: _Running, only: set[TaskKey] | None
    ) -> None:
        """(A worker.) Stop the attempt's tasks, retrying while the executor fails (the GPUs
        stay reserved meanwhile), then tell the loop they are gone. Runs after the job's
        launch, so its handles are known."""
        delay = 0.5
        while True:
            try:
                handles = [h for k, h in run.handles.items() if only is None or k in only]
                self.executor.stop(handles, self.grace_s)
                break
            except Exception as err:
                if self._stopping.is_set():
                    return  # the next start re-adopts the job and stops it again
                log.warning("stopping job %s failed (%r); retrying in %.1f s", job_id, err, delay)
                self._stopping.wait(delay)
                delay = min(delay * 2, 10.0)
        self._stopped.append((job_id, token))
        self._wake.set()

    def _decide(self, events_in: list[ServiceEvent], work: _Pass) -> list[ServiceDecision]:
        decisions: list[ServiceDecision] = []
        refused: list[tuple[int, str]] = []
        displaced: set[int] = set()  # jobs this batch already sent back to waiting
        with self._sched_lock:
            for ev in events_in:
                if isinstance(ev, Requeue) and ev.job_id in displaced:
                    continue  # already waiting in the policy
                if isinstance(ev, Finish) and ev.job_id in displaced:
                    ev = Cancel(ev.job_id, ev.time)  # done after all: leave the queue
                if isinstance(ev, Requeue | Finish | Cancel):
                    # A start decided for the attempt now ending (an incremental job's next
                    # task, placed on another event's freed GPUs) never happens, whether this
                    # batch decided it or an earlier one held it back for draining GPUs: the
                    # policy frees its cells with the attempt, and may place the job anew.
                    # (A held one left behind was recorded onto the next attempt beside the
                    # policy's new placement: a GPU taken twice, found with per-task stops.)
                    decisions = [
                        d for d in decisions if not (isinstance(d, Start) and d.job_id == ev.job_id)
                    ]
                    self._reserved.drop(ev.job_id)
                began = time.perf_counter()
                try:
                    out = self.policy.handle(ev)
                    if decisions_log.isEnabledFor(logging.DEBUG):  # --log-level debug
                        decisions_log.debug("%r -> %r", ev, out)
                    if self.on_decision is not None:
                        self.on_decision(time.perf_counter() - began)
                    decisions.extend(out)
                    displaced.update(d.job_id for d in out if isinstance(d, Preempt | Stop))
                except SpecRejected as err:  # the cluster changed under a stored job
                    job_id = ev.job_id  # type: ignore[union-attr]
                    work.rejected.append((job_id, str(err)))
                    self._specs.pop(job_id, None)
                    self._running.pop(job_id, None)
                except ValueError as err:
                    if not isinstance(ev, Adopt):
                        raise
                    refused.append((ev.job_id, str(err)))
        for job_id, message in refused:
            # Its cells are gone or taken (the cluster changed while the service was down):
            # stop what runs there and queue the job again, without spending a retry.
            run = self._running.pop(job_id, None)
            if run is not None:
                self.executor.stop(list(run.handles.values()), self.grace_s)
            why = f"could not keep its cells after a restart: {message}"
            work.settled.append(Settle(job_id, lc.WAITING, "requeued", why))
            spec = self._specs.get(job_id)
            if spec is not None:  # (else the next recovery loads it WAITING and submits it)
                self._pending_events.append(Submit(job_id, spec, self.clock()))
            self._wake.set()
        return decisions

    def _settle_exits(
        self, exits: list[TaskExit], work: _Pass, out: list[ServiceEvent], t: float
    ) -> None:
        """Record task exits; settle every attempt whose outcome is now decided, and tell the
        policy of the tasks that ended while their attempt goes on (``TasksEnded``)."""
        decided = set(self._recheck)
        self._recheck.clear()
        ended: dict[int, list[tuple[str, int]]] = {}
        for ex in exits:
            job_id = key_job(ex.key)
            run = self._running.get(job_id)
            if run is None or ex.key.attempt != run.attempt or ex.key not in run.task_ids:
                continue  # a stale attempt's straggler
            work.ended_tasks.append((run.task_ids[ex.key], ex.exit_code))
            if ex.timed_out:  # its backend's time limit (Slurm's TIMEOUT), not a failure of its own
                decided.discard(job_id)
                self._end_at_limit(job_id, run, ex.time_limit, work, t)
                continue
            if self.on_task_exit is not None and ex.exit_code != 0:
                self.on_task_exit(job_id, ex)
            run.codes[(ex.key.role, ex.key.index)] = ex.exit_code
            if failure_reason(ex.reason) or ex.reason.startswith(NOT_STARTED):  # the why says so
                run.notes[(ex.key.role, ex.key.index)] = ex.reason
            run.lost = run.lost or ex.requeue or ex.exit_code is None
            decided.add(job_id)
            ended.setdefault(job_id, []).append((ex.key.role, ex.key.index))
        for job_id in sorted(decided):
            run = self._running.get(job_id)
            spec = self._specs.get(job_id)
            if run is None or spec is None:
                continue
            outcome = attempts.attempt_outcome(spec.roles, run.codes, lost=run.lost)
            if outcome is None:
                if job_id in ended:  # their cells are free; they are not placed again
                    out.append(TasksEnded(job_id, tuple(ended[job_id]), t))
                continue
            del self._running[job_id]
            settle, event = self._settle(job_id, run, outcome, t)
            # By task, not by handle: a launch still in flight has no handles yet.
            alive = {k for k in run.task_ids if (k.role, k.index) not in run.codes}
            if alive:  # the rest of the gang must go before the policy reuses its cells
                self._begin_drain(run, settle, event, work, settle.why or settle.reason, alive)
                continue
            work.settled.append(settle)
            out.append(event)
            if settle.ends:
                self._specs.pop(job_id, None)

    def _settle(
        self, job_id: int, run: _Running, outcome: attempts.Outcome, t: float
    ) -> tuple[Settle, ServiceEvent]:
        """Where the attempt goes (``attempts``'s rules), and what the policy learns once its
        tasks are gone (Finish frees for good, Requeue keeps the job's place in the queue)."""
        bad = sorted(
            f"{r}-{i}: {c}" + (f" ({run.notes[r, i]})" if (r, i) in run.notes else "")
            for (r, i), c in run.codes.items()
            if c != 0
        )
        code = next((c for c in run.codes.values() if c not in (0, None)), None)
        retries = used = 0
        if outcome == "failed":  # the retry budget is the store's
            with self.store.read() as conn:
                job = job_row(conn, job_id)
            assert job is not None
            retries, used = job["retries"], job["retries_used"]
        end = attempts.attempt_end(outcome, retries, used)
        what = ", ".join(bad)
        why = {
            "succeeded": None,
            "lost": f"attempt {run.attempt} lost its tasks ({what or 'vanished'})",
            "failed": f"attempt {run.attempt} failed (exit codes {what})"
            + (f"; {end.note}" if end.note else ""),
        }[outcome]
        code = {"succeeded": 0, "lost": None}.get(outcome, code)
        settle = Settle(job_id, end.state, end.reason, why, end.spend_retry, code)
        return settle, (Requeue if end.requeued else Finish)(job_id, t)

    def _notice_stop(self, job_id: int, run: _Running, handles: list[TaskHandle], why: str) -> None:
        """A stop begins: its grace period is the notice, in the tasks' files before SIGTERM."""
        notice = nt.drain_notice(why, self.grace_s, run.attempt, self.clock())
        self.notices.put(job_id, notice)
        nt.write_files(self.executor, handles, notice.doc())

    def _stop_noticed(self, work: _Pass, t: float) -> None:
        """Culls asked for are stopped now; a job nearing its time limit gets its notice."""
        for job_id, why, idle_s in _drain(self._culls):
            run = self._running.pop(job_id, None)
            if run is None:
                continue  # ended or stopping meanwhile
            self.notices.culled(held_gpus(self._specs.get(job_id), len(run.gpus)), idle_s)
            settle = Settle(job_id, lc.STOPPED, nt.CULL, why)
            self._begin_drain(run, settle, Cancel(job_id, t), work, why)
        for job_id, run in self._running.items():
            spec = self._specs.get(job_id)
            limit = spec.time_limit if spec is not None else None
            notice = nt.time_limit_notice(run.deadline, limit, self.stop_notice_s, run.attempt, t)
            if notice is not None and self.notices.put(job_id, notice):  # new: say it
                handles = list(run.handles.values())
                nt.announce(self.store, self.executor, job_id, handles, notice, t)
        self.notices.keep_only(set(self._running) | set(self._reserved.draining))

    def _stop_expired(self, work: _Pass, t: float) -> None:
        """Jobs past their time limit are stopped the way a cancel stops them (grace period,
        GPUs reserved until the tasks are gone) and end FAILED, retries unspent: a rerun would
        hit the same limit."""
        for job_id, run in list(self._running.items()):
            if run.deadline is None or run.deadline > t:
                continue
            self._end_at_limit(job_id, run, None, work, t)

    def _end_at_limit(
        self, job_id: int, run: _Running, limit: float | None, work: _Pass, t: float
    ) -> None:
        """End the job FAILED at its time limit (``limit``: the one its backend enforced, when
        it says; else the job's own), stopping what is left of it."""
        spec = self._specs.get(job_id)
        limit = limit or (spec.time_limit if spec is not None else None)
        reason = limit_reached(limit) if limit else "time limit reached"
        why = f"{reason}; ask for more time (time_limit, --time) if it needs longer"
        del self._running[job_id]
        settle = Settle(job_id, lc.FAILED, reason, why)
        self._begin_drain(run, settle, Finish(job_id, t), work, reason)

    def _cancel_jobs(self, cancels: list[int], work: _Pass, t: float) -> list[ServiceEvent]:
        out: list[ServiceEvent] = []
        for job_id in dict.fromkeys(cancels):
            cancelled = Settle(job_id, lc.STOPPED, "cancelled")
            drain = self._reserved.draining.get(job_id)
            if job_id in self._running:
                run = self._running.pop(job_id)
                self._begin_drain(run, cancelled, Cancel(job_id, t), work, "cancelled")
            elif drain is not None:  # already stopping: it ends cancelled
                if drain.event is None:  # the policy has it waiting again: drop it now
                    out.append(Cancel(job_id, t))
                drain.settle, drain.event = cancelled, Cancel(job_id, t)
                self._reserved.drop(job_id)
            elif job_id in self._specs:
                work.cancelled_waiting.append(job_id)
                self._specs.pop(job_id, None)
                self._reserved.drop(job_id)  # a start held back for it never happens
                out.append(Cancel(job_id, t))
        return out

    def _apply(self, decisions: list[ServiceDecision], work: _Pass, t: float) -> None:
        """Sort the policy's decisions: a victim's tasks are stopped off the pass (draining),
        a start onto GPUs still draining is held back until they are free, and the rest is
        committed in the policy's order."""
        for d in decisions:
            job_id = d.job_id
            if isinstance(d, Start):
                if self._reserved.blocks(d):
                    self._reserved.hold(d)
                    if blockers := self._reserved.blockers(d):
                        ids = ", ".join(map(str, blockers))
                        why = (f"placed; starts once the tasks of job {ids} have exited "
                               f"(grace {self.grace_s:g} s)")  # fmt: skip
                        work.held_whys.append((job_id, why))
                else:
                    work.decisions.append(d)
            elif isinstance(d, StopTasks):
                self._unstart(job_id, {(p.role, p.index) for p in d.tasks}, work)
                self._stop_some(d, work)
            elif isinstance(d, Preempt | Stop):
                # Displaced before it launched: its start never happens (it stays WAITING).
                self._reserved.drop(job_id)
                work.decisions = [
                    x for x in work.decisions if not (isinstance(x, Start) and x.job_id == d.job_id)
                ]
                if isinstance(d, Preempt):
                    reason, why = "preempted", f"preempted by job {d.by}: {d.reason}"
                else:
                    reason, why = "stopped", d.reason
                run = self._running.pop(job_id, None)
                drain = self._reserved.draining.get(job_id)
                if run is not None:
                    victim = Settle(job_id, lc.WAITING, reason, why)
                    self._begin_drain(run, victim, None, work, why)
                elif drain is not None and drain.event is not None:
                    # Already stopping; the policy now has it waiting (or gone, if it ends).
                    ends = drain.settle.ends
                    drain.event = Cancel(d.job_id, t) if ends else None
            else:
                work.decisions.append(d)

    def _commit(self, work: _Pass, t: float) -> None:
        """Everything the pass decided, in one transaction."""
        stale: list[int] = []
        with self.store.write() as conn:
            for task_id, info in work.handles:
                lc.record_handle(conn, task_id, info)
            for task_id, code in work.ended_tasks:
                lc.task_ended(conn, task_id, code, t)
            for part in work.tasks_stopped:
                job = job_row(conn, part.job_id)
                if job is not None and (job["state"], job["attempt"]) == (lc.RUNNING, part.attempt):
                    lc.tasks_stopped(conn, job, part.task_ids, part.why, t)
            for job_id, why in work.stopping:
                job = job_row(conn, job_id)
                if job is not None and job["state"] == lc.RUNNING:
                    lc.transition(conn, job, lc.RUNNING, "stopping", why, t)
            for job_id, why in work.held_whys:
                conn.execute(
                    update(jobs)
                    .where(jobs.c.id == job_id, jobs.c.state == lc.WAITING)
                    .values(why=why)
                )
            for end in work.settled:
                job = job_row(conn, end.job_id)
                if job is None or job["state"] != lc.RUNNING:
                    continue
                if job["cancel_requested"] and end.state == lc.WAITING:
                    end = replace(end, state=lc.STOPPED, reason="cancelled")
                    stale.append(end.job_id)  # the policy was told Requeue
                lc.end_attempt(
                    conn, job, end.state, end.reason, end.why, t,
                    spend_retry=end.spend_retry, exit_code=end.exit_code,
                )  # fmt: skip
            for job_id in work.cancelled_waiting:
                job = job_row(conn, job_id)
                if job is not None and job["state"] == lc.WAITING:
                    lc.stop_waiting(conn, job, "cancelled", t)
            for job_id, message in work.rejected:
                job = job_row(conn, job_id)
                if job is not None and job["state"] in lc.ACTIVE:
                    if job["state"] == lc.RUNNING:
                        lc.end_attempt(conn, job, lc.FAILED, "rejected", message, t)
                    else:
                        lc.transition(conn, job, lc.FAILED, "rejected", message, t, finished_at=t)
            # In the policy's order (a victim's end, above, before the start on its GPUs).
            pending: dict[int, list[Start[int]]] = {}
            released = {id(d) for d in work.released}  # held starts recorded in this pass
            for d in work.decisions:
                job = job_row(conn, d.job_id)
                if job is None:
                    continue
                if isinstance(d, Start) and job["state"] in lc.ACTIVE:
                    held = id(d) in released
                    if self._record_start_alone(conn, job, d, t, held):
                        pending.setdefault(job["id"], []).append(d)
                    else:
                        stale.append(job["id"])  # FAILED in the store: free its cells
                elif isinstance(d, Start):
                    stale.append(job["id"])  # ended in the store: never started
                elif isinstance(d, Downgrade) and job["state"] == lc.RUNNING:
                    # Some tasks only (partial stops): the job stays guaranteed, the note names
                    # the tasks now opportunistic.
                    names = ", ".join(f"{p.role}-{p.index}" for p in d.tasks)
                    if not d.tasks:
                        conn.execute(
                            update(jobs).where(jobs.c.id == job["id"]).values(opportunistic=True)
                        )
                    else:
                        keys = [(p.role, p.index) for p in d.tasks]
                        lc.tasks_downgraded(conn, job, keys, d.by)
                    why = f"downgraded by job {d.by}: {d.reason}"
                    lc.note(conn, job, "downgraded", f"{names}: {why}" if names else why, t)
            work.starts = [d for starts in pending.values() for d in starts]
            try:
                with conn.begin_nested():
                    self._record_whys(conn, work.new_jobs)
            except Exception as err:  # a why is a courtesy: it never fails the pass
                if transient(err):
                    raise
                log.warning("could not record why new jobs wait (%s)", type(err).__name__)
        if stale:
            # The store ended these jobs while the policy still holds them (waiting, or placed
            # by this very pass): remove them next pass, so their cells go to someone else.
            self._pending_events.extend(Cancel(job_id, t) for job_id in stale)
            self._wake.set()

    def _record_start_alone(
        self, conn: Any, job: dict[str, Any], d: Start[int], t: float, held: bool = False
    ) -> bool:
        """Record one start in its own savepoint: a job whose start the store cannot hold (a
        role name it cannot encode or that is too long, stored before intake refused such
        names) fails alone, with a reason, instead of failing the pass for every job. A
        database that is down is not the job's fault: that error fails the pass (retried)."""
        try:
            with conn.begin_nested():
                self._record_start(conn, job, d, t)
                if held:
                    self._record_downgrades(conn, job, d)
            return True
        except Exception as err:
            if transient(err):
                raise
            kind = type(err).__name__
        log.warning("job %s: its start could not be recorded (%s)", job["id"], kind)
        why = (
            f"its start could not be recorded in the job store ({kind}): a task "
            "role or name it cannot hold (a lone surrogate, a NUL, over 128 characters); "
            "rename it and submit again"
        )
        if job["state"] == lc.RUNNING:
            lc.end_attempt(conn, job, lc.FAILED, "unstorable", why, t)
        else:
            lc.transition(conn, job, lc.FAILED, "unstorable", why, t, finished_at=t)
        self._specs.pop(job["id"], None)
        self._running.pop(job["id"], None)
        return False

    def _record_start(self, conn: Any, job: dict[str, Any], d: Start[int], t: float) -> None:
        run = self._running.setdefault(job["id"], _Running(job["attempt"]))
        # A task started again within its attempt is its next generation (a new row).
        keys = [_next_key(run, job["id"], p.role, p.index) for p in d.tasks]
        generations = [k.generation for k in keys]
        run.generations.update(((k.role, k.index), k.generation) for k in keys)
        _, ids = lc.start(conn, job, d.tasks, d.opportunistic, t, generations)
        if job["state"] == lc.WAITING:  # not when an incremental job grows
            spec = self._specs.get(job["id"])
            run.deadline = deadline(spec.time_limit if spec is not None else None, t)
        for p, key, task_id in zip(d.tasks, keys, ids, strict=True):
            run.task_ids[key] = task_id
            run.gpus.update((p.node, g) for g in p.gpus)

    def _record_downgrades(self, conn: Any, job: dict[str, Any], d: Start[int]) -> None:
        """A start held back for draining GPUs is recorded passes after the policy decided it:
        a task of it the policy downgraded meanwhile is marked now (its Downgrade, recorded
        then, found no row), so a restart adopts it outside its VC's cells."""
        with self._sched_lock:
            view = self.policy.job(job["id"])
        placed = {(p.role, p.index) for p in d.tasks}
        by_task = {(r, i): by for r, i, by in (view.downgraded if view else ()) if (r, i) in placed}
        for by in set(by_task.values()):
            lc.tasks_downgraded(conn, job, [at for at, b in by_task.items() if b == by], by)

    def _record_whys(self, conn: Any, job_ids: list[int]) -> None:
        """The why-text of freshly queued jobs goes on the job and on its 'submitted' event."""
        whys = []
        with self._sched_lock:
            for job_id in job_ids:
                view = self.policy.job(job_id)
                if view is not None and view.state == lc.WAITING and view.why:
                    whys.append({"jid": job_id, "w": view.why})
        lc.set_whys(conn, whys)

    def _launch(self, starts: list[Start[int]], t: float) -> None:
        """Hand the committed starts to the workers; a launch that cannot even be described
        (its environment cannot be built) fails its attempt like a failed launch."""
        for d in starts:
            job_id = d.job_id
            run = self._running.get(job_id)
            spec = self._specs.get(job_id)
            if run is None or spec is None:
                continue
            with self.store.read() as conn:
                job = job_row(conn, job_id)
            if job is None:
                continue
            try:
                launches = [
                    replace(x, key=_current_key(run, x.key))
                    for x in self._build(job, spec, d.tasks)
                ]
            except Exception as err:
                self._launch_failed(job_id, run, d.tasks, err)
                continue
            self._actuator.submit(
                job_id, partial(self._launch_tasks, job_id, run, launches, d.tasks)
            )

    def _launch_tasks(
        self,
        job_id: int,
        run: _Running,
        launches: list[TaskLaunch],
        placements: tuple[TaskPlacement, ...],
    ) -> None:
        """(A worker.) Start the tasks; the next pass records their handles."""
        try:
            handles = self.executor.launch(launches)
        except Exception as err:  # LaunchError, or any executor failure: the attempt failed
            self._launch_failed(job_id, run, placements, err)
            return
        for h in handles:
            run.handles[h.key] = h  # before any stop chained after this launch runs
        self._launched.append((job_id, run.attempt, handles))
        self._wake.set()

    def _launch_failed(
        self, job_id: int, run: _Running, placements: tuple[TaskPlacement, ...], err: Exception
    ) -> None:
        log.warning("job %s failed to launch: %s", job_id, err)
        for p in placements:
            key = _current_key(run, task_key(job_id, run.attempt, p.role, p.index))
            self._worker_exits.append(TaskExit(key, 127, str(err)))
        self._wake.set()

    def _build(
        self, job: dict[str, Any], spec: JobSpec, placements: tuple[TaskPlacement, ...]
    ) -> list[TaskLaunch]:
        if self._launch_builder is not None:
            return self._launch_builder(job, spec, placements)
        return default_launches(job, spec, placements, self.virtual)

    def _requeue_all(self, why: str) -> None:
        t = self.clock()
        done = _Pass()  # jobs whose stop completed end as decided (cancelled, failed ...)
        self._finish_drains(done, [])
        self._commit(done, t)
        draining = [(job_id, d.run) for job_id, d in self._reserved.draining.items()]
        for job_id, run in list(self._running.items()) + draining:
            self.executor.stop(list(run.handles.values()), self.grace_s)
            with self.store.write() as conn:
                job = job_row(conn, job_id)
                if job is not None and job["state"] == lc.RUNNING:
                    lc.end_attempt(conn, job, lc.WAITING, "requeued", why, t)
        self._running.clear()
        self._reserved.clear()


def _current_key(run: _Running, key: TaskKey) -> TaskKey:
    """The key of the newest generation of ``key``'s task the attempt recorded (``key`` itself
    when there is none)."""
    same = [k for k in run.task_ids if (k.role, k.index) == (key.role, key.index)]
    return max(same, key=lambda k: k.generation, default=key)


def _next_key(run: _Running, job_id: int, role: str, index: int) -> TaskKey:
    """The key a (re)start of this task records: one generation past its newest."""
    newest = _current_key(run, task_key(job_id, run.attempt, role, index, 0)).generation
    newest = max(newest, run.generations.get((role, index), 0))
    return task_key(job_id, run.attempt, role, index, newest + 1)


def _storable(text: str, limit: int = 400) -> str:
    """``text`` as any store holds it: surrogates escaped, NULs dropped, cut to ``limit``."""
    return text.encode("utf-8", "backslashreplace").decode().replace("\0", "")[:limit]


def transient(err: BaseException) -> bool:
    """Whether a store error is the database's (down, connection lost: retry the pass) rather
    than one row's (a value it cannot hold: fail that job)."""
    if isinstance(err, OperationalError | InterfaceError | DisconnectionError | PoolTimeout):
        return True
    return bool(getattr(err, "connection_invalidated", False))


def _why_down(by: str, reason: str) -> str:
    return f"taken down by {by}" + (f": {reason}" if reason else "")


def _latest_generations(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each task of an attempt as its latest generation (in the rows' order). An earlier one
    is over (stopped alone; in stores written before ``TasksEnded``, also one that ended by
    itself just before the policy stopped it and placed it again): it holds nothing now."""
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        at = (row["role"], row["idx"])
        if at not in latest or row["generation"] > latest[at]["generation"]:
            latest[at] = row
    return [row for row in rows if latest[(row["role"], row["idx"])] is row]


def _drain(queue: deque[T]) -> list[T]:
    out = []
    while queue:
        out.append(queue.popleft())
    return out


def whole_job_stops(scheduler: Scheduler) -> Scheduler:
    """A policy that stops and downgrades whole jobs: ``labhive serve --stops jobs``, and always
    for an executor that cannot stop some tasks of a job and start them again (its names carry
    no task generation: Kubernetes, Slurm)."""
    if hasattr(scheduler, "partial_stops"):
        scheduler.partial_stops = False
    return scheduler
