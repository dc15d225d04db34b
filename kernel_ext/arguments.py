"""Turning a magic's line into flags and a command, the way a shell user expects.

IPython's own expansion fails as a whole when one ``{name}`` is unknown, which would break a
sweep's placeholders (``{lr}``) and shell variables (``$HOME``); so each placeholder here is
expanded on its own and left as typed when it cannot be.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import parse_argstring

from labhive.scheduler.core.jobs import (
    MAX_GUARANTEED,
    MIN_GUARANTEED,
    OPPORTUNISTIC,
    PRIORITY_CLASSES,
)

_SEPARATOR = re.compile(r"(?:^|\s)--(?:\s+|$)")
_BRACES = re.compile(r"\{\{|\}\}|\{([^{}]+)\}")
_DOLLAR = re.compile(r"\$\$|\$([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)")


def split_command(line: str) -> tuple[str, str]:
    """Split ``FLAGS -- COMMAND`` at the first lone ``--``; the command keeps its quoting."""
    match = _SEPARATOR.search(line)
    if match is None:
        return line.strip(), ""
    return line[: match.start()].strip(), line[match.end() :].strip()


def expand_vars(text: str, namespace: Mapping[str, Any], keep: frozenset[str] = frozenset()) -> str:
    """Expand ``{expr}`` and ``$name`` from the user's namespace, one placeholder at a time.

    Names in ``keep`` (a sweep's keys) stay as typed; so does anything that does not evaluate,
    such as ``$HOME`` when no Python variable of that name exists. ``{{``, ``}}`` and ``$$``
    give literal characters, as in IPython.
    """

    def braces(match: re.Match[str]) -> str:
        expr = match.group(1)
        if expr is None:
            return match.group(0)[0]
        if expr.strip() in keep:
            return match.group(0)
        try:
            return str(eval(expr, {}, dict(namespace)))
        except Exception:
            return match.group(0)

    def dollar(match: re.Match[str]) -> str:
        dotted = match.group(1)
        if dotted is None:
            return "$"
        head, *rest = dotted.split(".")
        if head in keep or head not in namespace:
            return match.group(0)
        value = namespace[head]
        try:
            for attr in rest:
                value = getattr(value, attr)
        except AttributeError:
            return match.group(0)
        return str(value)

    return _DOLLAR.sub(dollar, _BRACES.sub(braces, text))


def priority(text: str) -> str | int:
    """argparse type: a priority class name or a number OpenPAI accepts."""
    if text in PRIORITY_CLASSES:
        return text
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is not None and (value == OPPORTUNISTIC or MIN_GUARANTEED <= value <= MAX_GUARANTEED):
        return value
    names = "|".join(PRIORITY_CLASSES)
    raise ValueError(f"use {names}, a number {MIN_GUARANTEED}..{MAX_GUARANTEED}, or -1")


def parse(magic: Any, flags: str) -> Any:
    """Parse a magic's flags; a mistake becomes a ``UsageError`` that carries the usage line."""
    try:
        return parse_argstring(magic, flags)
    except UsageError as err:
        name = f"%{magic.parser.prog}"
        usage = "usage: " + " ".join(magic.parser.format_usage().split()[1:])
        raise UsageError(f"{name}: {err}\n{usage}\n(see {name}? for the full help)") from None
    except ValueError as err:  # unbalanced quotes in the line
        raise UsageError(f"%{magic.parser.prog}: {err}") from None


def join_words(words: list[str]) -> str:
    """A command given without ``--``, put back together so the shell sees the same words."""
    return shlex.join(words)
