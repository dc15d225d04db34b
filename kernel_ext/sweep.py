"""Parameter sweeps: ``--sweep lr=0.1,0.01 --sweep bs=32,64`` is four jobs, one per point.

The product, the job names and the command template live in ``labhive.client`` (``sweep``)
so plain Python uses the same rules; this module adds what only magics need.

A point reaches the job in the way its command can read it: ``{lr}`` placeholders in a shell
command are replaced, and a Python cell body gets ``lr = 0.1`` assignments at its top (a shell
body gets ``lr=0.1`` variables), so the same training script runs unchanged at every point.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Sequence

from labhive.client import fill_command, sweep_name, sweep_points

Point = dict[str, str]
__all__ = [
    "fill_command",
    "parse_axes",
    "python_header",
    "shell_header",
    "sweep_name",
    "sweep_points",
]

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_axes(specs: Sequence[str]) -> dict[str, list[str]]:
    """``["lr=0.1,0.01", "bs=32"]`` -> ``{"lr": ["0.1", "0.01"], "bs": ["32"]}``."""
    axes: dict[str, list[str]] = {}
    for spec in specs:
        key, sep, values = spec.partition("=")
        key = key.strip()
        if not sep or not _KEY.match(key):
            raise ValueError(f"--sweep {spec!r}: write NAME=V1,V2,... (NAME an identifier)")
        if key in axes:
            raise ValueError(f"--sweep {key} is given twice; list all its values in one flag")
        items = [v.strip() for v in values.split(",") if v.strip()]
        if not items:
            raise ValueError(f"--sweep {spec!r}: give at least one value after '='")
        axes[key] = items
    return axes


def python_literal(value: str) -> str:
    """``0.1`` stays a number, ``adam`` becomes the string ``'adam'``."""
    try:
        ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return repr(value)
    return value


def python_header(point: Point) -> str:
    return "".join(f"{k} = {python_literal(v)}\n" for k, v in point.items())


def shell_header(point: Point) -> str:
    return "".join(f"{k}={shlex.quote(v)}\n" for k, v in point.items())
