"""What any thread hands the loop between passes: stored submissions, cancels, culls. Each
pass takes all that arrived (so 1,000 submissions a second cost a few passes, not 1,000)."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.service.runtime.runs import drain


@dataclass(frozen=True)
class Taken:
    """One pass's inputs, cancels first: a job's submission is queued before any cancel of
    it, so every cancel taken here finds its job in the intake taken after it."""

    cancels: list[int]
    intake: list[tuple[int, JobSpec, bool]]  # (id, spec, admitted)


class Inputs:
    def __init__(self, wake: threading.Event) -> None:
        self._wake = wake
        self._intake: deque[tuple[int, JobSpec, bool]] = deque()  # (id, spec, admitted)
        self._cancels: deque[int] = deque()
        self._culls: deque[tuple[int, str, float]] = deque()  # (job, why, idle seconds)

    def submitted(self, job_id: int, spec: JobSpec, admitted: bool) -> None:
        self._intake.append((job_id, spec, admitted))
        self._wake.set()

    def submitted_many(self, new: list[tuple[int, JobSpec]]) -> None:
        self._intake.extend((job_id, spec, True) for job_id, spec in new)
        self._wake.set()

    def cancel(self, job_id: int) -> None:
        self._cancels.append(job_id)
        self._wake.set()

    def cancel_all(self, job_ids: list[int]) -> None:
        """Cancels a rebuild found asked for in the store."""
        self._cancels.extend(job_ids)

    def cull(self, job_id: int, why: str, idle_s: float) -> None:
        self._culls.append((job_id, why, idle_s))
        self._wake.set()

    def take(self) -> Taken:
        cancels = drain(self._cancels)
        return Taken(cancels, drain(self._intake))

    def take_culls(self) -> list[tuple[int, str, float]]:
        return drain(self._culls)

    def forget_intake(self) -> None:
        """A rebuild reads every stored submission: those queued before it are dropped (the
        ones queued after it are read again or deduplicated at intake)."""
        self._intake.clear()
