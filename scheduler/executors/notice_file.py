"""The stop notice a task can read from a file: ``$LABHIVE_NOTICE_FILE``.

Before the service stops a task (culling, a time limit, preemption, a drain, a cancel) it writes
``{"reason": ..., "deadline": epoch seconds, "deadline_iso": ..., "kind": ...}`` here, in the
task's directory (beside its ``work/``), owned by the task's user and 0600; SIGTERM follows at
the deadline at the latest, SIGKILL after the grace period. A batch job checks the file (or
traps SIGTERM) to write a checkpoint. A withdrawn notice removes the file.

The file is written whole or not at all (a rename), so a reader never sees half of it.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

NOTICE_FILE = "notice.json"
ENV = "LABHIVE_NOTICE_FILE"


def notice_path(task_dir: Path) -> Path:
    return task_dir / NOTICE_FILE


def write_notice(task_dir: Path, notice: dict[str, Any] | None, run_as: dict[str, Any]) -> None:
    """Write (``notice``) or remove (None) the task's notice file, as the task's own file."""
    path = notice_path(task_dir)
    if notice is None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(fd, 0o600)
        if run_as.get("separated") and os.geteuid() == 0:
            os.fchown(fd, int(run_as["uid"]), int(run_as["gid"]))
        out.write(json.dumps(notice))
    os.replace(tmp, path)


def read_notice(path: str | os.PathLike[str] | None) -> dict[str, Any] | None:
    """The notice in ``path``, None when there is none (or no path)."""
    if not path:
        return None
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):  # none yet, or not readable: no notice
        return None
    return data if isinstance(data, dict) and "deadline" in data else None
