"""Readers every section of the cluster config shares: required keys, unknown keys, whole
numbers, memory quantities, and the context that puts FILE line N: key into each error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from labhive.scheduler.core.config_model import ConfigError
from labhive.scheduler.core.yamlines import line_of

_QUANTITY = re.compile(r"^\s*([0-9.]+)\s*([KMGTPE]i?|[kmgtpe])?\s*$")
_UNIT = {
    "": 1,
    "k": 1e3,
    "K": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


class _Ctx:
    """Where we are, so every error can say FILE line N: key.path: problem."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def error(self, key: str, line: int | None, problem: str) -> ConfigError:
        where = self.origin
        if line is not None:
            where = f"{where} line {line}" if where else f"line {line}"
        prefix = f"{where}: " if where else ""
        return ConfigError(f"{prefix}{key}: {problem}")


def _need(data: Mapping[str, Any], key: str, parent: str, ctx: _Ctx, kind: type) -> Any:
    path = f"{parent}.{key}" if parent else key
    if key not in data or data[key] is None:
        raise ctx.error(path, line_of(data), "is required")
    value = data[key]
    if not isinstance(value, kind):
        want = "a mapping" if kind is Mapping else "a list"
        raise ctx.error(path, line_of(data, key), f"must be {want}")
    return value


def _no_unknown(data: Mapping[str, Any], allowed: set[str], path: str, ctx: _Ctx) -> None:
    for key in data:
        if key not in allowed:
            raise ctx.error(
                f"{path}.{key}",
                line_of(data, key),
                f"unknown key; allowed here: {', '.join(sorted(allowed))}",
            )


def _int(value: Any, path: str, line: int | None, ctx: _Ctx, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ctx.error(path, line, f"must be a whole number >= {minimum}, got {value!r}")
    return value


def memory_mb(value: Any) -> int | None:
    """A Kubernetes quantity ('4096Mi', '8G', 1024) in MiB; None when it is not one.

    A bare number is taken as MiB, as OpenPAI's ``memoryMB`` and most configs mean it.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value) if value >= 0 else None
    match = _QUANTITY.match(str(value))
    if not match:
        return None
    number, unit = float(match.group(1)), match.group(2) or ""
    if not unit:
        return int(number)
    return math.ceil(number * _UNIT[unit] / 2**20)
