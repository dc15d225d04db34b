"""Whether a trace is (part of) the SYNTHETIC Philly-format trace, whatever was done to it.

The synthetic trace in ``shared/data/philly/synthetic/`` was generated in the Philly format; its
figures are not Philly's, and the simulator says so. Checking only a file's first record
(``traces.is_synthetic``) missed a slice from its middle and a copy with new submit times
(issue 34). A job's *mark* is a hash of what slicing and re-timing keep: its id, VC, user and
GPU count. ``synthetic_marks.txt`` holds the marks of the synthetic jobs whose mark falls
in one 32nd of the hash space (3,335 of its 105,258 runnable jobs, 8 hex digits each). Two
matches decide: a recorded trace's job matches a kept mark by chance with odds ~1e-6, and a
slice of n synthetic jobs holds fewer than two marks with odds (1 + n/32) e^(-n/32): 1.4% at
200 jobs, 0.05% at 400.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Protocol


class TraceJob(Protocol):
    """What a mark reads of a trace's job (``traces.TraceJob``; not imported: traces imports
    this module to label what it loads)."""

    @property
    def job_id(self) -> str: ...
    @property
    def vc(self) -> str: ...
    @property
    def user(self) -> str: ...
    @property
    def gpus(self) -> int: ...


MARKS_FILE = Path(__file__).with_name("synthetic_marks.txt")
#: a mark is kept when its first two hex digits are below this (8 of 256: one 32nd)
KEEP_BELOW = 8
#: the jobs of a trace that are checked (the first ones read), and the matches that decide
CHECKED = 20_000
MATCHES = 2


def mark(job: TraceJob) -> str:
    text = f"{job.job_id}|{job.vc}|{job.user}|{job.gpus}"
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def kept(digest: str) -> bool:
    return int(digest[:2], 16) < KEEP_BELOW


@cache
def _marks() -> frozenset[str]:
    return frozenset(MARKS_FILE.read_text().split())


class SyntheticCheck:
    """Fed a trace's jobs as they are read; ``found`` once enough of them are synthetic."""

    def __init__(self) -> None:
        self.seen = 0
        self.matches = 0

    def feed(self, job: TraceJob) -> None:
        if self.seen >= CHECKED or self.found:
            return
        self.seen += 1
        digest = mark(job)
        if kept(digest) and digest in _marks():
            self.matches += 1

    @property
    def found(self) -> bool:
        return self.matches >= MATCHES


def jobs_are_synthetic(jobs: Iterable[TraceJob]) -> bool:
    check = SyntheticCheck()
    for job in jobs:
        check.feed(job)
        if check.found or check.seen >= CHECKED:
            break
    return check.found


def write_marks(jobs: Iterable[TraceJob], path: Path = MARKS_FILE) -> int:
    """(Re)build the marks file from the synthetic trace's jobs; how many marks it holds."""
    marks = sorted({d for job in jobs if kept(d := mark(job))})
    path.write_text("\n".join(marks) + "\n")
    return len(marks)
