"""How the scheduler loop waits after a failed pass, and what it tells ``/health`` meanwhile.

A database outage or a broken executor makes every pass fail until it is fixed; retrying every
poll interval would flood the log and the database the moment it comes back, and giving up
would leave a service that answers the API but never schedules again. So the loop retries with
a capped exponential backoff (0.5 s, 1 s, 2 s ... 10 s), logs the first failure of a streak with
its traceback and the recovery once, and keeps the time of its last good pass for ``/health``
and ``labhive_loop_last_pass_age_seconds``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class LoopHealth:
    """The loop's streak of failures and its last good pass (monotonic clock)."""

    first_s: float = 0.5
    cap_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    failures: int = 0
    error: str | None = None  # the class of the last failure: no message, it may hold SQL
    last_ok: float = field(default=0.0)
    failing_since: float | None = None

    def __post_init__(self) -> None:
        self.last_ok = self.clock()  # a loop that never passed is as old as its start

    @property
    def failing(self) -> bool:
        return self.failures > 0

    def delay(self) -> float:
        """How long to wait before the next try: doubles per failure, up to ``cap_s``."""
        if not self.failures:
            return 0.0
        return min(self.cap_s, self.first_s * 2.0 ** (self.failures - 1))

    def passed(self, log: logging.Logger) -> None:
        if self.failures:
            down = self.clock() - (self.failing_since or self.clock())
            log.warning(
                "scheduler loop works again after %d failed tries (%.1f s)", self.failures, down
            )
        self.failures, self.error, self.failing_since = 0, None, None
        self.last_ok = self.clock()

    def failed(self, err: BaseException, log: logging.Logger, what: str) -> None:
        """Count a failure; only the first of a streak is logged with its traceback."""
        if not self.failures:
            self.failing_since = self.clock()
            log.error("%s failed; retrying with backoff until it works", what, exc_info=err)
        else:
            log.debug("%s failed again (%d in a row): %r", what, self.failures + 1, err)
        self.failures += 1
        self.error = type(err).__name__

    def age(self) -> float:
        """Seconds since the last good pass."""
        return max(0.0, self.clock() - self.last_ok)
