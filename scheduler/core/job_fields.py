"""Readers of a job spec's values, shared by the short form and OpenPAI's protocol: numbers
with bounds, strings, flags, priorities, GPU amounts, limits, cwd, durations; each error says
the key and the line (``_Where``).
"""

from __future__ import annotations

from typing import Any

from labhive.scheduler.core import gpu_share
from labhive.scheduler.core import job_limits as lim
from labhive.scheduler.core.job_spec import OBSERVATIONS, JobSpec, SpecError, parse_priority
from labhive.scheduler.core.time_limits import parse_time_limit
from labhive.scheduler.core.yamlines import line_of


class _Where:
    def __init__(self, origin: str) -> None:
        self.origin = origin

    def error(self, key: str, container: Any, problem: str, item: Any = None) -> SpecError:
        line = line_of(container, item) if item is not None else line_of(container)
        where = self.origin
        if line is not None:
            where = f"{where} line {line}" if where else f"line {line}"
        return SpecError(f"{where + ': ' if where else ''}{key}: {problem}")


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
