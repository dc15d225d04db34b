"""LabHive's scheduling counters, tallied from the job store's event rows.

Every lifecycle transition is an event row (time, from, to, reason), so submissions,
preemptions, retries, failures and queue waits are all in the store already; the tally reads
each row once (the service hands over rows newer than ``cursor``) and keeps running totals, so a
scrape costs one small query however long the cluster has run. The first feed after a restart
replays the whole history, so totals survive restarts. (On PostgreSQL, a row whose transaction
commits after a later-numbered one was already read is missed; counters may then lag by that
row, which a restart repairs.)
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from labhive.scheduler.core.states import JobState
from labhive.scheduler.drivers.attempts import RETRYING
from labhive.scheduler.observe.prometheus import WAIT_BUCKETS, HistogramData, RunningHistogram

#: Reasons the service gives a transition, as counted here (a retry's is ``attempts``'s).
SUBMITTED, PREEMPTED = "submitted", "preempted"
OOM_KILLED = "oom_killed"
#: The local executor's disk limits (executors/quota.py, output.py, service/diskspace.py).
DISK_FULL, DISK_QUOTA, OUTPUT_CAP = "disk_full", "disk_quota", "output_cap"


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One event row with its job's VC."""

    id: int
    job_id: int
    vc: str
    time: float
    from_state: str | None
    to_state: str
    reason: str


def failure_reason(exit_reason: str) -> str | None:
    """``oom_killed`` when an executor's exit reason says the task was killed for memory (the
    local executor: "went over its memory limit"; Kubernetes: "OOMKilled"); ``disk_full``,
    ``disk_quota`` or ``output_cap`` for the local executor's disk limits; else None."""
    text = exit_reason.lower()
    if "memory limit" in text or "oomkilled" in text:
        return OOM_KILLED
    if text.startswith("disk full") or ": disk full" in text:
        return DISK_FULL
    if "over its disk quota" in text:
        return DISK_QUOTA
    if "went past its cap" in text:
        return OUTPUT_CAP
    return None


class EventTally:
    """Running totals over the event stream; safe to feed and read from different threads."""

    def __init__(self) -> None:
        self.cursor = 0  # the id of the last event row tallied
        self._lock = threading.Lock()
        self._submissions: Counter[str] = Counter()
        self._preemptions: Counter[str] = Counter()
        self._retries: Counter[str] = Counter()
        self._failures: Counter[tuple[str, str]] = Counter()
        self._waits: dict[str, RunningHistogram] = {}
        self._waiting_since: dict[int, tuple[str, float]] = {}  # job -> (vc, since)

    def add(self, rows: Iterable[JobEvent]) -> None:
        with self._lock:
            for e in rows:
                if e.id <= self.cursor:
                    continue
                self.cursor = e.id
                self._one(e)

    def _one(self, e: JobEvent) -> None:
        if e.reason == SUBMITTED:
            self._submissions[e.vc] += 1
        elif e.reason == PREEMPTED:
            self._preemptions[e.vc] += 1
        elif e.reason == RETRYING:
            self._retries[e.vc] += 1
        if e.to_state == JobState.FAILED or e.reason == RETRYING:
            self._failures[(e.vc, e.reason if e.to_state == JobState.FAILED else "failed")] += 1
        if e.to_state == JobState.WAITING and e.from_state != JobState.WAITING:
            self._waiting_since[e.job_id] = (e.vc, e.time)
        elif e.to_state == JobState.RUNNING and e.from_state == JobState.WAITING:
            vc, since = self._waiting_since.pop(e.job_id, (e.vc, e.time))
            self._waits.setdefault(vc, RunningHistogram(WAIT_BUCKETS)).observe(e.time - since)
        elif e.to_state != JobState.WAITING:
            self._waiting_since.pop(e.job_id, None)

    def task_failed(self, vc: str, exit_reason: str) -> None:
        """A task exit the event rows do not describe (OOM kills); counted since this start."""
        reason = failure_reason(exit_reason)
        if reason is not None:
            with self._lock:
                self._failures[(vc, reason)] += 1

    # ---- views for the exporter ------------------------------------------------------------
    def submissions(self) -> dict[str, int]:
        with self._lock:
            return dict(self._submissions)

    def preemptions(self) -> dict[str, int]:
        with self._lock:
            return dict(self._preemptions)

    def retries(self) -> dict[str, int]:
        with self._lock:
            return dict(self._retries)

    def failures(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._failures)

    def queue_wait(self) -> dict[str, HistogramData]:
        with self._lock:
            return {vc: h.snapshot() for vc, h in self._waits.items()}

    def oldest_wait(self, now: float) -> dict[str, float]:
        """Per VC, how long its longest-waiting job has waited by ``now``."""
        out: dict[str, float] = {}
        with self._lock:
            for vc, since in self._waiting_since.values():
                out[vc] = max(out.get(vc, 0.0), now - since)
        return out
