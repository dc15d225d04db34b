"""OpenPAI's job protocol v2 (``protocolVersion: 2``, ``taskRoles``), read as HiveD reads it."""

from __future__ import annotations

from typing import Any

from labhive.scheduler.core import job_limits as lim
from labhive.scheduler.core.job_fields import (
    _check_commands,
    _check_share,
    _cwd,
    _flag,
    _gpus,
    _limit,
    _mapping,
    _num,
    _observe,
    _priority,
    _show,
    _str,
    _time_limit,
    _Where,
)
from labhive.scheduler.core.job_spec import JobSpec, RoleSpec

OPENPAI_KEYS = {
    "protocolVersion",
    "name",
    "type",
    "version",
    "contributor",
    "description",
    "prerequisites",
    "parameters",
    "secrets",
    "jobRetryCount",
    "taskRoles",
    "deployments",
    "defaults",
    "extras",
}
ROLE_KEYS = {
    "instances",
    "completion",
    "taskRetryCount",
    "dockerImage",
    "data",
    "output",
    "script",
    "extraContainerOptions",
    "resourcePerInstance",
    "commands",
}


def _openpai(data: dict[str, Any], default_vc: str, where: _Where) -> JobSpec:
    version = data.get("protocolVersion")
    if str(version) != "2":
        raise where.error(
            "protocolVersion",
            data,
            f"must be 2 (OpenPAI job protocol v2), got {version!r}",
            "protocolVersion",
        )
    unknown = sorted(set(data) - OPENPAI_KEYS, key=str)
    if unknown:
        raise where.error(str(unknown[0]), data, "unknown key in an OpenPAI v2 job", unknown[0])
    name = _str(data, "name", where, "name", max_len=lim.MAX_JOB_NAME)
    if not name:
        raise where.error("name", data, "is required: give the job a name")
    extras = _mapping(data, "extras", where, "extras")
    hived = _mapping(extras, "hivedScheduler", where, "extras.hivedScheduler")
    hived_roles = _mapping(hived, "taskRoles", where, "extras.hivedScheduler.taskRoles")
    labhive = _mapping(extras, "labhive", where, "extras.labhive")
    labhive_roles = _mapping(labhive, "taskRoles", where, "extras.labhive.taskRoles")
    images = _images(data, where)
    raw_roles = _mapping(data, "taskRoles", where, "taskRoles")
    if not raw_roles:
        raise where.error("taskRoles", data, "is required: at least one task role", "taskRoles")
    roles = []
    first_image = None
    for role_name, raw in raw_roles.items():
        path = f"taskRoles.{role_name}"
        if not isinstance(raw, dict):
            raise where.error(path, raw_roles, "must be a mapping", role_name)
        if len(str(role_name)) > lim.MAX_ROLE_NAME:
            raise where.error(
                "taskRoles",
                raw_roles,
                f"role name {_show(str(role_name))} is {len(str(role_name))} characters long; "
                f"the limit is {lim.MAX_ROLE_NAME}",
                role_name,
            )
        unknown = sorted(set(raw) - ROLE_KEYS, key=str)
        if unknown:
            raise where.error(f"{path}.{unknown[0]}", raw, "unknown key in a task role", unknown[0])
        res = _mapping(raw, "resourcePerInstance", where, f"{path}.resourcePerInstance")
        rpath = f"{path}.resourcePerInstance"
        completion = _mapping(raw, "completion", where, f"{path}.completion")
        hived_role = _mapping(hived_roles, str(role_name), where, f"extras.hivedScheduler.{path}")
        labhive_role = _mapping(labhive_roles, str(role_name), where, f"extras.labhive.{path}")
        lpath = f"extras.labhive.{path}"
        cpu = float(_num(res, "cpu", where, f"{rpath}.cpu", minimum=0, whole=False, default=1))
        memory_mb = _num(
            res, "memoryMB", where, f"{rpath}.memoryMB", minimum=0, whole=True, default=1024
        )
        commands = raw.get("commands") or []
        if not isinstance(commands, list):
            raise where.error(f"{path}.commands", raw, "must be a list of strings", "commands")
        _check_commands(commands, raw, f"{path}.commands", where)
        image = raw.get("dockerImage")
        first_image = first_image or images.get(str(image), image)
        gpus, share = _gpus(res, "gpu", where, f"{rpath}.gpu", 0)
        roles.append(
            RoleSpec(
                str(role_name),
                instances=_num(
                    raw, "instances", where, f"{path}.instances", minimum=1, whole=True, default=1
                ),
                gpu=gpus,
                share_milli=share,
                cpu=cpu,
                memory_mb=memory_mb,
                cpu_limit=_limit(labhive_role, "cpuLimit", where, f"{lpath}.cpuLimit", cpu, "cpu"),
                memory_limit_mb=_limit(
                    labhive_role,
                    "memoryLimitMB",
                    where,
                    f"{lpath}.memoryLimitMB",
                    memory_mb,
                    "memoryMB",
                ),
                sku=_str(hived_role, "skuType", where, f"extras.hivedScheduler.{path}.skuType"),
                pinned_cell=_str(
                    hived_role, "pinnedCellId", where, f"extras.hivedScheduler.{path}.pinnedCellId"
                ),
                affinity_group=_str(
                    hived_role,
                    "affinityGroupName",
                    where,
                    f"extras.hivedScheduler.{path}.affinityGroupName",
                ),
                commands=tuple(str(c).strip() for c in commands),
                min_succeeded=_num(
                    completion,
                    "minSucceededInstances",
                    where,
                    f"{path}.completion.minSucceededInstances",
                    minimum=-1,
                    whole=True,
                    default=None,
                ),
                min_failed=_num(
                    completion,
                    "minFailedInstances",
                    where,
                    f"{path}.completion.minFailedInstances",
                    minimum=-1,
                    whole=True,
                    default=None,
                ),
            )
        )
    _check_task_total(roles, data, where)
    defaults = _mapping(data, "defaults", where, "defaults")
    spec = JobSpec(
        name=name,
        vc=_str(
            defaults,
            "virtualCluster",
            where,
            "defaults.virtualCluster",
            default_vc,
            max_len=lim.MAX_VC_NAME,
        ),
        priority=_priority(
            hived, "jobPriorityClass", where, "extras.hivedScheduler.jobPriorityClass", "test"
        ),
        roles=tuple(roles),
        gang=_flag(extras, "gangAllocation", where, "extras.gangAllocation", True),
        retries=_num(
            data, "jobRetryCount", where, "jobRetryCount", minimum=0, whole=True, default=0
        ),
        lazy_preemption=_flag(
            hived,
            "lazyPreemptionEnable",
            where,
            "extras.hivedScheduler.lazyPreemptionEnable",
            False,
        ),
        image=None if first_image is None else str(first_image),
        observe=_observe(extras, where, "extras.observe"),  # e.g. strace (local executor)
        time_limit=_time_limit(labhive, "timeLimit", where, "extras.labhive.timeLimit"),
        cwd=_cwd(labhive, "cwd", where, "extras.labhive.cwd"),
        raw=dict(data),
    )
    _check_share(spec, data, where, "taskRoles", "taskRoles")
    return spec


def _check_task_total(roles: list[RoleSpec], data: dict[str, Any], where: _Where) -> None:
    """One bound on a job's tasks, whatever its form: the scheduler's cost (and the store's
    rows) for a job must not grow without limit with what one user asks for."""
    total = sum(r.instances for r in roles)
    if total > lim.MAX_TASKS:
        raise where.error(
            "taskRoles",
            data,
            f"{total} tasks in all roles; a job may have at most {lim.MAX_TASKS} "
            "(split it into several jobs)",
            "taskRoles",
        )


def _images(data: dict[str, Any], where: _Where) -> dict[str, Any]:
    """dockerimage prerequisites by name: a role's ``dockerImage`` names one of them."""
    out = {}
    prerequisites = data.get("prerequisites") or []
    if not isinstance(prerequisites, list):
        raise where.error(
            "prerequisites", data, "must be a list of mappings (name, type, uri)", "prerequisites"
        )
    for item in prerequisites:
        if isinstance(item, dict) and item.get("type") == "dockerimage" and "name" in item:
            out[str(item["name"])] = item.get("uri")
    return out
