"""Course material in every user's home: the instructor's folder, copied on first spawn.

An instructor points the spawner at one folder (``c.LabHiveSpawner.course_dir``, or
``labhive up --course DIR``); when a user's server starts, ``deliver`` copies that folder into
their home under its own name (``labs/`` becomes ``~/labs/``), as nbgitpuller or a course image
would. It runs inside the server's task, so the copies belong to the user.

A file is delivered once: the ones already delivered are listed in ``~/.labhive-course.json``,
so a student's edits are never overwritten and a file they deleted does not come back; files
the instructor adds later arrive on the next start. A file already in the home that was never
delivered (the student made their own) is left alone too.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

RECORD = ".labhive-course.json"
SKIP = {"__pycache__", ".ipynb_checkpoints", ".git"}


def course_files(course: Path) -> list[Path]:
    """The course's files, relative to its folder, without caches and checkpoints."""
    found = []
    for folder, dirs, files in os.walk(course):
        dirs[:] = sorted(d for d in dirs if d not in SKIP)
        base = Path(folder).relative_to(course)
        found += [base / name for name in sorted(files) if not name.endswith(".pyc")]
    return found


def deliver(course: Path, home: Path) -> list[str]:
    """Copy the course's new files into ``home/<course name>/``; returns what was copied."""
    course, home = Path(course), Path(home)
    if not course.is_dir():
        raise FileNotFoundError(f"the course folder {course} does not exist")
    record = home / RECORD
    done: set[str] = set(json.loads(record.read_text())) if record.exists() else set()
    copied = []
    for rel in course_files(course):
        key = f"{course.name}/{rel.as_posix()}"
        target = home / course.name / rel
        if key in done or target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(course / rel, target)
        copied.append(key)
    if copied:
        record.write_text(json.dumps(sorted(done | set(copied)), indent=0))
    return copied
