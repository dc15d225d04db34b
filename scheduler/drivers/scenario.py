"""Scenario files: a cluster, timed events and expectations (DESIGN.md "Scenario files").

Loaded once into plain data with every mistake reported by line, so a replay never fails
half-way on a typo. Paths (the cluster, ``spec:`` job files, ``reconfigure`` clusters) are
relative to the scenario file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, TypeGuard

from labhive.scheduler.core.config import ClusterConfig, load_cluster_config, virtual_cluster
from labhive.scheduler.core.errors import UserError
from labhive.scheduler.core.jobs import (
    JobSpec,
    SpecError,
    load_job_file,
    parse_job,
    parse_priority,
)
from labhive.scheduler.core.states import JobState
from labhive.scheduler.core.yamlines import YamlSyntaxError, line_of, load_yaml

ACTIONS = ("submit", "finish", "fail", "cancel", "node_down", "node_up", "reconfigure")
EXPECT_KEYS = {
    "at",
    "job",
    "state",
    "reason",
    "nodes",
    "queue_position",
    "preempted",
    "downgraded",
}
STATES = frozenset(JobState)


class ScenarioError(UserError):
    """The scenario file is wrong; the message names the key and the line."""


@dataclass(frozen=True, slots=True)
class ScenarioEvent:
    at: float
    action: str
    target: str = ""  # a job name or a node name
    spec: JobSpec | None = None
    duration: float | None = None
    config: ClusterConfig | None = None
    reason: str = ""
    line: int | None = None

    def describe(self) -> str:
        if self.action == "submit" and self.spec is not None:
            return f"submit {self.spec.name}"
        if self.action == "reconfigure":
            return "reconfigure"
        return f"{self.action} {self.target}"


@dataclass(frozen=True, slots=True)
class Expectation:
    at: float
    job: str
    checks: dict[str, Any]
    line: int | None = None

    def describe(self) -> str:
        parts = ", ".join(f"{k}: {v}" for k, v in self.checks.items())
        where = f" (line {self.line})" if self.line else ""
        return f"at {self.at:g}, {self.job}: {parts}{where}"


@dataclass(frozen=True, slots=True)
class Scenario:
    cluster: ClusterConfig
    events: tuple[ScenarioEvent, ...]
    expects: tuple[Expectation, ...] = ()
    source: str = ""
    extras: dict[str, Any] = field(default_factory=dict)


def example_path(name: str) -> Path | None:
    """A scenario shipped with LabHive (``labhive replay demo``), if ``name`` names one."""
    base = resources.files("labhive.scheduler") / "examples"
    for candidate in (name, f"{name}.yaml"):
        path = Path(str(base / candidate))
        if path.is_file():
            return path
    return None


def load_scenario(source: str | Path | Mapping[str, Any]) -> Scenario:
    if isinstance(source, Mapping):
        return _parse(source, Path.cwd(), "")
    path = Path(source)
    if not path.exists() and example_path(str(source)) is not None:
        path = example_path(str(source)) or path
    from labhive.scheduler.core.yamlines import read_text

    try:
        text = read_text(path, "scenario")
    except UserError as err:
        raise ScenarioError(str(err)) from None
    try:
        data = load_yaml(text, origin=str(path))
    except YamlSyntaxError as err:
        raise ScenarioError(str(err)) from None
    return _parse(data, path.parent, str(path))


def _err(origin: str, line: int | None, key: str, problem: str) -> ScenarioError:
    where = f"{origin} line {line}" if line else origin
    return ScenarioError(f"{where + ': ' if where else ''}{key}: {problem}")


def _parse(data: Any, base: Path, origin: str) -> Scenario:
    if not isinstance(data, Mapping):
        raise _err(origin, line_of(data), "(top level)", "a scenario must be a mapping")
    for key in data:
        if key not in {"cluster", "events", "expect", "description"}:
            raise _err(
                origin,
                line_of(data, key),
                str(key),
                "unknown key; a scenario has cluster, events, expect (and description)",
            )
    cluster = _cluster(data.get("cluster"), base, origin, line_of(data, "cluster"))
    raw_events = data.get("events")
    if not isinstance(raw_events, list) or not raw_events:
        raise _err(origin, line_of(data, "events"), "events", "a non-empty list is required")
    events = [_event(e, i, raw_events, base, origin) for i, e in enumerate(raw_events)]
    names: set[str] = set()
    for event in events:
        if event.action == "submit" and event.spec is not None:
            if event.spec.name in names:
                raise _err(
                    origin, event.line, "submit", f"job name {event.spec.name} is used twice"
                )
            names.add(event.spec.name)
    nodes = {n.name for n in cluster.nodes()}
    for event in events:
        if event.action in ("node_down", "node_up") and event.target not in nodes:
            raise _err(
                origin,
                event.line,
                event.action,
                f"unknown node {event.target!r}; nodes: {', '.join(sorted(nodes))}",
            )
        if event.action in ("finish", "fail", "cancel") and event.target not in names:
            raise _err(origin, event.line, event.action, f"no job named {event.target!r}")
    raw_expect = data.get("expect") or []
    if not isinstance(raw_expect, list):
        raise _err(origin, line_of(data, "expect"), "expect", "must be a list")
    expects = [_expect(e, i, raw_expect, names, origin) for i, e in enumerate(raw_expect)]
    return Scenario(cluster, tuple(events), tuple(expects), origin)


def _cluster(value: Any, base: Path, origin: str, line: int | None) -> ClusterConfig:
    if value is None or value == "virtual":
        return virtual_cluster()
    if isinstance(value, Mapping):
        return load_cluster_config(value)
    if isinstance(value, str):
        path = base / value
        if not path.is_file():
            raise _err(origin, line, "cluster", f"no cluster config at {path}")
        return load_cluster_config(path)
    raise _err(origin, line, "cluster", "must be a path or an inline HiveD config")


def _event(raw: Any, i: int, items: list[Any], base: Path, origin: str) -> ScenarioEvent:
    line = items.line_of(i) if hasattr(items, "line_of") else None
    key = f"events[{i}]"
    if not isinstance(raw, Mapping):
        raise _err(origin, line, key, "must be a mapping such as {at: 0, submit: {...}}")
    at = raw.get("at")
    if not _is_time(at) or at < 0:
        raise _err(origin, line, f"{key}.at", f"must be a time in seconds >= 0, got {at!r}")
    actions = [a for a in ACTIONS if a in raw]
    extra = sorted(set(raw) - {"at", "reason", *ACTIONS}, key=str)
    if extra:
        raise _err(
            origin,
            line,
            f"{key}.{extra[0]}",
            f"unknown key; an event has at and one of {', '.join(ACTIONS)}",
        )
    if len(actions) != 1:
        raise _err(origin, line, key, f"needs exactly one of {', '.join(ACTIONS)}")
    action = actions[0]
    value = raw[action]
    if action == "submit":
        spec, duration = _submission(value, base, origin, line, key)
        return ScenarioEvent(float(at), action, spec.name, spec, duration, line=line)
    if action == "reconfigure":
        target = value.get("cluster") if isinstance(value, Mapping) else None
        if target is None:
            raise _err(origin, line, f"{key}.reconfigure", "needs {cluster: FILE or inline}")
        return ScenarioEvent(
            float(at), action, config=_cluster(target, base, origin, line), line=line
        )
    if not isinstance(value, (str, int, float)):
        raise _err(origin, line, f"{key}.{action}", "must name a job or a node")
    return ScenarioEvent(
        float(at), action, str(value), reason=str(raw.get("reason", "")), line=line
    )


def _submission(
    value: Any, base: Path, origin: str, line: int | None, key: str
) -> tuple[JobSpec, float | None]:
    try:
        return _parse_submission(value, base, origin, line, key)
    except SpecError as err:
        raise ScenarioError(str(err)) from None


def _parse_submission(
    value: Any, base: Path, origin: str, line: int | None, key: str
) -> tuple[JobSpec, float | None]:
    if not isinstance(value, Mapping):
        raise _err(origin, line, f"{key}.submit", "must be a mapping (short form or spec:)")
    if "spec" in value:
        extra = sorted(set(value) - {"spec", "duration", "name"}, key=str)
        if extra:
            raise _err(
                origin, line, f"{key}.submit.{extra[0]}", "beside spec: only duration and name"
            )
        duration = value.get("duration")
        if duration is not None and (
            isinstance(duration, bool) or not isinstance(duration, (int, float)) or duration < 0
        ):
            raise _err(origin, line, f"{key}.submit.duration", "must be seconds >= 0")
        spec_value = value["spec"]
        if isinstance(spec_value, str):
            if "\0" in spec_value:
                raise _err(origin, line, f"{key}.submit.spec", "a file name has no NUL character")
            spec = load_job_file(base / spec_value)
        else:
            spec = _parse_short(spec_value, origin)
        if value.get("name") is not None:  # several students submitting the same file
            spec = replace(spec, name=str(value["name"]))
        return spec, None if duration is None else float(duration)
    spec = _parse_short(value, origin)
    return spec, spec.duration


def _parse_short(value: Any, origin: str) -> JobSpec:
    """A job (short form or OpenPAI); a whole-number priority outside HiveD's range is kept,
    so that the replay shows that submission REJECTED (as the service refuses it) and goes
    on."""
    if not isinstance(value, Mapping):
        return parse_job(value, origin=origin)
    extras = value.get("extras")
    if not isinstance(extras, Mapping):
        extras = {}
    hived = extras.get("hivedScheduler")
    if isinstance(hived, Mapping) and "jobPriorityClass" in hived:
        priority = hived["jobPriorityClass"]
        rest = {**value, "extras": {**extras, "hivedScheduler": {**hived}}}
        del rest["extras"]["hivedScheduler"]["jobPriorityClass"]
    else:
        priority = value.get("priority")
        rest = {k: v for k, v in value.items() if k != "priority"}
    if isinstance(priority, int) and not isinstance(priority, bool):
        try:
            parse_priority(priority)
        except ValueError:
            return replace(parse_job(rest, origin=origin), priority=priority)
    return parse_job(value, origin=origin)


def _expect(raw: Any, i: int, items: list[Any], names: set[str], origin: str) -> Expectation:
    line = items.line_of(i) if hasattr(items, "line_of") else None
    key = f"expect[{i}]"
    if not isinstance(raw, Mapping):
        raise _err(origin, line, key, "must be a mapping such as {at: 10, job: a, state: ...}")
    extra = sorted(set(raw) - EXPECT_KEYS, key=str)
    if extra:
        raise _err(
            origin, line, f"{key}.{extra[0]}", f"unknown key; use {', '.join(sorted(EXPECT_KEYS))}"
        )
    at, job = raw.get("at"), raw.get("job")
    if not _is_time(at):
        raise _err(origin, line, f"{key}.at", "a time in seconds is required")
    if not isinstance(job, str) or job not in names:
        raise _err(origin, line, f"{key}.job", f"no job named {job!r} is submitted")
    checks = {k: v for k, v in raw.items() if k not in ("at", "job")}
    if not isinstance(checks.get("state", ""), str):  # a list or mapping is no state either
        raise _err(origin, line, f"{key}.state", f"must be one of {', '.join(sorted(STATES))}")
    if "state" in checks and checks["state"] not in STATES:
        raise _err(origin, line, f"{key}.state", f"must be one of {', '.join(sorted(STATES))}")
    for flag in ("preempted", "downgraded"):
        if flag in checks and not isinstance(checks[flag], bool):
            raise _err(origin, line, f"{key}.{flag}", "must be true or false")
    if "nodes" in checks and not isinstance(checks["nodes"], list):
        raise _err(origin, line, f"{key}.nodes", "must be a list of node names")
    return Expectation(float(at), str(job), checks, line)


def _is_time(value: Any) -> TypeGuard[int | float]:
    """A finite number of seconds (YAML's .inf and .nan are numbers too, but not times)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
