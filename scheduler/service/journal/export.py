"""``labhive journal export``: the journal's jobs as a trace ``labhive simulate`` reads back.

Two formats:
- ``labhive``: the simulator's generic CSV (``sim/traces.py``: ``job_id, submit_time, vc,
  user, gpus, duration, status``), submit times in seconds from the first submission, the
  duration the job's real run time (its runs summed);
- ``philly``: Philly's ``cluster_job_log`` JSON (``jobid, vc, user, status, submitted_time,
  attempts[{start_time, end_time, detail[{ip, gpus}]}]``), one attempt per recorded run, with
  the nodes and GPUs it held; times as UTC ``YYYY-MM-DD HH:MM:SS`` (whole seconds, as Philly's).

Left out, counted (``Export.skipped``), as the simulator's own loaders would skip them: jobs
that never ran (cancelled while waiting, or still waiting at the end), and jobs not done at the
end, running or waiting again after a preemption (their run time is not known yet). A job the
policy asked for no GPUs is kept in the Philly log (its loader counts it as "zero GPUs") but not
in the CSV.

``--hash-names``: users and VCs become ``user-<10 hex>``/``vc-<10 hex>``, SHA-256 of a random
salt drawn for this export and the name: the same name gives the same hash within one export
(a user's jobs stay together) and another in the next (two exports cannot be joined by name).
Job names and commands are never exported; job ids are the store's (they reveal only order).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import secrets
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from labhive.scheduler.service.journal.recorded import (
    CANCELLED,
    RUNNING,
    WAITING,
    RecordedJob,
    Recording,
)
from labhive.scheduler.sim.traces import GENERIC_COLUMNS

ExportFormat = Literal["labhive", "philly"]
#: The store's final job states as a trace's status (what the simulator replays: a failed or
#: killed job ends FAILED after its recorded time).
STATUS = {"SUCCEEDED": "Pass", "FAILED": "Failed", "STOPPED": "Killed", "REJECTED": "Failed"}


class Namer:
    """Names as exported: as they are, or hashed with this export's salt."""

    def __init__(self, hashed: bool, salt: str | None = None) -> None:
        self.hashed = hashed
        self.salt = salt if salt is not None else secrets.token_hex(16)
        self._seen: dict[tuple[str, str], str] = {}

    def __call__(self, kind: str, name: str) -> str:
        if not self.hashed:
            return name
        key = (kind, name)
        if key not in self._seen:
            digest = hashlib.sha256(f"{self.salt}\0{kind}\0{name}".encode()).hexdigest()
            self._seen[key] = f"{kind}-{digest[:10]}"
        return self._seen[key]


@dataclass
class Export:
    text: str
    jobs: int
    skipped: Counter[str] = field(default_factory=Counter)


def export(
    recording: Recording,
    fmt: ExportFormat = "labhive",
    *,
    hash_names: bool = False,
    outcomes: Mapping[int, str] | None = None,
    salt: str | None = None,
) -> Export:
    """The recording as a trace; ``outcomes``: the store's final state of each job, by id."""
    name = Namer(hash_names, salt)
    skipped = Counter(recording.skipped)
    kept: list[RecordedJob] = []
    for job in recording.jobs:
        reason = _left_out(job)
        if reason is None:
            kept.append(job)
        else:
            skipped[reason] += 1
    status = _status(outcomes or {})
    if fmt == "philly":
        return Export(_philly(kept, name, status), len(kept), skipped)
    if fmt != "labhive":
        raise ValueError(f"unknown export format {fmt!r}")
    with_gpus = [j for j in kept if j.gpus > 0]
    skipped["zero GPUs"] += len(kept) - len(with_gpus)
    return Export(_generic(with_gpus, name, status), len(with_gpus), +skipped)


def _left_out(job: RecordedJob) -> str | None:
    if not job.ran:
        return "never ran (cancelled while waiting)" if job.how == CANCELLED else "still waiting"
    if job.how == RUNNING:
        return "still running at the end (run time not known yet)"
    if job.how == WAITING:
        return "waiting again at the end (preempted or requeued; run time not known yet)"
    return None


def _status(outcomes: Mapping[int, str]) -> Callable[[RecordedJob], str]:
    def status(job: RecordedJob) -> str:
        state = outcomes.get(job.job_id)
        if state is not None:
            return STATUS.get(state, "Pass")
        return "Killed" if job.how == CANCELLED else "Pass"

    return status


def _generic(jobs: list[RecordedJob], name: Namer, status: Callable[[RecordedJob], str]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["job_id", *GENERIC_COLUMNS])
    origin = jobs[0].submit if jobs else 0.0
    for j in jobs:
        w.writerow(
            [
                j.job_id,
                round(j.submit - origin, 3),
                name("vc", j.spec.vc),
                name("user", j.spec.user or ""),
                j.gpus,
                round(j.run_seconds, 3),
                status(j),
            ]
        )
    return out.getvalue()


def _philly(jobs: list[RecordedJob], name: Namer, status: Callable[[RecordedJob], str]) -> str:
    rows = []
    for j in jobs:
        attempts = []
        for run in j.runs:
            by_node: dict[str, list[str]] = {}
            for task in run.tasks:
                by_node.setdefault(task.node, []).extend(f"gpu{g}" for g in task.gpus)
            detail = [{"ip": node, "gpus": gpus} for node, gpus in by_node.items()]
            end = run.end if run.end is not None else run.start
            attempts.append(
                {"start_time": _time(run.start), "end_time": _time(end), "detail": detail}
            )
        rows.append(
            {
                "jobid": str(j.job_id),
                "vc": name("vc", j.spec.vc),
                "user": name("user", j.spec.user or ""),
                "status": status(j),
                "submitted_time": _time(j.submit),
                "attempts": attempts,
            }
        )
    # One job a line, as Philly's own log reads best (and its loader names a bad row's line).
    return "[\n" + ",\n".join(json.dumps(r, separators=(",", ":")) for r in rows) + "\n]\n"


def _time(t: float) -> str:
    return datetime.fromtimestamp(round(t), UTC).strftime("%Y-%m-%d %H:%M:%S")
