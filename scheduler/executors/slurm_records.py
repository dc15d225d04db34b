"""How a Slurm task ended, from the exit record its step wrote and, failing that, from Slurm's
own words (the job's state, srun's lines in the task's stderr).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from labhive.scheduler.core.time_limits import show_duration
from labhive.scheduler.executors.base import (
    TaskExit,
    TaskKey,
)

#: The exit status of a task ended by SIGTERM, as a shell reports it.
_TERMINATED = 128 + 15


#: srun's lines about steps that ran and ended: a task's own failure, not Slurm's.
_TASK_ENDED = re.compile(
    r"task \d+: (exited with exit code|killed|terminated)|\*\*\* (job|step) ", re.IGNORECASE
)


def _recorded(info: Mapping[str, Any]) -> bool:
    return Path(info["exit_file"]).exists()


def _read_exit(info: Mapping[str, Any]) -> int | None:
    try:
        return int(json.loads(Path(info["exit_file"]).read_text())["exit_code"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _timed_out(key: TaskKey, info: Mapping[str, Any], code: int | None) -> TaskExit:
    """Slurm ended the job at its time limit: the job's own when LabHive passed it (Slurm's is
    that plus the grace, in whole minutes), else the one Slurm was seen enforcing."""
    limit = info.get("time_limit") or info.get("slurm_time_limit")
    shown = f" of {show_duration(float(limit))}" if limit else ""
    why = f"Slurm stopped job {info['slurm_job_id']} at its time limit{shown} (TIMEOUT)"
    # Slurm ends it with TERM (then KILL after KillWait): a task whose exit its script could
    # not record any more shows that, not "-"
    code = _TERMINATED if code is None else code
    return TaskExit(key, code, why, timed_out=True, time_limit=float(limit) if limit else None)


def _slurm_said(info: Mapping[str, Any]) -> str:
    """Slurm's own complaints in the batch output (``srun: error: ...``, ``slurmstepd: error:
    ...``), the lines about tasks that simply ended left out; with the fix where known."""
    try:
        with open(info.get("slurm_output") or "", "rb") as out:
            out.seek(max(0, out.seek(0, os.SEEK_END) - 8192))
            text = out.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [
        line.strip()
        for line in text.splitlines()
        if "error:" in line and not _TASK_ENDED.search(line)
    ]
    if not lines:
        return ""
    said = "Slurm said: " + " | ".join(lines[-2:])
    lower = said.lower()
    if "user" in lower and ("invalid" in lower or "unknown" in lower or "lookup" in lower):
        said += (
            "; the node knows no account for the task's uid: create that account on every "
            "Slurm node, or set --first-uid to the range of the site's uids"
        )
    return said


def _describe(code: int) -> str:
    if code > 128:
        return f"exit code {code} (killed by signal {code - 128})"
    return f"exit code {code}"


def _step(info: Mapping[str, Any]) -> str | None:
    """The task's Slurm step (``JOBID.STEPID``), as its run script recorded it."""
    try:
        return (Path(info["workdir"]) / "slurm_step").read_text().strip() or None
    except OSError:
        return None
