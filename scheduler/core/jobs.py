"""The job model every driver shares.

A job is parsed once, from the short form or an OpenPAI v2 file, into a frozen ``JobSpec``; the
scheduling core, the simulator and the service all read that one shape, so a job behaves the same
in a scenario replay, a trace simulation and a live cluster.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from labhive.scheduler.core import job_limits as lim
from labhive.scheduler.core.job_fields import _Where
from labhive.scheduler.core.job_openpai import OPENPAI_KEYS, ROLE_KEYS, _openpai
from labhive.scheduler.core.job_short import SHORT_KEYS, SHORT_ROLE, _short
from labhive.scheduler.core.job_spec import (
    MAX_GUARANTEED,
    MIN_GUARANTEED,
    OBSERVATIONS,
    OPPORTUNISTIC,
    PRIORITY_CLASSES,
    GuaranteeAndLimit,
    JobSpec,
    RoleSpec,
    SpecError,
    parse_priority,
)
from labhive.scheduler.core.time_limits import show_duration
from labhive.scheduler.core.yamlines import YamlSyntaxError, load_yaml

if TYPE_CHECKING:
    from labhive.scheduler.core.config import VCSpec

# The names other modules import from here, wherever they are defined now: the model in
# job_spec.py, the readers in job_fields.py, job_short.py and job_openpai.py.
__all__ = [
    "MAX_GUARANTEED",
    "MIN_GUARANTEED",
    "OBSERVATIONS",
    "OPENPAI_KEYS",
    "OPPORTUNISTIC",
    "PRIORITY_CLASSES",
    "ROLE_KEYS",
    "SHORT_KEYS",
    "SHORT_ROLE",
    "GuaranteeAndLimit",
    "JobSpec",
    "RoleSpec",
    "SpecError",
    "load_job_file",
    "parse_job",
    "parse_priority",
    "with_vc_limits",
]


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
