"""Every task's output, read incrementally: the log tail a widget follows and ``%logs``.

The service serves one task's stream per request, from a byte offset; this keeps an offset per
task so a widget polling at 2 Hz reads only what is new, and prefixes lines with their task
when a job has several, so a gang's output stays readable.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from typing import Any

CHUNK = 65536


class LogTail:
    """The last ``lines`` lines of each task of a job's current attempt."""

    def __init__(self, job: Any, lines: int = 15, stream: str = "stdout") -> None:
        self.job = job
        self.lines = lines
        self.stream = stream
        self._attempt: Any = None
        self._offsets: dict[str, int] = {}
        self._partial: dict[str, str] = {}
        self._tails: dict[str, deque[str]] = {}
        self._complete: dict[str, bool] = {}

    def _reset_if_new_attempt(self) -> None:
        attempt = self.job.info.attempt
        if attempt != self._attempt:
            self._attempt = attempt
            self._offsets.clear()
            self._partial.clear()
            self._tails.clear()
            self._complete.clear()

    def tasks(self) -> list[str]:
        return list(self.job.logs(0, limit=1).tasks)

    def read_new(self) -> dict[str, list[str]]:
        """Fetch what each task wrote since the last call; returns the new complete lines."""
        self._reset_if_new_attempt()
        fresh: dict[str, list[str]] = {}
        for task in self.tasks():
            offset = self._offsets.get(task, 0)
            text = ""
            while True:
                chunk = self.job.logs(offset, task=task, limit=CHUNK, stream=self.stream)
                text += chunk.data
                offset = chunk.next_offset
                self._complete[task] = chunk.complete
                if len(chunk.data) < CHUNK or not chunk.data:
                    break
            self._offsets[task] = offset
            text = self._partial.pop(task, "") + text
            *lines, rest = text.split("\n")
            if chunk.complete and rest:
                lines.append(rest)
            elif rest:
                self._partial[task] = rest
            tail = self._tails.setdefault(task, deque(maxlen=self.lines))
            tail.extend(lines)
            fresh[task] = lines
        return fresh

    @property
    def complete(self) -> bool:
        return bool(self._complete) and all(self._complete.values())

    def text(self) -> str:
        return prefixed({task: list(tail) for task, tail in self._tails.items()})

    def follow(self, poll_s: float = 0.5) -> Iterator[str]:
        """Yield prefixed new lines until every task has ended and all was read."""
        while True:
            self.job.refresh()
            ended = self.job.info.done
            fresh = self.read_new()
            block = prefixed(fresh, several=len(self._tails) > 1)
            if block:
                yield block
            if ended and self.complete:
                return
            time.sleep(poll_s)


def prefixed(lines_by_task: dict[str, list[str]], several: bool | None = None) -> str:
    """``[worker-0] line`` when there are several tasks; the bare lines for one."""
    several = len(lines_by_task) > 1 if several is None else several
    out: list[str] = []
    for task, lines in lines_by_task.items():
        out.extend(f"[{task}] {line}" if several else line for line in lines)
    return "\n".join(out)
