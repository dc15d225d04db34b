"""Frozen dataclass objects built once per job without their ``__init__``: the one place that
sets the fields of a frozen object and then gives it its class.

Why: a frozen dataclass's ``__init__`` sets each field through a C call to
``object.__setattr__`` (a 14-field ``JobSpec`` cost 1.3 us so, 0.25 this way), and the drivers
build a ``Submit``, a ``Finish`` and, for a trace, a ``JobSpec`` per job. The trick: a plain
class with the same slots takes plain attribute stores; once every field is set, the object's
``__class__`` becomes the frozen class (the layouts are the same, checked at import), and it is
the very object ``cls(...)`` makes, frozen from then on.

The builder is generated from the dataclass's own fields, so no caller lists them by hand: a
field added to the dataclass is a parameter of the builder (with its default), never a slot
left unset. This lives with the drivers' builders, not in ``model.py``: the contract declares
events; how a driver makes them cheaply is the driver's business.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from typing import Any

#: Defaults built fresh for each object, written as literals in the builder (no call a job).
_FACTORY_LITERALS: dict[Any, str] = {dict: "{}", list: "[]"}


def _slots_twin(cls: type) -> type[Any]:
    """A plain class with the slots of the frozen dataclass ``cls`` (a TypeError at import if
    its objects cannot become ``cls``'s)."""
    bases = getattr(cls, "__orig_bases__", cls.__bases__)  # (``Generic[JobId]``: the same base)
    slots = {"__slots__": getattr(cls, "__slots__")}  # noqa: B009 (a dataclass's, unknown to mypy)
    twin: type[Any] = types.new_class(
        f"Unfrozen{cls.__name__}", bases, {}, lambda ns: ns.update(slots)
    )
    probe = twin()
    probe.__class__ = cls  # a TypeError here, at import, if the layouts ever differ
    return twin


def frozen_builder(cls: type, **fixed: Any) -> Callable[..., Any]:
    """A function that builds ``cls(...)``, the same frozen object, for one slotted frozen
    dataclass: its parameters are ``cls``'s fields in order, with their defaults, less those
    in ``fixed``, which every object gets (immutable values only: they are shared).

    A field with a ``default_factory`` gets a fresh value per object (``dict``/``list`` as a
    literal). ``__post_init__`` is not run: a class that has one is refused."""
    if not dataclasses.is_dataclass(cls) or not getattr(cls, "__slots__", None):
        raise TypeError(f"{cls.__name__} is not a slotted dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__, which the builder would skip")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(fixed) - names
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
    env: dict[str, Any] = {"_Twin": _slots_twin(cls), "_cls": cls, "_MISSING": dataclasses.MISSING}
    params, body = [], ["o = _Twin()"]
    for f in dataclasses.fields(cls):
        if f.name in fixed:
            env[f"_fixed_{f.name}"] = fixed[f.name]
            value = f"_fixed_{f.name}"
        elif f.default_factory is not dataclasses.MISSING:
            value = _FACTORY_LITERALS.get(f.default_factory, "")
            if not value:
                env[f"_factory_{f.name}"] = f.default_factory
                value = f"_factory_{f.name}()"
        else:
            value = f.name
            if f.default is dataclasses.MISSING:
                params.append(f.name)
            else:
                env[f"_default_{f.name}"] = f.default
                params.append(f"{f.name}=_default_{f.name}")
        body.append(f"o.{f.name} = {value}")
    body += ["o.__class__ = _cls", "return o"]
    source = f"def build({', '.join(params)}):\n" + "".join(f"    {line}\n" for line in body)
    exec(source, env)
    build: Callable[..., Any] = env["build"]
    build.__name__ = build.__qualname__ = f"build_{cls.__name__}"
    build.__doc__ = f"``{cls.__name__}(...)``, built by ``frozen_builder``:\n{source}"
    return build
