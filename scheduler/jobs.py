"""The job model every driver shares.

A job is parsed once, from the short form or an OpenPAI v2 file, into a frozen ``JobSpec``; the
scheduling core, the simulator and the service all read that one shape, so a job behaves the same
in a scenario replay, a trace simulation and a live cluster.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labhive.scheduler import gpu_share
from labhive.scheduler import job_limits as lim
from labhive.scheduler.errors import UserError
from labhive.scheduler.time_limits import parse_time_limit, show_duration
from labhive.scheduler.yamlines import YamlSyntaxError, line_of, load_yaml

if TYPE_CHECKING:
    from labhive.scheduler.config import VCSpec

#: OpenPAI's priority classes (HiveD's ``jobPriorityClass``) and their numeric values.
PRIORITY_CLASSES: dict[str, int] = {"crit": 120, "prod": 100, "test": 10, "oppo": -1}
#: Opportunistic: may use any VC's idle cells, is never guaranteed, never preempts.
OPPORTUNISTIC = -1
#: Guaranteed priorities lie in this closed range.
MIN_GUARANTEED, MAX_GUARANTEED = 0, 1000
#: What a task may run under (``observe``; OpenPAI: ``extras.observe``). Checked here, at
#: intake: the executors launch only these (``executors/local.py::_argv``), and a job that
#: names anything else was accepted, then failed at launch with exit 127.
OBSERVATIONS = ("strace",)


class GuaranteeAndLimit:
    """What a task is guaranteed (``cpu``/``memory_mb``: what placement counts) and what it may
    use (``cpu_limit``/``memory_limit_mb``: what the executor enforces; None: the guarantee),
    for a role of a job and for one task's launch alike."""

    __slots__ = ()
    cpu: float
    memory_mb: int
    cpu_limit: float | None
    memory_limit_mb: int | None

    @property
    def cpu_max(self) -> float:
        """The CPUs a task may use (its cgroup's quota): the limit, else the guarantee."""
        return self.cpu if self.cpu_limit is None else self.cpu_limit

    @property
    def memory_max_mb(self) -> int:
        """The memory a task may use before the OOM killer: the limit, else the guarantee."""
        return self.memory_mb if self.memory_limit_mb is None else self.memory_limit_mb


@dataclass(frozen=True, slots=True)
class RoleSpec(GuaranteeAndLimit):
    """One task role: ``instances`` identical tasks, each needing these resources."""

    name: str
    instances: int = 1
    gpu: int = 1
    cpu: float = 1.0
    memory_mb: int = 1024
    sku: str | None = None
    commands: tuple[str, ...] = ()
    min_succeeded: int | None = None
    min_failed: int | None = None
    pinned_cell: str | None = None  # HiveD's pinnedCellId: run only in this pinned cell
    affinity_group: str | None = None  # OpenPAI's affinityGroupName: placed whole, apart
    #: What the executor enforces (cgroup quota, memory limit), at least the guarantee
    #: (``cpu``/``memory_mb``, what placement counts); None: the guarantee. A notebook server
    #: idles on 0.1 CPU guaranteed and bursts to its limit (zero-to-jupyterhub's guarantee/limit).
    cpu_limit: float | None = None
    memory_limit_mb: int | None = None
    #: A share of one GPU in thousandths (``gpu_share``: 500, 250 or 125, with ``gpu`` 1); 0:
    #: ``gpu`` whole GPUs. Placement gives the task the GPU; shares of one GPU sum to <= 1000.
    share_milli: int = 0


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job as the scheduler sees it, whatever form it was submitted in."""

    name: str
    vc: str
    priority: int
    roles: tuple[RoleSpec, ...]
    gang: bool = True
    retries: int = 0
    duration: float | None = None
    lazy_preemption: bool = False
    user: str | None = None
    image: str | None = None
    observe: str | None = None
    #: The most seconds one attempt may run (``time_limit``; ``extras.labhive.timeLimit``).
    time_limit: float | None = None
    #: Where its tasks run (an absolute path the user can read, entered as the user); None:
    #: a fresh per-task work dir (what an older client, or a job file without one, gets).
    cwd: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def opportunistic(self) -> bool:
        return self.priority == OPPORTUNISTIC

    @property
    def task_count(self) -> int:
        return sum(r.instances for r in self.roles)

    @property
    def total_gpus(self) -> int:
        return sum(r.instances * r.gpu for r in self.roles)

    @property
    def share_milli(self) -> int:
        """The GPU share of its one task in thousandths (``gpu_share``); 0: whole GPUs."""
        return self.roles[0].share_milli if len(self.roles) == 1 else 0

    @property
    def gpu_amount(self) -> float:
        """What its tasks hold of GPUs, a share counted as its fraction (accounting, views)."""
        share = self.share_milli
        return share / 1000 if share else float(self.total_gpus)


# ---- parsing: the short form and OpenPAI's job protocol v2 ----------------------------------


class SpecError(UserError):
    """A job spec that cannot be read; the message names the key (and the line)."""


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
#: The role name a short-form job's tasks get.
SHORT_ROLE = "main"


class _Where:
    def __init__(self, origin: str) -> None:
        self.origin = origin

    def error(self, key: str, container: Any, problem: str, item: Any = None) -> SpecError:
        line = line_of(container, item) if item is not None else line_of(container)
        where = self.origin
        if line is not None:
            where = f"{where} line {line}" if where else f"line {line}"
        return SpecError(f"{where + ': ' if where else ''}{key}: {problem}")


def parse_priority(value: Any) -> int:
    """``crit``/``prod``/``test``/``oppo`` or a number: 0..1000 guaranteed, -1 opportunistic."""
    if isinstance(value, str) and value.strip().lower() in PRIORITY_CLASSES:
        return PRIORITY_CLASSES[value.strip().lower()]
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
        number = int(value)
    if number is not None and (
        number == OPPORTUNISTIC or MIN_GUARANTEED <= number <= MAX_GUARANTEED
    ):
        return number
    raise ValueError(
        f"unknown priority {value!r}; use crit, prod, test, oppo, a number 0..1000 "
        "(guaranteed) or -1 (opportunistic)"
    )


def parse_job(data: object, *, default_vc: str = "default", origin: str = "") -> JobSpec:
    """A ``JobSpec`` from the short form or an OpenPAI v2 job (told apart by protocolVersion);
    ``data`` is whatever a file or a request held, so anything that is no mapping is refused."""
    where = _Where(origin)
    if not isinstance(data, dict):
        raise where.error("(job)", data, "a job spec must be a mapping")
    unstorable = lim.find_unstorable(data)
    if unstorable is not None:
        raise where.error(unstorable[0], data, unstorable[1])
    if "protocolVersion" in data or "taskRoles" in data:
        return _openpai(data, default_vc, where)
    return _short(data, default_vc, where)


def load_job_file(path: str | Path, *, default_vc: str = "default") -> JobSpec:
    """A job from a YAML or JSON file, with line numbers in every error."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise SpecError(f"cannot read job file {path}: {err.strerror}") from None
    try:
        data = load_yaml(text, origin=str(path))
    except YamlSyntaxError as err:
        raise SpecError(str(err)) from None
    return parse_job(data, default_vc=default_vc, origin=str(path))


def _num(
    data: Any, key: str, where: _Where, path: str, *, minimum: float, whole: bool, default: Any
) -> Any:
    """A number from ``minimum`` to the key's bound (``_MAXIMA``); null only where the key is
    optional (no default)."""
    maximum = _MAXIMA.get(key, lim.MAX_WHOLE)
    value = data.get(key, default) if isinstance(data, dict) else default
    kind = "a whole number" if whole else "a number"
    if value is None:
        if default is None:
            return None
        shown = f"null (leave it out for {default!r})"
    else:
        ok = isinstance(value, int) if whole else isinstance(value, (int, float))
        if not isinstance(value, bool) and ok and minimum <= value <= maximum:
            return value
        shown = _show(value)
    raise where.error(
        path,
        data,
        f"must be {kind} >= {_bound(minimum)}, got {shown}; at most {_bound(maximum)}",
        key,
    )


#: Upper bounds by key, shared by both job forms (``job_limits`` says why each one).
_MAXIMA: dict[str, float] = {
    "tasks": lim.MAX_TASKS,
    "instances": lim.MAX_TASKS,
    "gpus": lim.MAX_GPUS_PER_TASK,
    "gpu": lim.MAX_GPUS_PER_TASK,
    "cpu": lim.MAX_CPU_PER_TASK,
    "cpu_limit": lim.MAX_CPU_PER_TASK,
    "cpuLimit": lim.MAX_CPU_PER_TASK,
    "memory_mb": lim.MAX_MEMORY_MB,
    "memoryMB": lim.MAX_MEMORY_MB,
    "memory_limit_mb": lim.MAX_MEMORY_MB,
    "memoryLimitMB": lim.MAX_MEMORY_MB,
    "retries": lim.MAX_RETRIES,
    "jobRetryCount": lim.MAX_RETRIES,
}


def _bound(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _show(value: Any) -> str:
    """A value for an error message: its repr, cut short (a message must not echo a megabyte)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _str(
    data: dict[str, Any],
    key: str,
    where: _Where,
    path: str,
    default: Any = None,
    max_len: int | None = None,
) -> Any:
    value = data.get(key)
    if value is None:  # null means "not given": the default
        value = default
    if value is not None and not isinstance(value, (str, int)):
        raise where.error(path, data, f"must be a string, got {_show(value)}", key)
    text = None if value is None else str(value)
    if text is not None and max_len is not None and len(text) > max_len:
        raise where.error(
            path, data, f"is {len(text)} characters long; the limit is {max_len}", key
        )
    return text


def _observe(data: dict[str, Any], where: _Where, path: str) -> str | None:
    """One of ``OBSERVATIONS`` or None: a choice, not a free string (it picks what runs)."""
    value: str | None = _str(data, "observe", where, path)
    if value is not None and value not in OBSERVATIONS:
        raise where.error(
            path,
            data,
            f"unknown observation {_show(value)}; the choices are "
            f"{', '.join(OBSERVATIONS)} (or leave it out to run the task as it is)",
            "observe",
        )
    return value


def _priority(data: dict[str, Any], key: str, where: _Where, path: str, default: Any) -> int:
    try:
        return parse_priority(data.get(key, default))
    except ValueError as err:
        raise where.error(path, data, str(err), key) from None


def _flag(data: dict[str, Any], key: str, where: _Where, path: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise where.error(path, data, f"must be true or false, got {value!r}", key)
    return value


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


def _gpus(
    data: dict[str, Any], key: str, where: _Where, path: str, default: int
) -> tuple[int, int]:
    """``(gpus, share_milli)``: a whole number as before, or a share of one GPU
    (``gpu_share.parse_gpus``: 0.5, 0.25, 0.125)."""
    value = data.get(key, default)
    if isinstance(value, int) or value is None:  # whole GPUs: bounds and messages as before
        return _num(data, key, where, path, minimum=0, whole=True, default=default), 0
    try:
        gpus, share = gpu_share.parse_gpus(value)
    except gpu_share.ShareError as err:
        text = str(err)
        if text.startswith("got "):  # no number at all
            text = (
                f"must be a whole number >= 0 or a share {gpu_share.SHARES_SHOWN}, {text}; "
                f"at most {_bound(_MAXIMA[key])}"
            )
        raise where.error(path, data, text, key) from None
    if not share:  # "2", 2.0: refused as before (a whole count is a whole number)
        return _num(data, key, where, path, minimum=0, whole=True, default=default), 0
    return gpus, share


def _check_share(spec: JobSpec, data: Any, where: _Where, path: str, key: str) -> None:
    """A share is for one task that needs less than a GPU, and its GPU's other sharers run at
    the same priority: a share that would need more is refused, saying what works."""
    shared = [r for r in spec.roles if r.share_milli]
    if not shared:
        return
    if len(spec.roles) > 1 or spec.task_count > 1:
        raise where.error(
            path,
            data,
            f"a GPU share is for a single task; this job has {spec.task_count} tasks. Ask for "
            "whole GPUs per task, or submit each task as a job of its own",
            key,
        )
    if spec.lazy_preemption:
        raise where.error(
            path,
            data,
            "a GPU share cannot use lazy preemption (a shared GPU's sharers all run at one "
            "priority); leave lazy preemption out or ask for whole GPUs",
            key,
        )


def _limit(
    data: dict[str, Any], key: str, where: _Where, path: str, guarantee: float, of: str
) -> Any:
    """A limit (``cpu_limit``, ``memory_limit_mb``) or None; never below its guarantee: the
    cgroup would then enforce less than placement promised the task."""
    whole = "memory" in key.lower()
    value = _num(data, key, where, path, minimum=0, whole=whole, default=None)
    if value is None:
        return None
    if value < guarantee:
        raise where.error(
            path,
            data,
            f"{_bound(value)} is below the guarantee {of} = {_bound(guarantee)}; a limit must be "
            f"at least the guarantee (leave it out to enforce the guarantee itself)",
            key,
        )
    return value if whole else float(value)


#: The longest working directory a job may name (Linux's PATH_MAX).
MAX_CWD = 4096


def _cwd(data: dict[str, Any], key: str, where: _Where, path: str) -> str | None:
    """An absolute directory path, or None (the task's fresh work dir). Whether the user may
    read it is checked where the task starts, as the user (``supervise.py``), not here."""
    text = _str(data, key, where, path, max_len=MAX_CWD)
    if text is None or text == "":
        return None
    if not text.startswith("/"):
        raise where.error(
            path, data, f"must be an absolute path, got {_show(text)} (e.g. /home/ada/lab3)", key
        )
    return str(text)


def _check_commands(items: Any, data: dict[str, Any], path: str, where: _Where) -> None:
    """Command lines are strings (a number is taken as its text); a null or a mapping is a
    mistake that would otherwise run as the shell command ``None``."""
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            key = "command" if path == "command" else "commands"
            raise where.error(path, data, f"must hold strings, got {_show(item)}", key)


def _duration(data: dict[str, Any], where: _Where) -> float | None:
    value = _num(data, "duration", where, "duration", minimum=0, whole=False, default=None)
    return None if value is None else float(value)


def _time_limit(data: dict[str, Any], key: str, where: _Where, path: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    try:
        return parse_time_limit(value)
    except ValueError as err:
        raise where.error(path, data, str(err), key) from None


def _mapping(data: dict[str, Any], key: str, where: _Where, path: str) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise where.error(path, data, "must be a mapping", key)
    return value


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


def with_vc_limits(spec: JobSpec, vc: VCSpec | None, *, strict: bool) -> JobSpec:
    """``spec`` (a JobSpec) under its VC's (a VCSpec) ``timeLimit``: the default when it
    declares none; over the maximum, a ValueError saying what to ask for (``strict``, at
    intake) or the maximum (a stored job, after an admin lowered it)."""
    if vc is None:
        return spec
    limit = spec.time_limit if spec.time_limit is not None else vc.time_limit_default
    most = vc.time_limit_max
    if most is not None and limit is not None and limit > most:
        if strict:
            raise ValueError(
                f"time_limit: {show_duration(limit)} is over the {show_duration(most)} maximum "
                f"of VC {vc.name}; ask for at most {show_duration(most)}"
            )
        limit = most
    if limit is None and most is not None:
        limit = most  # no default: a job that declares nothing runs up to the maximum
    return spec if limit == spec.time_limit else dataclasses.replace(spec, time_limit=limit)
