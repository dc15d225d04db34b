"""Exits, time limits, culls and cancels -> how attempts end (pure: no store, no executor).

Each function reads and updates the loop's ``Runs`` and writes what the pass must record or
order into its ``Plan``; the events for the policy go to ``out``. An attempt whose tasks must
still be stopped *drains*: its GPUs stay reserved and the ``Settle`` is recorded only once the
workers report the tasks gone (``finish_drains``).
"""

from __future__ import annotations

from dataclasses import replace

from labhive.scheduler.core.gpu_share import held_gpus
from labhive.scheduler.core.model import (
    Cancel,
    Finish,
    Preempt,
    Requeue,
    Start,
    Stop,
    StopTasks,
    TasksEnded,
)
from labhive.scheduler.core.time_limits import limit_reached
from labhive.scheduler.drivers import attempts
from labhive.scheduler.executors.base import NOT_STARTED, TaskExit, TaskKey
from labhive.scheduler.observe.tally import failure_reason
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service import notices as nt
from labhive.scheduler.service.policy_port import ServiceDecision, ServiceEvent, key_job
from labhive.scheduler.service.runtime.plan import Plan, StopOrder
from labhive.scheduler.service.runtime.runs import (
    Drain,
    PartDrain,
    Running,
    Runs,
    Settle,
    Stopped,
)


def begin_drain(
    runs: Runs,
    run: Running,
    settle: Settle,
    event: ServiceEvent | None,
    plan: Plan,
    why: str,
    grace_s: float,
    only: set[TaskKey] | None = None,
) -> None:
    """Stop the attempt's tasks (``only`` these, when given) off the pass; its GPUs stay
    reserved until they are gone, and the store shows the job RUNNING, "stopping", until
    then."""
    job_id = settle.job_id
    token = next(runs.tokens)
    runs.reserved.draining[job_id] = Drain(job_id, run, frozenset(run.gpus), settle, event, token)
    plan.stopping.append((job_id, f"{why}; waiting for its tasks to exit (grace {grace_s:g} s)"))
    plan.stops.append(StopOrder.of(job_id, token, run, only, why, list(run.handles.values())))


def stop_some(runs: Runs, d: StopTasks[int], plan: Plan) -> None:
    """Stop these tasks alone (the job keeps running): their GPUs stay reserved until the
    processes are gone; the store records them STOPPED then, and their restart is the next
    generation, so a late exit of the old process is not theirs."""
    job_id = d.job_id
    run = runs.running.get(job_id)
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
    token = next(runs.tokens)
    runs.reserved.parts[token] = PartDrain(job_id, run.attempt, frozenset(keys), ids, gpus, why)
    notify = [run.handles[k] for k in keys if k in run.handles]
    plan.stops.append(StopOrder.of(job_id, token, run, set(keys), why, notify))


def unstart(runs: Runs, job_id: int, which: set[tuple[str, int]], plan: Plan) -> None:
    """Tasks a start of this same pass placed (not yet recorded, or held back for GPUs
    still draining) that a later decision stops: they are never launched, so their start
    loses them, as a whole job displaced before it launched loses its start. (Stopping
    only what was recorded left such a task placed in the store while the policy had
    freed its GPUs: the next start there collided with it.)"""

    def without(starts: list[ServiceDecision]) -> list[ServiceDecision]:
        kept = []
        for x in starts:
            if isinstance(x, Start) and x.job_id == job_id:
                tasks = tuple(p for p in x.tasks if (p.role, p.index) not in which)
                if not tasks:
                    continue
                x = replace(x, tasks=tasks)
            kept.append(x)
        return kept

    plan.decisions = without(plan.decisions)
    runs.reserved.held = [x for x in without(list(runs.reserved.held)) if isinstance(x, Start)]


def finish_drains(runs: Runs, stopped: list[Stopped], plan: Plan, out: list[ServiceEvent]) -> None:
    """Jobs whose tasks are gone: record their end and tell the policy, which only now
    counts their GPUs free; the starts held back for those GPUs follow in this pass."""
    for msg in stopped:
        job_id, token = msg.job_id, msg.token
        part = runs.reserved.parts.pop(token, None)
        if part is not None:  # some tasks of a running job are gone
            plan.tasks_stopped.append(part)
            for run in (runs.running.get(job_id), runs.draining_run(job_id)):
                for key in part.keys:
                    if run is not None:
                        run.handles.pop(key, None)
            continue
        drain = runs.reserved.draining.get(job_id)
        if drain is None or drain.token != token:
            continue  # a drain the loop forgot when it rebuilt from the store
        del runs.reserved.draining[job_id]
        plan.settled.append(drain.settle)
        if drain.event is not None:
            out.append(drain.event)
        if drain.settle.ends:
            runs.specs.pop(job_id, None)


def settle_exits(
    runs: Runs, exits: list[TaskExit], plan: Plan, out: list[ServiceEvent], t: float, grace_s: float
) -> None:
    """Record task exits; settle every attempt whose outcome is now decided, and tell the
    policy of the tasks that ended while their attempt goes on (``TasksEnded``)."""
    decided = set(runs.recheck)
    runs.recheck.clear()
    ended: dict[int, list[tuple[str, int]]] = {}
    for ex in exits:
        job_id = key_job(ex.key)
        run = runs.running.get(job_id)
        if run is None or ex.key.attempt != run.attempt or ex.key not in run.task_ids:
            continue  # a stale attempt's straggler
        plan.ended_tasks.append((run.task_ids[ex.key], ex.exit_code))
        if ex.timed_out:  # its backend's time limit (Slurm's TIMEOUT), not a failure of its own
            decided.discard(job_id)
            end_at_limit(runs, job_id, run, ex.time_limit, plan, t, grace_s)
            continue
        if ex.exit_code != 0:
            plan.failed_exits.append((job_id, ex))
        run.codes[(ex.key.role, ex.key.index)] = ex.exit_code
        if failure_reason(ex.reason) or ex.reason.startswith(NOT_STARTED):  # the why says so
            run.notes[(ex.key.role, ex.key.index)] = ex.reason
        run.lost = run.lost or ex.requeue or ex.exit_code is None
        decided.add(job_id)
        ended.setdefault(job_id, []).append((ex.key.role, ex.key.index))
    for job_id in sorted(decided):
        run = runs.running.get(job_id)
        spec = runs.specs.get(job_id)
        if run is None or spec is None:
            continue
        outcome = attempts.attempt_outcome(spec.roles, run.codes, lost=run.lost)
        if outcome is None:
            if job_id in ended:  # their cells are free; they are not placed again
                out.append(TasksEnded(job_id, tuple(ended[job_id]), t))
            continue
        del runs.running[job_id]
        settle, event = attempt_settle(job_id, run, outcome, t)
        # By task, not by handle: a launch still in flight has no handles yet.
        alive = {k for k in run.task_ids if (k.role, k.index) not in run.codes}
        if alive:  # the rest of the gang must go before the policy reuses its cells
            why = settle.why or settle.reason
            begin_drain(runs, run, settle, event, plan, why, grace_s, alive)
            continue
        plan.settled.append(settle)
        out.append(event)
        if settle.ends:
            runs.specs.pop(job_id, None)


def attempt_settle(
    job_id: int, run: Running, outcome: attempts.Outcome, t: float
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
    if outcome == "failed":  # the retry budget is the store's, as the attempt began
        retries, used = run.retries, run.retries_used
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


def cull(
    runs: Runs, culls: list[tuple[int, str, float]], plan: Plan, t: float, grace_s: float
) -> None:
    """Culls asked for are stopped now (the job ends STOPPED, reason ``culled``)."""
    for job_id, why, idle_s in culls:
        run = runs.running.pop(job_id, None)
        if run is None:
            continue  # ended or stopping meanwhile
        plan.culled.append((held_gpus(runs.specs.get(job_id), len(run.gpus)), idle_s))
        settle = Settle(job_id, lc.STOPPED, nt.CULL, why)
        begin_drain(runs, run, settle, Cancel(job_id, t), plan, why, grace_s)


def stop_expired(runs: Runs, plan: Plan, t: float, grace_s: float) -> None:
    """Jobs past their time limit are stopped the way a cancel stops them (grace period,
    GPUs reserved until the tasks are gone) and end FAILED, retries unspent: a rerun would
    hit the same limit."""
    for job_id, run in list(runs.running.items()):
        if run.deadline is None or run.deadline > t:
            continue
        end_at_limit(runs, job_id, run, None, plan, t, grace_s)


def end_at_limit(
    runs: Runs,
    job_id: int,
    run: Running,
    limit: float | None,
    plan: Plan,
    t: float,
    grace_s: float,
) -> None:
    """End the job FAILED at its time limit (``limit``: the one its backend enforced, when
    it says; else the job's own), stopping what is left of it."""
    spec = runs.specs.get(job_id)
    limit = limit or (spec.time_limit if spec is not None else None)
    reason = limit_reached(limit) if limit else "time limit reached"
    why = f"{reason}; ask for more time (time_limit, --time) if it needs longer"
    del runs.running[job_id]
    settle = Settle(job_id, lc.FAILED, reason, why)
    begin_drain(runs, run, settle, Finish(job_id, t), plan, reason, grace_s)


def cancel_jobs(
    runs: Runs, cancels: list[int], plan: Plan, t: float, grace_s: float
) -> list[ServiceEvent]:
    """Cancels: a running job drains, a draining one ends cancelled, a waiting one leaves the
    queue (and any start held back for it never happens)."""
    out: list[ServiceEvent] = []
    for job_id in dict.fromkeys(cancels):
        cancelled = Settle(job_id, lc.STOPPED, "cancelled")
        drain = runs.reserved.draining.get(job_id)
        if job_id in runs.running:
            run = runs.running.pop(job_id)
            begin_drain(runs, run, cancelled, Cancel(job_id, t), plan, "cancelled", grace_s)
        elif drain is not None:  # already stopping: it ends cancelled
            if drain.event is None:  # the policy has it waiting again: drop it now
                out.append(Cancel(job_id, t))
            drain.settle, drain.event = cancelled, Cancel(job_id, t)
            runs.reserved.drop(job_id)
        elif job_id in runs.specs:
            plan.cancelled_waiting.append(job_id)
            runs.specs.pop(job_id, None)
            runs.reserved.drop(job_id)
            out.append(Cancel(job_id, t))
    return out


def apply(
    runs: Runs, decisions: list[ServiceDecision], plan: Plan, t: float, grace_s: float
) -> None:
    """Sort the policy's decisions: a victim's tasks are stopped off the pass (draining),
    a start onto GPUs still draining is held back until they are free, and the rest is
    committed in the policy's order."""
    reserved = runs.reserved
    for d in decisions:
        job_id = d.job_id
        if isinstance(d, Start):
            if reserved.blocks(d):
                reserved.hold(d)
                if blockers := reserved.blockers(d):
                    ids = ", ".join(map(str, blockers))
                    why = (f"placed; starts once the tasks of job {ids} have exited "
                           f"(grace {grace_s:g} s)")  # fmt: skip
                    plan.held_whys.append((job_id, why))
            else:
                plan.decisions.append(d)
        elif isinstance(d, StopTasks):
            unstart(runs, job_id, {(p.role, p.index) for p in d.tasks}, plan)
            stop_some(runs, d, plan)
        elif isinstance(d, Preempt | Stop):
            # Displaced before it launched: its start never happens (it stays WAITING).
            reserved.drop(job_id)
            plan.decisions = [
                x for x in plan.decisions if not (isinstance(x, Start) and x.job_id == d.job_id)
            ]
            if isinstance(d, Preempt):
                reason, why = "preempted", f"preempted by job {d.by}: {d.reason}"
            else:
                reason, why = "stopped", d.reason
            run = runs.running.pop(job_id, None)
            drain = reserved.draining.get(job_id)
            if run is not None:
                victim = Settle(job_id, lc.WAITING, reason, why)
                begin_drain(runs, run, victim, None, plan, why, grace_s)
            elif drain is not None and drain.event is not None:
                # Already stopping; the policy now has it waiting (or gone, if it ends).
                ends = drain.settle.ends
                drain.event = Cancel(d.job_id, t) if ends else None
        else:
            plan.decisions.append(d)
