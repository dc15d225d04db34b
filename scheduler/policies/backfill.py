"""EASY backfill with declared time limits: may a later job start past the blocked head?

The queue policies' backfill splits each waiting line by GPU count, so a small job starts
past a big blocked one. Alone, that starves the big job. With limits the head's start can be
reserved: the running jobs' declared limits say when enough GPUs will be free for it (the
"shadow" time), and a later job may start now only if its own limit ends by then, or if it
fits in the GPUs the head leaves over at that time (Lifka's EASY backfill). Where the running
jobs declared too little to bound the head's start, nothing is reserved (backfill as before).

Pure: numbers in, a verdict out; ``queue_policy.py`` calls it from ``_try``.
"""

from __future__ import annotations

from collections.abc import Iterable


def shadow(
    need: int, free: int, running: Iterable[tuple[int, float | None]]
) -> tuple[float, int] | None:
    """When ``need`` GPUs will be free at the latest (running jobs stop at their declared
    ends), and how many are free then: ``running`` is (gpus, end or None). None when the jobs
    with limits do not free enough, or enough is free already (then GPU count is not what
    blocks the head, and no end time says when it starts)."""
    if free >= need:
        return None
    for end, gpus in sorted((e, g) for g, e in running if e is not None):
        free += gpus
        if free >= need:
            return end, free
    return None


def may_jump(
    now: float,
    gpus: int,
    limit: float | None,
    head_gpus: int,
    free: int,
    running: Iterable[tuple[int, float | None]],
) -> bool:
    """May a job of ``gpus`` and declared ``limit`` start now, past the blocked head that
    needs ``head_gpus``? Yes if it ends before the head could start, or fits beside the head
    then; yes too when the running jobs' limits cannot tell when that is."""
    return may_jump_by(now, gpus, limit, head_gpus, shadow(head_gpus, free, running))


def may_jump_by(
    now: float, gpus: int, limit: float | None, head_gpus: int, reserved: tuple[float, int] | None
) -> bool:
    """``may_jump`` given the head's ``shadow`` (a pass asks it for many jobs against one
    head, while the running jobs and free GPUs stay the same)."""
    if reserved is None:
        return True
    start, free_then = reserved
    if limit is not None and now + limit <= start:
        return True
    return gpus <= free_then - head_gpus
