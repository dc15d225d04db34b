"""Why a job waits, in the words a student or an admin needs: how many cells of the size it
needs its VC has free, how many it needs, and its place in the queue.

Computed on demand from the core's state (never on the scheduling path), so it may take a
little longer to say exactly what blocks a job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from labhive.scheduler.hived.cells import Cell, Chain
from labhive.scheduler.policy_base import position_tail

if TYPE_CHECKING:
    from labhive.scheduler.hived.state import HivedJob, HivedState
    from labhive.scheduler.hived.vc import VC


def unit_level(info: Chain, leaves: int) -> int:
    """The level whose cells name a task's size: the largest at or below the node level that
    is as small as the smallest cell holding ``leaves`` GPUs."""
    smallest = next(
        (lvl for lvl in sorted(info.level_leaves) if info.level_leaves[lvl] >= leaves),
        info.node_level,
    )
    size = info.level_leaves[smallest]
    same = [lvl for lvl in info.level_leaves if info.level_leaves[lvl] == size]
    return max(lvl for lvl in same if lvl <= max(info.node_level, smallest))


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
    waiting = job.waiting_tasks
    roles = [r for r, _ in waiting]
    chains = sched._chains(job, roles)
    vc = sched.vcs.by_name.get(job.vc)
    if not job.opportunistic and vc is None:
        return f"VC {job.vc} no longer exists in this cluster; cancel the job{tail}"
    if not chains:
        return f"{job.vc} has no cells of the kind this job asks for{tail}"
    incremental = not job.spec.gang and len(job.tasks) > 1
    need = 1 if incremental else len(waiting)
    what = "the next task" if incremental else "this gang" if len(waiting) > 1 else "this job"
    what_tail = f" ({len(waiting)} of {len(job.tasks)} tasks waiting)" if incremental else ""
    if job.opportunistic:
        return _oppo(sched, job, chains, need, what) + what_tail + tail
    assert vc is not None
    never = _never(sched, job, vc, chains)
    if never:
        return never + tail
    return _guaranteed(sched, job, vc, chains, need, what) + what_tail + tail


def _task_leaves(sched: HivedState[Any], job: HivedJob, chain: str) -> int:
    leaf = sched.tree.chains[chain].leaf_type
    return max(sched._leaves(r, leaf, job.vc) for r, _ in job.waiting_tasks)


def _oppo(sched: HivedState[Any], job: HivedJob, chains: list[str], need: int, what: str) -> str:
    best = None
    for chain in chains:
        info = sched.tree.chains[chain]
        k = _task_leaves(sched, job, chain)
        level = unit_level(info, k)
        size = info.level_leaves[level]
        free = sum(n.free // size for n in info.node_cells if n.free >= k)
        if best is None or free > best[0]:
            best = (free, info, level)
    assert best is not None
    free, info, level = best
    return (
        f"the cluster has {free} idle of the {need} {unit_name(info, level, need)} "
        f"{what} needs (opportunistic jobs use idle cells only)"
    )


def _never(sched: HivedState[Any], job: HivedJob, vc: VC, chains: list[str]) -> str | None:
    """Accepted but not placeable under the VC's current cells at all."""
    if job.grouped:
        return None  # its affinity groups are placed apart: not judged here
    if not job.spec.gang or len(job.waiting_tasks) < 2:
        return _never_in_cells(sched, job, vc, chains)
    sizes = {
        c: sum(sched._leaves(r, sched.tree.chains[c].leaf_type, job.vc) for r, _ in job.tasks)
        for c in chains
    }
    if any(sizes[c] <= vc.leaves(sched.tree, c) for c in chains):
        return _never_in_cells(sched, job, vc, chains)
    largest = max(chains, key=lambda c: vc.leaves(sched.tree, c))
    most = vc.leaves(sched.tree, largest)
    leaf = sched.tree.chains[largest].leaf_type
    gpus = all(sizes[c] == sum(r.gpu for r, _ in job.tasks) for c in chains)
    word, unit = ("GPU", "GPUs") if gpus else ("leaf-cell", "leaf cells")
    return (
        f"this {min(sizes.values())}-{word} gang can never start in {vc.name} as its cells are: "
        f"a gang stays within one chain and the largest of {vc.name}'s holds {most} {leaf} "
        f"{unit}; ask for at most {most} {unit} or set gang: false to start tasks one by one"
    )


def _never_in_cells(sched: HivedState[Any], job: HivedJob, vc: VC, chains: list[str]) -> str | None:
    """A task lies inside one of its VC's cells (HiveD): tasks larger than every cell, or a
    gang with more tasks than the cells can hold one by one, never start."""
    if job.pinned:
        return None
    waiting = job.waiting_tasks
    best: tuple[int, int, int, str] | None = None  # (slots, size, tasks, chain) if never
    for chain in chains:
        info = sched.tree.chains[chain]
        sizes = sorted((sched._leaves(r, info.leaf_type, job.vc) for r, _ in waiting), reverse=True)
        units = sizes[:1] if not job.spec.gang else sizes
        counts = {k: sum(1 for x in units if x >= k) for k in set(units)}
        short = [(task_slots(info, vc.quota.get(chain, {}), k), k, n) for k, n in counts.items()]
        short = [t for t in short if t[0] < t[2]]
        if not short:
            return None
        slots, k, n = min(short, key=lambda t: (t[0], -t[1]))
        if best is None or slots > best[0]:
            best = (slots, k, n, chain)
    if best is None:
        return None
    slots, k, n, chain = best
    word = "GPUs" if k == max(r.gpu for r, _ in waiting) else "leaf cells"
    largest = max_cell(sched.tree.chains[chain], vc.quota.get(chain, {}))
    if slots == 0:
        return (
            f"a task of {k} {word} can never start in {vc.name}: a task lies inside one of its "
            f"VC's cells, and the largest of {vc.name}'s holds {largest}; ask for at most "
            f"{largest} per task"
        )
    return (
        f"this gang of {n} tasks of {k} {word} can never start in {vc.name}: a task lies inside "
        f"one of its VC's cells, and {vc.name}'s cells hold at most {slots} such tasks; ask "
        f"for at most {slots} tasks or set gang: false"
    )


def task_slots(info: Chain, quota: dict[int, int], k: int) -> int:
    """How many tasks of ``k`` leaves a VC's cells of one chain hold, each task inside one
    cell (a node-or-larger cell holds them per node; single-GPU cells combine on a node)."""
    slots = 0
    for level, n in quota.items():
        if level >= info.node_level:
            per_node = info.node_leaves // k
            slots += n * (info.level_leaves[level] // info.node_leaves) * per_node
        elif level == 1:
            slots += n // k if k <= info.node_leaves else 0
        else:
            slots += n * (info.level_leaves[level] // k)
    return slots


def max_cell(info: Chain, quota: dict[int, int]) -> int:
    """The most leaves one task may take in these cells."""
    levels = [lvl for lvl, n in quota.items() if n > 0]
    if not levels:
        return 0
    top = max(levels)
    if top == 1:
        return min(info.node_leaves, quota[1])
    return info.level_leaves[min(top, info.node_level)]


def _usable(leaf: Cell, prio: int) -> bool:
    return leaf.bad == 0 and (leaf.job is None or leaf.prio < prio)


def _guaranteed(
    sched: HivedState[Any], job: HivedJob, vc: VC, chains: list[str], need: int, what: str
) -> str:
    best = None
    for chain in chains:
        info = sched.tree.chains[chain]
        k = _task_leaves(sched, job, chain)
        level = unit_level(info, k)
        size = info.level_leaves[level]
        free = bad = reserved = 0
        regions: dict[Cell, int] = {}
        for cell in vc.bound.get(chain, {}).values():
            if cell.pinned and cell.pinned_id != job.pinned:
                continue
            nodes = [cell] if cell.node_cell is not None else cell.nodes()
            for part in nodes:
                node = part.node_cell or part
                regions[node] = regions.get(node, 0) + sum(
                    1 for leaf in part.leaf_cells() if _usable(leaf, job.prio)
                )
                bad += part.bad // size
        free += sum(n // size for n in regions.values() if n >= k)
        for lvl, count in vc.unbound.get(chain, {}).items():
            if count <= 0:
                continue
            per_cell = (
                info.level_leaves[lvl] // size
                if lvl < info.node_level
                else (info.level_leaves[lvl] // info.node_leaves) * (info.node_leaves // size)
            )
            if sched.placer.choose_physical(vc, info, lvl, min(k, info.node_leaves), True):
                free += count * per_cell
            else:
                reserved += count * per_cell
        if best is None or free > best[0]:
            best = (free, bad, reserved, info, level)
    assert best is not None
    free, bad, reserved, info, level = best
    text = f"{vc.name} has {free} free of the {need} {unit_name(info, level, need)} {what} needs"
    notes = []
    if bad:
        notes.append(f"{bad} more on unhealthy nodes")
    if reserved:
        notes.append(
            f"{reserved} more cannot be bound now: the free physical cells left are unhealthy "
            "or guaranteed to other VCs"
        )
    if notes:
        text += f" ({'; '.join(notes)})"
    elif free >= need:
        text += ", but they do not fit together (a gang stays within one chain, a task on one node)"
    return text
