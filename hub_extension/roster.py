"""A class list for ``labhive up --roster course.yaml``: who logs in, with which password, and
which VCs they may use.

```yaml
default_vc: default          # optional: the first VC of the cluster config otherwise
students:
  alice: {password: "correct-horse-1", groups: [vc1-users]}
  bob: {vcs: [vc1]}          # a password is generated
  carol:                     # generated password, the default VC
```

VCs reach students through hub groups, as everywhere in LabHive (the service's grants turn a
user's groups into VCs): a student given ``vcs`` or nothing is put in a group named for each VC,
and ``course_grants`` adds ``VC: {vcs: [VC]}`` to the grants the service reads where the grants
file has no such group. ``groups`` name groups the grants file already has. Generated passwords
are kept in a 0600 file for the instructor, so every start gives each student the same one.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from labhive.hub_extension.hubconfig import MIN_PASSWORD
from labhive.hub_extension.hubusers import generated_password
from labhive.scheduler.core.errors import UserError

#: JupyterHub's names as the native authenticator normalizes them (lower case), and no name
#: the platform's own accounts use.
NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
RESERVED = {"admin", "root", "labhive"}


@dataclass(frozen=True)
class Student:
    name: str
    password: str | None
    groups: tuple[str, ...]
    vcs: tuple[str, ...]


@dataclass(frozen=True)
class Roster:
    students: tuple[Student, ...]
    default_vc: str | None
    source: str


@dataclass(frozen=True)
class Course:
    """A roster applied to a cluster: hub groups and their members, the VC groups the grants
    need, each student's initial password, and those of them that were generated."""

    groups: dict[str, list[str]]
    vc_groups: list[str]
    passwords: dict[str, str]
    generated: list[str]
    default_vc: str


def load_roster(path: Path) -> Roster:
    try:
        doc = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise UserError(f"cannot read roster {path}: {err}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("students"), dict):
        raise UserError(f"roster {path}: expected a mapping with 'students: {{NAME: ...}}'")
    _only(doc, {"students", "default_vc"}, f"roster {path}")
    students = tuple(_student(str(n), e, path) for n, e in doc["students"].items())
    default = doc.get("default_vc")
    return Roster(students, str(default) if default else None, str(path))


def _student(name: str, entry: Any, path: Path) -> Student:
    where = f"roster {path}: students.{name}"
    if not NAME.fullmatch(name) or name in RESERVED:
        raise UserError(
            f"{where}: a name is lower-case letters, digits, '.', '_' or '-' (and not "
            f"{', '.join(sorted(RESERVED))})"
        )
    entry = {} if entry is None else entry
    if not isinstance(entry, dict):
        raise UserError(f"{where}: expected {{password: ..., groups: [...], vcs: [...]}}")
    _only(entry, {"password", "groups", "vcs"}, where)
    password = entry.get("password")
    if password is not None and (not isinstance(password, str) or len(password) < MIN_PASSWORD):
        raise UserError(f"{where}.password: a string of at least {MIN_PASSWORD} characters")
    return Student(name, password, _names(entry, "groups", where), _names(entry, "vcs", where))


def _names(entry: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UserError(f"{where}.{key}: a list of names, e.g. {key}: [vc1]")
    return tuple(value)


def _only(doc: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise UserError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {sorted(allowed)}")


def plan_course(
    roster: Roster, vcs: list[str], grants: dict[str, frozenset[str]], passwords_file: Path
) -> Course:
    """Check the roster against the cluster's VCs and the grants (group -> VCs); give each
    student their groups and password (generated ones kept in ``passwords_file``, 0600)."""
    default_vc = roster.default_vc or (vcs[0] if vcs else "")
    for vc in {default_vc, *(v for s in roster.students for v in s.vcs)}:
        check_vc_group(vc, vcs, grants, f"roster {roster.source}")
    grant_groups = set(grants)
    groups: dict[str, list[str]] = {}
    for student in roster.students:
        unknown = sorted(set(student.groups) - grant_groups)
        if unknown:
            raise UserError(
                f"roster {roster.source}: {student.name}'s group(s) {', '.join(unknown)} grant "
                "no VC in the grants file: add them there, or give the student vcs: [...]"
            )
        mine = [*student.groups, *student.vcs] or [default_vc]
        for group in mine:
            groups.setdefault(group, []).append(student.name)
    kept = _read_passwords(passwords_file)
    passwords, generated = {}, []
    for student in roster.students:
        if student.password is not None:
            passwords[student.name] = student.password
        else:
            passwords[student.name] = kept.get(student.name) or generated_password()
            generated.append(student.name)
    _write_passwords(passwords_file, {name: passwords[name] for name in generated})
    vc_groups = sorted({g for g in groups if g in vcs and g not in grant_groups})
    return Course(groups, vc_groups, passwords, generated, default_vc)


def check_vc_group(vc: str, vcs: list[str], grants: dict[str, frozenset[str]], where: str) -> None:
    """VC is the cluster's, and a group of its name, if the grants have one, grants it."""
    if vc not in vcs:
        raise UserError(f"{where}: VC {vc!r} is not in the cluster (its VCs: {', '.join(vcs)})")
    if vc in grants and vc not in grants[vc]:
        raise UserError(
            f"{where}: the grants file's group {vc!r} does not grant VC {vc!r}, so students "
            f"put in VC {vc} by their group would not get it: make it `{vc}: {{vcs: [{vc}]}}`"
        )


def _read_passwords(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    doc = yaml.safe_load(path.read_text()) or {}
    return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


def _write_passwords(path: Path, passwords: dict[str, str]) -> None:
    """The generated passwords, for the instructor to hand out: 0600, rewritten whole."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write("# Generated by labhive up --roster: each student's first password.\n")
        yaml.safe_dump(passwords, out, default_flow_style=False)


def course_grants(source: Path, vc_groups: list[str], out: Path) -> Path:
    """The grants the service reads: ``source`` plus a group per VC the roster puts students
    in by VC (``VC: {vcs: [VC]}``); ``source`` itself when it needs none."""
    if not vc_groups:
        return source
    doc = yaml.safe_load(source.read_text()) or {}
    groups = doc.setdefault("groups", {}) or {}
    doc["groups"] = groups
    for vc in vc_groups:
        groups[vc] = {"vcs": [vc]}
    header = f"# Written by labhive up from {source} and the roster's VCs; edit {source}.\n"
    out.write_text(header + yaml.safe_dump(doc, default_flow_style=False, sort_keys=False))
    return out
