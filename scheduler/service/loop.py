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

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import delete, insert, select, update

from labhive.scheduler.executors.base import (
    Executor,
    TaskExit,
    TaskHandle,
    TaskKey,
    TaskLaunch,
)
from labhive.scheduler.executors.env import free_port, task_env
from labhive.scheduler.jobs import JobSpec
from labhive.scheduler.model import (
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
    Requeue,
    Scheduler,
    SpecRejected,
    Start,
    Stop,
    Submit,
    TaskPlacement,
    Tick,
)
from labhive.scheduler.observe.tally import failure_reason
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.store import Store, job_row, jobs, node_marks

log = logging.getLogger("labhive.service.loop")
E = TypeVar("E", bound=Event)

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
            str(job["id"]), spec, placements, job["attempt"], p.role, p.index,
            master_port=port, virtual=virtual,
        )  # fmt: skip
        out.append(
            TaskLaunch(
                key=TaskKey(str(job["id"]), job["attempt"], p.role, p.index),
                job_name=job["name"],
                command="\n".join(role.commands),
                node=p.node,
                gpus=p.gpus,
                virtual=virtual,
                cpu=role.cpu,
                memory_mb=role.memory_mb,
                env=env,
                image=spec.image,
                user=job["user"],
                observe=spec.observe,
                vc=spec.vc,
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
    notes: dict[tuple[str, int], str] = field(default_factory=dict)  # why a task was killed
    lost: bool = False


@dataclass
class _Pass:
    """The store changes one pass accumulates for its single transaction."""

    ended_tasks: list[tuple[int, int | None]] = field(default_factory=list)
    settled: list[tuple[int, str, str, str | None, bool, int | None]] = field(default_factory=list)
    cancelled_waiting: list[int] = field(default_factory=list)
    rejected: list[tuple[int, str]] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)  # in the policy's order
    starts: list[Start] = field(default_factory=list)  # those still standing after the commit
    new_jobs: list[int] = field(default_factory=list)


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
        node_events: Callable[[], list[Event]] | None = None,
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
        self.scheduler = make_scheduler()
        self._sched_lock = threading.Lock()  # guards the policy: the pass and the views
        self._intake: deque[tuple[int, JobSpec]] = deque()
        self._cancels: deque[int] = deque()
        self._pending_events: list[Event] = []
        self._pending_exits: list[TaskExit] = []
        self._inflight_exits: list[TaskExit] = []
        self._specs: dict[int, JobSpec] = {}
        self._running: dict[int, _Running] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_pass = 0.0
        self.passes = 0
        self.changed = threading.Condition()  # notified after every pass that changed the store
        # Monitoring hooks (service/monitoring.py): node-health events in, timings and exits out.
        self._external: deque[Event] = deque()
        self.held: dict[str, str] = {}  # nodes an admin took down -> why (see take_down)
        self.health_down: dict[str, str] = {}  # nodes health reports down -> why, whatever
        # admins say (kept so a rebuilt policy learns them again)
        self.on_decision: Callable[[float], None] | None = None
        self.on_task_exit: Callable[[int, TaskExit], None] | None = None

    # ---- inputs (any thread) -------------------------------------------------------------

    def submitted(self, job_id: int, spec: JobSpec) -> None:
        self._intake.append((job_id, spec))
        self._wake.set()

    def cancel(self, job_id: int) -> None:
        self._cancels.append(job_id)
        self._wake.set()

    def inject(self, events_in: list[Event]) -> None:
        """Events from outside the job lifecycle (``NodeDown``/``NodeUp`` from GPU health). A
        node an admin took down stays down: health saying it is fine does not bring it back."""
        self._external.extend(self._health(events_in))
        self._wake.set()

    def _health(self, events_in: list[Event]) -> list[Event]:
        """Node health as reported (GPU health, Kubernetes readiness), less what concerns nodes
        an admin holds down (they stay down, for the admin's reason); remembers which nodes
        health itself holds down."""
        out: list[Event] = []
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

    def view(self, job_id: int) -> JobView | None:
        with self._sched_lock:
            return self.scheduler.job(str(job_id))

    def views(self) -> list[JobView]:
        with self._sched_lock:
            return self.scheduler.jobs()

    def cluster(self) -> ClusterView:
        with self._sched_lock:
            return self.scheduler.cluster()

    def handles(self, job_id: int) -> dict[TaskKey, TaskHandle]:
        running = self._running.get(job_id)
        return dict(running.handles) if running else {}

    # ---- life ----------------------------------------------------------------------------

    def start(self) -> None:
        self.recover()
        self._thread = threading.Thread(target=self._run, name="labhive-loop", daemon=True)
        self._thread.start()

    def stop(self, stop_tasks: bool = False) -> None:
        """End the loop; with ``stop_tasks`` every running job is stopped and requeued (so the
        next start runs it again) instead of being left for re-adoption."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if stop_tasks:
            self._requeue_all("the service stopped")

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.poll_s)
            self._wake.clear()
            if self._stopping.is_set():
                break
            try:
                self.step()
            except Exception:  # never let one bad pass kill the service: rebuild from the store
                log.exception("scheduler pass failed; rebuilding the policy from the store")
                time.sleep(0.5)
                self.recover()

    # ---- recovery ------------------------------------------------------------------------

    def recover(self) -> None:
        """Rebuild the policy and the running set from the store; adopt running tasks."""
        # Submissions queued from here on are either read below or deduplicated at intake.
        self._intake.clear()
        with self.store.read() as conn:
            active = [
                dict(r)
                for r in conn.execute(
                    select(jobs).where(jobs.c.state.in_(lc.ACTIVE)).order_by(jobs.c.id)
                ).mappings()
            ]
            attempt_tasks = lc.attempt_tasks(conn, [j for j in active if j["state"] == "RUNNING"])
            marks = list(conn.execute(select(node_marks)).mappings())
        by_job: dict[int, list[dict[str, Any]]] = {}
        for task in attempt_tasks:
            by_job.setdefault(task["job_id"], []).append(task)
        with self._sched_lock:
            self.scheduler = self._make_scheduler()
        self._specs.clear()
        self._running.clear()
        adopts: list[Event] = []
        submits: list[Event] = []
        handles: list[TaskHandle] = []
        t = self.clock()
        for job in active:
            spec = self._load_spec(job)
            self._specs[job["id"]] = spec
            if job["cancel_requested"]:
                self._cancels.append(job["id"])
            if job["state"] == lc.WAITING:
                submits.append(Submit(str(job["id"]), spec, t))
                continue
            run = _Running(job["attempt"])
            placements = []
            # The whole attempt goes back to the policy, ended tasks included (a gang is placed
            # whole); only the tasks still running go back to the executor.
            for task in by_job.get(job["id"], []):
                key = TaskKey(str(job["id"]), task["attempt"], task["role"], task["idx"])
                run.task_ids[key] = task["id"]
                if task["state"] == lc.RUNNING:
                    handle = TaskHandle(key, task["handle"] or {})
                    run.handles[key] = handle
                    handles.append(handle)
                else:
                    run.codes[(task["role"], task["idx"])] = task["exit_code"]
                placements.append(
                    TaskPlacement(
                        task["role"],
                        task["idx"],
                        task["node"],
                        tuple(task["gpus"]),
                        tuple(task["cells"]),
                    )
                )
            run.lost = any(c is None for c in run.codes.values())
            self._running[job["id"]] = run
            adopts.append(Adopt(str(job["id"]), spec, tuple(placements), job["opportunistic"], t))
        self._pending_events = adopts + self._nodes_down(marks, t) + submits
        self._pending_exits = self._adopt(handles) + self._inflight_exits
        self._inflight_exits = []
        self._wake.set()

    def _nodes_down(self, marks: list[Any], t: float) -> list[Event]:
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
        """Drain inputs, decide, apply. Returns whether anything changed."""
        t = self.clock()
        work = _Pass()
        # Events in an order that keeps the policy's view and the store's in step: restored jobs
        # first, then what ended, then new work (which may preempt), then cancels.
        recovered = self._pending_events
        self._pending_events = []
        events_in: list[Event] = [e for e in recovered if isinstance(e, Adopt)]
        exits = self._pending_exits + list(self.executor.poll())
        self._pending_exits = []
        self._inflight_exits = exits  # kept until committed: a failed pass must not lose them
        # Cancels before submissions: a job's submission is queued before any cancel of it, so
        # every cancel drained here finds its job in the intake drained next.
        cancels = _drain(self._cancels)
        intake = _drain(self._intake)
        self._settle_exits(exits, work, events_in, t)
        events_in.extend(_drain(self._external))  # node health (monitoring), before new work
        events_in.extend(e for e in recovered if not isinstance(e, Adopt))
        if self._node_events is not None:
            events_in.extend(self._health(self._node_events()))
        for job_id, spec in intake:
            if job_id in self._specs:
                continue  # already loaded from the store by a recovery
            self._specs[job_id] = spec
            events_in.append(Submit(str(job_id), spec, t))
            work.new_jobs.append(job_id)
        # after the submits: a job cancelled right after it was submitted must be known here
        events_in.extend(self._cancel_jobs(cancels, work, t))
        with self._sched_lock:
            due = self.scheduler.next_wakeup()
        if due is not None and due <= t:
            events_in.append(Tick(t))
        if not events_in and not work.ended_tasks and not work.settled:
            self._inflight_exits = []
            self.last_pass = t
            return False
        decisions = self._decide(events_in, work)
        self._apply(decisions, work, t)
        self._commit(work, t)
        self._inflight_exits = []
        self._launch(work.starts, t)
        self.last_pass = t
        self.passes += 1
        with self.changed:
            self.changed.notify_all()
        return True

    def _decide(self, events_in: list[Event], work: _Pass) -> list[Decision]:
        decisions: list[Decision] = []
        refused: list[tuple[int, str]] = []
        displaced: set[str] = set()  # jobs this batch already sent back to waiting
        with self._sched_lock:
            for ev in events_in:
                if isinstance(ev, Requeue) and ev.job_id in displaced:
                    continue  # already waiting in the policy
                if isinstance(ev, Finish) and ev.job_id in displaced:
                    ev = Cancel(ev.job_id, ev.time)  # done after all: leave the queue
                began = time.perf_counter()
                try:
                    out = self.scheduler.handle(ev)
                    if self.on_decision is not None:
                        self.on_decision(time.perf_counter() - began)
                    decisions.extend(out)
                    displaced.update(d.job_id for d in out if isinstance(d, Preempt | Stop))
                except SpecRejected as err:  # the cluster changed under a stored job
                    job_id = int(ev.job_id)  # type: ignore[union-attr]
                    work.rejected.append((job_id, str(err)))
                    self._specs.pop(job_id, None)
                    self._running.pop(job_id, None)
                except ValueError as err:
                    if not isinstance(ev, Adopt):
                        raise
                    refused.append((int(ev.job_id), str(err)))
        for job_id, message in refused:
            # Its cells are gone or taken (the cluster changed while the service was down):
            # stop what runs there and queue the job again, without spending a retry.
            run = self._running.pop(job_id, None)
            if run is not None:
                self.executor.stop(list(run.handles.values()), self.grace_s)
            why = f"could not keep its cells after a restart: {message}"
            work.settled.append((job_id, lc.WAITING, "requeued", why, False, None))
            self._pending_events.append(Submit(str(job_id), self._specs[job_id], self.clock()))
            self._wake.set()
        return decisions

    def _settle_exits(self, exits: list[TaskExit], work: _Pass, out: list[Event], t: float) -> None:
        """Record task exits; settle every attempt whose outcome is now decided."""
        decided: set[int] = set()
        for ex in exits:
            job_id = int(ex.key.job_id)
            run = self._running.get(job_id)
            if run is None or ex.key.attempt != run.attempt or ex.key not in run.task_ids:
                continue  # a stale attempt's straggler
            work.ended_tasks.append((run.task_ids[ex.key], ex.exit_code))
            if self.on_task_exit is not None and ex.exit_code != 0:
                self.on_task_exit(job_id, ex)
            run.codes[(ex.key.role, ex.key.index)] = ex.exit_code
            if failure_reason(ex.reason):  # killed for memory: the job's why says so
                run.notes[(ex.key.role, ex.key.index)] = ex.reason
            run.lost = run.lost or ex.requeue or ex.exit_code is None
            decided.add(job_id)
        for job_id in sorted(decided):
            run = self._running[job_id]
            spec = self._specs[job_id]
            outcome = lc.attempt_outcome(spec.roles, run.codes, lost=run.lost)
            if outcome is None:
                continue
            alive = [h for k, h in run.handles.items() if (k.role, k.index) not in run.codes]
            if alive:
                self.executor.stop(alive, self.grace_s)
            self._settle(job_id, outcome, work, out, t)

    def _settle(self, job_id: int, outcome: str, work: _Pass, out: list[Event], t: float) -> None:
        """Decide where the attempt goes and tell the policy (Finish frees for good, Requeue
        keeps the job's place in the queue)."""
        run = self._running.pop(job_id)
        bad = sorted(
            f"{r}-{i}: {c}" + (f" ({run.notes[r, i]})" if (r, i) in run.notes else "")
            for (r, i), c in run.codes.items()
            if c != 0
        )
        code = next((c for c in run.codes.values() if c not in (0, None)), None)
        if outcome == "succeeded":
            work.settled.append((job_id, lc.SUCCEEDED, "succeeded", None, False, 0))
            out.append(Finish(str(job_id), t))
            self._specs.pop(job_id, None)
            return
        if outcome == "lost":
            why = f"attempt {run.attempt} lost its tasks ({', '.join(bad) or 'vanished'})"
            work.settled.append((job_id, lc.WAITING, "lost", why, False, None))
            out.append(Requeue(str(job_id), t))
            return
        with self.store.read() as conn:
            job = job_row(conn, job_id)
        assert job is not None
        target, spend = lc.after_failure(job)
        why = f"attempt {run.attempt} failed (exit codes {', '.join(bad)})"
        if target == lc.WAITING:
            why += f"; retry {job['retries_used'] + 1} of {job['retries']}"
            work.settled.append((job_id, target, "retrying", why, spend, code))
            out.append(Requeue(str(job_id), t))
        else:
            work.settled.append((job_id, target, "failed", why, spend, code))
            out.append(Finish(str(job_id), t))
            self._specs.pop(job_id, None)

    def _cancel_jobs(self, cancels: list[int], work: _Pass, t: float) -> list[Event]:
        out: list[Event] = []
        for job_id in dict.fromkeys(cancels):
            if job_id in self._running:
                run = self._running.pop(job_id)
                self.executor.stop(list(run.handles.values()), self.grace_s)
                work.settled.append((job_id, lc.STOPPED, "cancelled", None, False, None))
                self._specs.pop(job_id, None)
                out.append(Cancel(str(job_id), t))
            elif job_id in self._specs:
                work.cancelled_waiting.append(job_id)
                self._specs.pop(job_id, None)
                out.append(Cancel(str(job_id), t))
        return out

    def _apply(self, decisions: list[Decision], work: _Pass, t: float) -> None:
        """Stop the processes of preempted jobs before the store says their GPUs are free."""
        work.decisions = decisions
        for d in decisions:
            if isinstance(d, Preempt | Stop):
                run = self._running.pop(int(d.job_id), None)
                if run is not None:
                    self.executor.stop(list(run.handles.values()), self.grace_s)

    def _commit(self, work: _Pass, t: float) -> None:
        """Everything the pass decided, in one transaction."""
        stale: list[int] = []
        with self.store.write() as conn:
            for task_id, code in work.ended_tasks:
                lc.task_ended(conn, task_id, code, t)
            for job_id, target, reason, why, spend, code in work.settled:
                job = job_row(conn, job_id)
                if job is None or job["state"] != lc.RUNNING:
                    continue
                if job["cancel_requested"] and target == lc.WAITING:
                    target, reason = lc.STOPPED, "cancelled"
                    stale.append(job_id)  # the policy was told Requeue
                lc.end_attempt(conn, job, target, reason, why, t, spend_retry=spend, exit_code=code)
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
            # In the policy's order: a job started and preempted within one batch must end up
            # WAITING, its GPUs free for whoever the policy gave them to next.
            pending: dict[int, list[Start]] = {}
            for d in work.decisions:
                job = job_row(conn, int(d.job_id))
                if job is None:
                    continue
                if isinstance(d, Start) and job["state"] in lc.ACTIVE:
                    self._record_start(conn, job, d, t)
                    pending.setdefault(job["id"], []).append(d)
                elif isinstance(d, Start):
                    stale.append(job["id"])  # ended in the store: never started
                elif isinstance(d, Preempt | Stop) and job["state"] == lc.RUNNING:
                    if isinstance(d, Preempt):
                        reason, why = "preempted", f"preempted by job {d.by}: {d.reason}"
                    else:
                        reason, why = "stopped", d.reason
                    lc.end_attempt(conn, job, lc.WAITING, reason, why, t)
                    pending.pop(job["id"], None)
                    self._running.pop(job["id"], None)
                elif isinstance(d, Downgrade) and job["state"] == lc.RUNNING:
                    conn.execute(
                        update(jobs).where(jobs.c.id == job["id"]).values(opportunistic=True)
                    )
                    lc.note(conn, job, "downgraded", f"downgraded by job {d.by}: {d.reason}", t)
            work.starts = [d for starts in pending.values() for d in starts]
            self._record_whys(conn, work.new_jobs)
        if stale:
            # The store ended these jobs while the policy still holds them (waiting, or placed
            # by this very pass): remove them next pass, so their cells go to someone else.
            self._pending_events.extend(Cancel(str(job_id), t) for job_id in stale)
            self._wake.set()

    def _record_start(self, conn: Any, job: dict[str, Any], d: Start, t: float) -> None:
        _, ids = lc.start(conn, job, d.tasks, d.opportunistic, t)
        run = self._running.setdefault(job["id"], _Running(job["attempt"]))
        for p, task_id in zip(d.tasks, ids, strict=True):
            run.task_ids[TaskKey(str(job["id"]), job["attempt"], p.role, p.index)] = task_id

    def _record_whys(self, conn: Any, job_ids: list[int]) -> None:
        """The why-text of freshly queued jobs goes on the job and on its 'submitted' event."""
        whys = []
        with self._sched_lock:
            for job_id in job_ids:
                view = self.scheduler.job(str(job_id))
                if view is not None and view.state == lc.WAITING and view.why:
                    whys.append({"jid": job_id, "w": view.why})
        lc.set_whys(conn, whys)

    def _launch(self, starts: list[Start], t: float) -> None:
        failed: list[int] = []
        for d in starts:
            job_id = int(d.job_id)
            run = self._running.get(job_id)
            spec = self._specs.get(job_id)
            if run is None or spec is None:
                continue
            with self.store.read() as conn:
                job = job_row(conn, job_id)
            if job is None:
                continue
            launches = self._build(job, spec, d.tasks)
            try:
                handles = self.executor.launch(launches)
            except Exception as err:  # LaunchError, or any executor failure: the attempt failed
                log.warning("job %s failed to launch: %s", job_id, err)
                for launch in launches:
                    self._pending_exits.append(TaskExit(launch.key, 127, str(err)))
                failed.append(job_id)
                continue
            with self.store.write() as conn:
                for h in handles:
                    run.handles[h.key] = h
                    lc.record_handle(conn, run.task_ids[h.key], h.info)
        if failed:
            self._wake.set()

    def _build(
        self, job: dict[str, Any], spec: JobSpec, placements: tuple[TaskPlacement, ...]
    ) -> list[TaskLaunch]:
        if self._launch_builder is not None:
            return self._launch_builder(job, spec, placements)
        return default_launches(job, spec, placements, self.virtual)

    def _requeue_all(self, why: str) -> None:
        t = self.clock()
        for job_id, run in list(self._running.items()):
            self.executor.stop(list(run.handles.values()), self.grace_s)
            with self.store.write() as conn:
                job = job_row(conn, job_id)
                if job is not None and job["state"] == lc.RUNNING:
                    lc.end_attempt(conn, job, lc.WAITING, "requeued", why, t)
        self._running.clear()


def _why_down(by: str, reason: str) -> str:
    return f"taken down by {by}" + (f": {reason}" if reason else "")


def _drain(queue: deque) -> list:
    out = []
    while queue:
        out.append(queue.popleft())
    return out
