"""What a start launches: one ``TaskLaunch`` per placed task, keyed by its current generation."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import Start, TaskPlacement
from labhive.scheduler.executors import env
from labhive.scheduler.executors.base import TaskKey, TaskLaunch
from labhive.scheduler.executors.env import free_port, task_env
from labhive.scheduler.service.policy_port import policy_id, task_key
from labhive.scheduler.service.runtime import record
from labhive.scheduler.service.runtime.runs import Launch, Running, Runs, current_key
from labhive.scheduler.service.store import Store

log = logging.getLogger("labhive.service.loop")

#: Builds the tasks' launch descriptions for a start (``serve``'s builder plugs in): the job's
#: stored row, its spec and its placements.
LaunchBuilder = env.LaunchBuilder


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


def build_launches(
    builder: LaunchBuilder | None,
    virtual: bool,
    job: dict[str, Any],
    spec: JobSpec,
    run: Running,
    placements: tuple[TaskPlacement, ...],
) -> list[TaskLaunch]:
    """The start's launches (``builder``'s, else the default), each keyed by the generation
    its task's start recorded."""
    made = (
        builder(job, spec, placements)
        if builder is not None
        else default_launches(job, spec, placements, virtual)
    )
    return [replace(x, key=current_key(run, x.key)) for x in made]


def failed_keys(
    job_id: int, run: Running, placements: tuple[TaskPlacement, ...]
) -> tuple[TaskKey, ...]:
    """The keys a launch that could not even be described ends (its tasks' current ones)."""
    return tuple(
        current_key(run, task_key(job_id, run.attempt, p.role, p.index)) for p in placements
    )


def prepare(
    store: Store,
    builder: LaunchBuilder | None,
    virtual: bool,
    runs: Runs,
    start: Start[int],
) -> tuple[Launch, list[TaskLaunch] | None] | None:
    """A committed start's launch, put on its run until the worker reports (None: the job
    ended meanwhile). A launch that cannot even be described (its environment cannot be
    built) comes back failed, with no tasks: it fails its attempt like a failed launch."""
    job_id = start.job_id
    run = runs.running.get(job_id)
    spec = runs.specs.get(job_id)
    if run is None or spec is None:
        return None
    row = record.read_job(store, job_id)
    if row is None:
        return None
    try:
        tasks = build_launches(builder, virtual, dict(row), spec, run, start.tasks)
    except Exception as err:
        log.warning("job %s failed to launch: %s", job_id, err)
        keys = failed_keys(job_id, run, start.tasks)
        return Launch(job_id, run.attempt, keys, error=str(err)), None
    launch = Launch(job_id, run.attempt, tuple(x.key for x in tasks))
    run.launching.append(launch)
    return launch, tasks
