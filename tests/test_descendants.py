"""Given real processes below this one, expect the supervisor's ``/proc`` reading to find them
all (grandchildren too) and its kill to reach only the very process it found, never a later one
that got its pid (pid_max is 32768 here: pids come round fast)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time

from labhive.scheduler.executors.descendants import descendants, kill


def test_descendants_are_found_and_a_kill_reaches_only_the_process_that_was_found() -> None:
    shell = subprocess.Popen(["sh", "-c", "sleep 60 & wait $!"])
    try:
        deadline = time.monotonic() + 10
        while len(found := descendants(os.getpid())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert shell.pid in {p.pid for p in found} and len(found) == 2, found  # sh and sleep
        (sleep,) = [p for p in found if p.pid != shell.pid]
        # the same pid, but started at another time: another process, as after a pid's reuse
        kill(dataclasses.replace(sleep, started=sleep.started + 1))
        time.sleep(0.2)
        assert sleep.pid in {p.pid for p in descendants(os.getpid()) if not p.zombie}
        kill(sleep)  # the very process: the shell's wait sees it killed
        assert shell.wait(10) == 128 + 9
    finally:
        for proc in descendants(os.getpid()):
            kill(proc)
        shell.wait(10)
