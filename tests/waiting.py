"""The one way tests wait for something another process or thread does.

The timeout only bounds how long a broken test hangs; it is generous because CI runs on a shared
2-core machine where a process can take seconds to start. Nothing here measures speed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from labhive.scheduler.client import Job

T = TypeVar("T")


def wait_until(
    check: Callable[[], T | None], what: str = "", timeout: float = 30.0, poll_s: float = 0.02
) -> T:
    """Polls ``check`` until it returns something truthy, and returns that; fails the test
    after ``timeout`` seconds, naming ``what`` it waited for. (So a check that answers
    ``None`` until it has something gives that something, never ``None``.)"""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or check}")
        time.sleep(poll_s)


def job_in(job: Job, *states: str) -> Callable[[], bool]:
    """A check for ``wait_until``: ``job``, refreshed, is in one of ``states``. It binds the
    job it is given, so a loop can wait on each of its jobs in turn (a lambda in the loop
    would see the loop's variable, not the job of its turn)."""
    return lambda: job.refresh().state in states


def job_done(job: Job) -> Callable[[], bool]:
    """A check for ``wait_until``: ``job``, refreshed, has ended (whichever way)."""
    return lambda: job.refresh().done
