"""Who hears about a pass, given to the loop when it is built (never set on it afterwards)."""

from __future__ import annotations

from typing import Protocol

from labhive.scheduler.executors.base import TaskExit


class PassObserver(Protocol):
    """Monitoring's view of the loop (``monitoring.LoopCounters``): how long each policy call
    took, and the tasks that failed (their reason says why: ``oom_killed`` ...)."""

    def decided(self, seconds: float) -> None: ...

    def task_failed(self, job_id: int, exit: TaskExit) -> None: ...
