"""Finished tasks' work dirs are removed after a retention (``labhive serve --keep-work``).

A task's directory holds the service's records, its ``stdout``/``stderr`` (the logs users
read through the API, kept as long as the job's record is) and ``work/``, the task's own
files. ``work/`` is removed once the task has been over for the retention (default 7 days;
``--keep-work forever`` keeps every one). Safeguards:

- only tasks the store says ended (``ENDED`` or ``STOPPED``, with their end time), and only
  when their supervisor (pid and start time, as recorded) is no longer running;
- only a ``work`` directory that is a real directory (not a symlink) in a task directory under
  this data dir's ``jobs/``;
- ``shutil.rmtree`` with its file-descriptor-based walk (``avoids_symlink_attacks``), so a
  symlink the task planted inside ``work/`` is removed as a link, never followed: the service
  (root) never deletes anything outside the tree, whatever the task left there.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from pathlib import Path
from typing import Any

from labhive.scheduler.executors.workdir import WORK_DIR
from labhive.scheduler.service.store import Store, queries

log = logging.getLogger("labhive.service.retention")

DEFAULT_KEEP_WORK_S = 7 * 86400.0

if not shutil.rmtree.avoids_symlink_attacks:  # pragma: no cover - every Linux has the fd walk
    raise ImportError("this platform's shutil.rmtree can follow symlinks: work dirs unsafe")


class WorkRetention:
    """Removes ended tasks' ``work/`` dirs ``keep_s`` seconds after their end (None: never)."""

    def __init__(self, store: Store, data_dir: Path, keep_s: float | None) -> None:
        self.store = store
        self.jobs_dir = Path(data_dir).resolve() / "jobs"
        self.keep_s = keep_s
        self._swept_to = 0.0  # tasks that ended up to here were looked at
        self._pending: dict[int, dict[str, Any]] = {}  # task id -> handle: ended, still alive

    def sweep(self, now: float) -> list[Path]:
        """Remove what is due; return the work dirs removed."""
        if self.keep_s is None:
            return []
        cutoff = now - self.keep_s
        with self.store.read() as conn:
            rows = queries.tasks_ended_between(conn, self._swept_to, cutoff)
        self._swept_to = max(self._swept_to, cutoff)
        due = {**self._pending, **{r.id: r.handle for r in rows if isinstance(r.handle, dict)}}
        self._pending = {}
        removed = []
        for task_id, info in due.items():
            outcome = self._remove(info)
            if outcome == "running":
                self._pending[task_id] = info
            elif isinstance(outcome, Path):
                removed.append(outcome)
        return removed

    def _remove(self, info: dict[str, Any]) -> Path | str | None:
        """The work dir removed, "running" while its supervisor lives, None when there is none
        (removed before, or not a local task's)."""
        from labhive.scheduler.executors.local import supervisor_running

        work = self._work_dir(info)
        if work is None:
            return None
        if supervisor_running(info):
            return "running"
        try:
            shutil.rmtree(work)
        except OSError as err:
            log.warning("cannot remove the work dir %s: %s", work, err)
            return None
        return work

    def _work_dir(self, info: dict[str, Any]) -> Path | None:
        """The task's ``work/``, when it is a real directory in a task dir of this data dir."""
        raw = info.get("workdir")
        if not isinstance(raw, str):
            return None
        task = Path(raw)
        if task.parent.parent.parent != self.jobs_dir or os.path.realpath(task) != str(task):
            return None
        work = task / WORK_DIR
        try:
            if not stat.S_ISDIR(os.lstat(work).st_mode):
                return None
        except OSError:
            return None
        return work
