"""What a start launches: one ``TaskLaunch`` per placed task, keyed by its current generation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from labhive.scheduler.executors.base import TaskLaunch
from labhive.scheduler.executors.env import free_port, task_env
from labhive.scheduler.jobs import JobSpec
from labhive.scheduler.model import TaskPlacement
from labhive.scheduler.service.policy_port import policy_id, task_key
from labhive.scheduler.service.runtime.runs import Running, current_key

#: Builds the tasks' launch descriptions for a start (the local executor's env builder plugs in;
#: ``executors.env.LaunchBuilder`` is the same contract).
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
) -> tuple[Any, ...]:
    """The keys a launch that could not even be described ends (its tasks' current ones)."""
    return tuple(
        current_key(run, task_key(job_id, run.attempt, p.role, p.index)) for p in placements
    )
