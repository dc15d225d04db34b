"""The model's events and decisions as a stable JSON form, and back.

A value is encoded by its own dataclass (``scheduler/core/model.py``, ``scheduler/core/jobs.py``):
an object ``{"@": ClassName, field: value, ...}`` with the fields that differ from their defaults
(compact: a ``Tick`` is ``{"@":"Tick","time":...}``), tuples as JSON lists. Decoding accepts only
the classes listed here (the journal is data, never code to run) and turns every JSON list
back into a tuple (the model holds tuples only). ``JobSpec.raw`` (the document as submitted,
left out of a spec's equality) is not recorded: the policy decides on the typed fields.

``VERSION`` is written with every pass; a reader refuses a version it does not know.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from labhive.scheduler.core.jobs import JobSpec, RoleSpec
from labhive.scheduler.core.model import (
    Adopt,
    Cancel,
    Downgrade,
    Finish,
    NodeDown,
    NodeUp,
    Preempt,
    Requeue,
    Start,
    Stop,
    StopTasks,
    Submit,
    TaskPlacement,
    TasksEnded,
    Tick,
)

VERSION = 1

_CLASSES: dict[str, type[Any]] = {
    c.__name__: c
    for c in (
        Submit, Finish, Requeue, Cancel, NodeDown, NodeUp, Tick, Adopt, TasksEnded,
        Start, Preempt, Downgrade, StopTasks, Stop, TaskPlacement, JobSpec, RoleSpec,
    )
}  # fmt: skip
_SKIPPED = {(JobSpec, "raw")}


class JournalFormatError(ValueError):
    """A journal entry this version cannot read."""


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


#: Each class's recorded fields and their defaults, worked out once (encoding runs in the pass).
_FIELDS: dict[type[Any], tuple[tuple[str, Any], ...]] = {
    cls: tuple(
        (f.name, _default(f)) for f in dataclasses.fields(cls) if (cls, f.name) not in _SKIPPED
    )
    for cls in _CLASSES.values()
}
_SCALARS = (str, int, float, bool, type(None))


def to_plain(value: Any) -> Any:
    """``value`` as JSON-ready data."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, tuple | list):
        return [to_plain(v) for v in value]
    fields = _FIELDS.get(type(value))
    if fields is None:
        raise JournalFormatError(f"the journal cannot record a {type(value).__name__}")
    out: dict[str, Any] = {"@": type(value).__name__}
    for name, default in fields:
        v = getattr(value, name)
        if v is not default and v != default:
            out[name] = to_plain(v)
    return out


def from_plain(data: Any) -> Any:
    """The value ``to_plain`` made."""
    if isinstance(data, list):
        return tuple(from_plain(v) for v in data)
    if isinstance(data, dict):
        name = data.get("@")
        cls = _CLASSES.get(name) if isinstance(name, str) else None
        if cls is None:
            raise JournalFormatError(f"unknown record type {name!r} in the journal")
        fields = {k: from_plain(v) for k, v in data.items() if k != "@"}
        try:
            return cls(**fields)
        except TypeError as err:
            raise JournalFormatError(f"a {name} the journal cannot rebuild: {err}") from None
    return data


def dumps(value: Any) -> str:
    return json.dumps(to_plain(value), separators=(",", ":"), allow_nan=False)


def loads(text: str) -> Any:
    return from_plain(json.loads(text))
