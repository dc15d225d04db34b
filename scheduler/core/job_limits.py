"""What a job spec may hold: the bounds every job form shares, and the text check.

A job the parser accepts must be one the store can hold and the executor can start, on every
backend: a value that only fails at the INSERT (or later, when the loop records a start) would
fail a whole batch of other users' submissions or wedge the scheduling pass. So the bounds here
are the store's column sizes (``service/store/tables.py``; a test keeps them in step) and
counts small enough that a rejected or waiting job never makes the scheduler's cost grow with
its size.
"""

from __future__ import annotations

import math
from typing import Any

#: Characters in a job name (``jobs.name``), a task role name (``tasks.role``) and a VC name
#: (``jobs.vc``): the store's column sizes, the same on SQLite and PostgreSQL.
MAX_JOB_NAME = 256
MAX_ROLE_NAME = 128
MAX_VC_NAME = 128
#: Tasks in one job, all roles together, in either form (short ``tasks``, OpenPAI ``instances``).
MAX_TASKS = 10_000
#: Per task: GPUs, CPUs and memory far above any node, yet finite and storable everywhere.
MAX_GPUS_PER_TASK = 10_000
MAX_CPU_PER_TASK = 100_000
MAX_MEMORY_MB = 1 << 40
MAX_RETRIES = 1000
#: Any other whole number in a spec (it is stored in a JSON column and read back by the loop).
MAX_WHOLE = 2**53


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as text on every backend, or None when it can."""
    if "\x00" in value:
        return "holds a NUL character (\\u0000); remove it"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "holds a lone UTF-16 surrogate (not valid Unicode); send valid UTF-8 text"
    return None


def number_problem(value: Any) -> str | None:
    """Why a number cannot be stored (NaN, an infinity), or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value!r}"
    return None


def find_unstorable(doc: Any) -> tuple[str, str] | None:
    """The first (path, problem) in ``doc`` (keys included) that no store can hold, or None.

    Walks with an explicit stack, so a deeply nested document cannot exhaust the recursion
    limit."""
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            problem = text_problem(value)
        elif isinstance(value, float):
            problem = number_problem(value)
        elif isinstance(value, dict):
            problem = None
            for key, item in value.items():
                where = f"{path}.{key}" if path else str(key)
                if isinstance(key, str) and (key_problem := text_problem(key)) is not None:
                    return (path or "(job)", f"a key {key_problem}")
                stack.append((where, item))
        elif isinstance(value, (list, tuple)):
            problem = None
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(value))
        else:
            problem = None
        if problem is not None:
            return (path or "(job)", problem)
    return None
