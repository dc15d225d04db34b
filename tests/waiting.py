"""The one way tests wait for something another process or thread does.

The timeout only bounds how long a broken test hangs; it is generous because CI runs on a shared
2-core machine where a process can take seconds to start. Nothing here measures speed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    check: Callable[[], T], what: str = "", timeout: float = 30.0, poll_s: float = 0.02
) -> T:
    """Polls ``check`` until it returns something truthy, and returns that; fails the test
    after ``timeout`` seconds, naming ``what`` it waited for."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or check}")
        time.sleep(poll_s)
