"""Why a job waits, in the words a student or an admin needs: how many cells of the size it
needs its VC has free, how many it needs, and its place in the queue.

Only a formatter: the facts are the record the search left when it failed (``shortfall``,
built by ``failures`` with the search's own definitions), asked for only when someone looks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from labhive.scheduler.hived.cells import Chain
from labhive.scheduler.hived.shortfall import (
    GangTooLarge,
    NoCells,
    NoRoom,
    NoVC,
    TaskTooLarge,
    TooManyTasks,
)
from labhive.scheduler.policies.policy_base import position_tail

if TYPE_CHECKING:
    from labhive.scheduler.hived.state import HivedJob, HivedState


def unit_name(info: Chain, level: int, count: int) -> str:
    cells = "cell" if count == 1 else "cells"
    if level == info.node_level:
        return f"node-level {cells}"
    if level == 1:
        return f"single-GPU {cells}"
    return f"{info.level_leaves[level]}-GPU {cells}"


def why_waiting(
    sched: HivedState[Any], job: HivedJob, position: int | None, length: int | None
) -> str:
    tail = position_tail(position, length, job.vc)
    vc = job.vc
    capped = _capped(sched, job)
    if capped is not None:
        return capped + tail
    match sched.failure_of(job):
        case NoVC():
            return f"VC {vc} no longer exists in this cluster; cancel the job{tail}"
        case NoCells():
            return f"{vc} has no cells of the kind this job asks for{tail}"
        case GangTooLarge(size, gpus, most, leaf_type):
            word, unit = ("GPU", "GPUs") if gpus else ("leaf-cell", "leaf cells")
            return (
                f"this {size}-{word} gang can never start in {vc} as its cells are: a gang "
                f"stays within one chain and the largest of {vc}'s holds {most} {leaf_type} "
                f"{unit}; ask for at most {most} {unit} or set gang: false to start tasks one "
                f"by one{tail}"
            )
        case TaskTooLarge(leaves, gpus, largest):
            return (
                f"a task of {leaves} {_word(gpus)} can never start in {vc}: a task lies inside "
                f"one of its VC's cells, and the largest of {vc}'s holds {largest}; ask for at "
                f"most {largest} per task{tail}"
            )
        case TooManyTasks(tasks, leaves, gpus, slots):
            return (
                f"this gang of {tasks} tasks of {leaves} {_word(gpus)} can never start in {vc}: "
                f"a task lies inside one of its VC's cells, and {vc}'s cells hold at most "
                f"{slots} such tasks; ask for at most {slots} tasks or set gang: false{tail}"
            )
        case NoRoom() as room:
            return _no_room(sched, job, room) + tail
    raise AssertionError("unknown failure record")


def _capped(sched: HivedState[Any], job: HivedJob) -> str | None:
    """Why a job waits when its user holds the most GPUs the VC lets one user run
    (``userLimits.maxRunningGpus``), whatever room the VC has."""
    ledger = sched._ledger
    if ledger is None:
        return None
    waiting = job.waiting_tasks
    if job.spec.gang:
        need = sum(role.gpu for role, _ in waiting)
    else:
        need = min((role.gpu for role, _ in waiting), default=0)
    user = job.spec.user or ""
    cap = ledger.over_cap(job.vc, user, need)
    if cap is None:
        return None
    running = ledger.running.get((job.vc, user), 0)
    who = f"user {user}" if user else "this job's user"
    return (
        f"{who} already runs {running} GPUs in {job.vc}, which lets one user run at most "
        f"{cap} at once (userLimits.maxRunningGpus); this job needs {need} more, so it waits "
        f"until {user or 'that user'}'s running jobs end"
    )


def _word(gpus: bool) -> str:
    return "GPUs" if gpus else "leaf cells"


def _no_room(sched: HivedState[Any], job: HivedJob, room: NoRoom) -> str:
    waiting = len(job.waiting_tasks)
    incremental = not job.spec.gang and len(job.tasks) > 1
    what = "the next task" if incremental else "this gang" if waiting > 1 else "this job"
    what_tail = f" ({waiting} of {len(job.tasks)} tasks waiting)" if incremental else ""
    best = room.best
    info = sched.tree.chains[best.chain]
    if best.leaves < info.level_leaves[best.level]:
        # tasks smaller than the cells that name their size: count tasks, not cells (a
        # 4-GPU node with 2 GPUs free holds one 2-GPU task, not "1 free node-level cell")
        gpus = best.leaves == max(r.gpu for r, _ in job.waiting_tasks)
        tasks = "task" if room.need == 1 else "tasks"
        unit = f"{tasks} of {best.leaves} {_word(gpus)}"
        if job.opportunistic:
            return (
                f"the cluster has idle room for {best.usable} of the {room.need} {unit} {what} "
                f"needs (opportunistic jobs use idle cells only){what_tail}"
            )
        text = f"{job.vc} has room for {best.usable} of the {room.need} {unit} {what} needs"
    elif job.opportunistic:
        cells = unit_name(info, best.level, room.need)
        return (
            f"the cluster has {best.usable} idle of the {room.need} {cells} {what} needs "
            f"(opportunistic jobs use idle cells only){what_tail}"
        )
    else:
        cells = unit_name(info, best.level, room.need)
        text = f"{job.vc} has {best.usable} free of the {room.need} {cells} {what} needs"
    notes = []
    if best.unhealthy:
        notes.append(f"{best.unhealthy} more on unhealthy nodes")
    if best.unbindable:
        notes.append(
            f"{best.unbindable} more cannot be bound now: the free physical cells left are "
            "unhealthy or guaranteed to other VCs"
        )
    if notes:
        text += f" ({'; '.join(notes)})"
    elif best.usable >= room.need:
        text += ", but they do not fit together (a gang stays within one chain, a task on one node)"
    return text + what_tail
