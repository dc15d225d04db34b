"""The short job form (``gpus: 2``, ``command: ...``): one role of ``tasks`` tasks."""

from __future__ import annotations

from typing import Any

from labhive.scheduler.core import job_limits as lim
from labhive.scheduler.core.job_fields import (
    _check_commands,
    _check_share,
    _cwd,
    _duration,
    _flag,
    _gpus,
    _limit,
    _num,
    _observe,
    _priority,
    _str,
    _time_limit,
    _Where,
)
from labhive.scheduler.core.job_spec import JobSpec, RoleSpec

SHORT_KEYS = {
    "name",
    "vc",
    "priority",
    "tasks",
    "gpus",
    "cpu",
    "memory_mb",
    "retries",
    "duration",
    "gang",
    "sku",
    "command",
    "observe",
    "user",
    "image",
    "lazy_preemption",
    "pinned_cell",
    "time_limit",
    "cpu_limit",
    "memory_limit_mb",
    "cwd",
}


#: The role name a short-form job's tasks get.
SHORT_ROLE = "main"


def _short(data: dict[str, Any], default_vc: str, where: _Where) -> JobSpec:
    unknown = sorted(set(data) - SHORT_KEYS, key=str)
    if unknown:
        raise where.error(
            str(unknown[0]),
            data,
            f"unknown key; a short-form job has {', '.join(sorted(SHORT_KEYS))} "
            "(an OpenPAI job starts with protocolVersion: 2)",
            unknown[0],
        )
    name = _str(data, "name", where, "name", max_len=lim.MAX_JOB_NAME)
    if not name:
        raise where.error("name", data, "is required: give the job a name")
    tasks = _num(data, "tasks", where, "tasks", minimum=1, whole=True, default=1)
    command = data.get("command")
    if command is not None and not isinstance(command, (str, list)):
        raise where.error("command", data, "must be a string or a list of strings", "command")
    commands = tuple(command) if isinstance(command, list) else (command,) if command else ()
    _check_commands(commands, data, "command", where)
    cpu = float(_num(data, "cpu", where, "cpu", minimum=0, whole=False, default=1.0))
    memory_mb = _num(data, "memory_mb", where, "memory_mb", minimum=0, whole=True, default=1024)
    gpus, share = _gpus(data, "gpus", where, "gpus", 1)
    role = RoleSpec(
        SHORT_ROLE,
        instances=tasks,
        gpu=gpus,
        share_milli=share,
        cpu=cpu,
        memory_mb=memory_mb,
        sku=_str(data, "sku", where, "sku"),
        commands=tuple(str(c) for c in commands),
        pinned_cell=_str(data, "pinned_cell", where, "pinned_cell"),
        cpu_limit=_limit(data, "cpu_limit", where, "cpu_limit", cpu, "cpu"),
        memory_limit_mb=_limit(
            data, "memory_limit_mb", where, "memory_limit_mb", memory_mb, "memory_mb"
        ),
    )
    spec = JobSpec(
        name=name,
        vc=_str(data, "vc", where, "vc", default_vc, max_len=lim.MAX_VC_NAME),
        priority=_priority(data, "priority", where, "priority", "test"),
        roles=(role,),
        gang=_flag(data, "gang", where, "gang", True),
        retries=_num(data, "retries", where, "retries", minimum=0, whole=True, default=0),
        duration=_duration(data, where),
        lazy_preemption=_flag(data, "lazy_preemption", where, "lazy_preemption", False),
        user=_str(data, "user", where, "user"),
        image=_str(data, "image", where, "image"),
        observe=_observe(data, where, "observe"),
        time_limit=_time_limit(data, "time_limit", where, "time_limit"),
        cwd=_cwd(data, "cwd", where, "cwd"),
        raw=dict(data),
    )
    _check_share(spec, data, where, "gpus", "gpus")
    return spec
