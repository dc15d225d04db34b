"""Rebuilding the loop from the store after a start or a failed pass, and adopting what runs.

The policy is rebuilt from the store (``Adopt`` for RUNNING jobs on the cells their tasks hold,
``Submit`` in submission order for WAITING ones); the executor is handed each recorded task
(``Executor.adopt``), and a task it cannot find (a kill between launch and commit) is settled
as lost, its job requeued.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import Adopt, Submit, TaskPlacement
from labhive.scheduler.core.time_limits import deadline
from labhive.scheduler.drivers import attempts
from labhive.scheduler.executors.base import Executor, TaskExit, TaskHandle
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.policy_port import ServiceEvent, task_key
from labhive.scheduler.service.runtime import record
from labhive.scheduler.service.runtime.record import Stored
from labhive.scheduler.service.runtime.runs import Running, Runs
from labhive.scheduler.service.store import Store
from labhive.scheduler.service.store.queries import JobRow, TaskRow

log = logging.getLogger("labhive.service.loop")

#: Reads a stored job's spec (``server.load_spec``): the row as the store has it.
SpecLoader = Callable[[dict[str, Any]], JobSpec]


@dataclass
class Rebuilt:
    """What the loop learns from the store: events for the policy, tasks to adopt, cancels
    asked for before the restart, and jobs whose spec no longer loads."""

    adopts: list[ServiceEvent] = field(default_factory=list)
    submits: list[ServiceEvent] = field(default_factory=list)
    handles: list[TaskHandle] = field(default_factory=list)
    cancels: list[int] = field(default_factory=list)
    unloadable: list[tuple[JobRow, str]] = field(default_factory=list)


def rebuild(stored: Stored, runs: Runs, load_spec: SpecLoader, t: float) -> Rebuilt:
    """Fill the (cleared) ``runs`` from the store: every active job's spec, every running
    attempt's record."""
    by_job = tasks_by_job(stored.tasks)
    out = Rebuilt()
    for job in stored.active:
        try:
            spec = load_spec(dict(job))
        except Exception as err:  # stored before today's intake checks: fail it alone
            out.unloadable.append((job, storable(f"{type(err).__name__}: {err}")))
            continue
        runs.specs[job["id"]] = spec
        if job["cancel_requested"]:
            out.cancels.append(job["id"])
        if job["state"] == lc.WAITING:
            out.submits.append(Submit(job["id"], spec, t))
            continue
        run, adopt = restore(job, spec, by_job.get(job["id"], []), t)
        runs.running[job["id"]] = run
        out.adopts.append(adopt)
        out.handles.extend(run.handles.values())
        if attempts.attempt_outcome(spec.roles, run.codes, lost=run.lost) is not None:
            # Decided before the restart (the rest of its tasks were being stopped): the
            # first pass settles it again, stopping what still runs.
            runs.recheck.add(job["id"])
    return out


def tasks_by_job(rows: list[TaskRow]) -> dict[int, list[TaskRow]]:
    by_job: dict[int, list[TaskRow]] = {}
    for task in rows:
        by_job.setdefault(task["job_id"], []).append(task)
    return by_job


def restore(
    job: JobRow, spec: JobSpec, rows: list[TaskRow], t: float
) -> tuple[Running, Adopt[int]]:
    """A RUNNING job's attempt as the store has it: the loop's record of it (task ids,
    generations, handles of the running tasks, codes of the ended ones) and the ``Adopt``
    that puts its running tasks back on their GPUs. Each task counts in its latest
    generation; one stopped alone waits to be placed again, one that ended is done (its
    cells are free: ``TasksEnded``)."""
    run = Running(job["attempt"], retries=job["retries"], retries_used=job["retries_used"])
    placements = []
    downgraded = []  # tasks running opportunistic on their own (lazy preemption)
    ended = []
    for task in latest_generations(rows):
        at = (task["role"], task["idx"])
        run.generations[at] = task["generation"]
        if task["state"] == lc.STOPPED:
            continue  # stopped alone: the policy places it again
        key = task_key(job["id"], task["attempt"], task["role"], task["idx"], task["generation"])
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


def latest_generations(rows: list[TaskRow]) -> list[TaskRow]:
    """Each task of an attempt as its latest generation (in the rows' order). An earlier one
    is over (stopped alone; in stores written before ``TasksEnded``, also one that ended by
    itself just before the policy stopped it and placed it again): it holds nothing now."""
    latest: dict[tuple[str, int], TaskRow] = {}
    for row in rows:
        at = (row["role"], row["idx"])
        if at not in latest or row["generation"] > latest[at]["generation"]:
            latest[at] = row
    return [row for row in rows if latest[(row["role"], row["idx"])] is row]


def fail_unloadable(
    store: Store,
    executor: Executor,
    grace_s: float,
    bad: list[tuple[JobRow, str]],
    tasks_of: dict[int, list[TaskRow]],
    t: float,
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
            executor.stop(handles, grace_s)
    failed = [
        (job["id"], f"its stored spec is no longer valid ({message}); submit it again")
        for job, message in bad
    ]
    record.fail_jobs(store, failed, t)


def adopt(executor: Executor, handles: list[TaskHandle]) -> list[TaskExit]:
    """Hand recorded tasks back to the executor; a task whose launch was never recorded (a
    kill between launch and commit) that the executor cannot find is settled as lost."""
    exits: list[TaskExit] = []
    for handle in handles:
        try:
            exits.extend(executor.adopt([handle]))
        except (KeyError, ValueError, OSError) as err:
            reason = f"could not re-adopt the task after a restart ({err!r})"
            exits.append(TaskExit(handle.key, None, reason, requeue=True))
    return exits


def storable(text: str, limit: int = 400) -> str:
    """``text`` as any store holds it: surrogates escaped, NULs dropped, cut to ``limit``."""
    return text.encode("utf-8", "backslashreplace").decode().replace("\0", "")[:limit]
