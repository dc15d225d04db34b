"""Why a search for a job's cells failed, as a small frozen record (HiveD's scheduler likewise
returns its failure reason from the search itself): the records, and the sums over a VC's quota
they are judged by. ``failures`` builds them when a search fails; ``why`` turns them into text.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from labhive.scheduler.hived.cells import Chain


@dataclass(frozen=True, slots=True)
class NoVC:
    """The job's VC is gone (a reconfiguration dropped it)."""


@dataclass(frozen=True, slots=True)
class NoCells:
    """The job's VC has no cells of the kind it asks for."""


@dataclass(frozen=True, slots=True)
class GangTooLarge:
    """A gang larger than the largest of its VC's chains (a gang stays within one chain)."""

    size: int  # the gang's leaves in its smallest form
    gpus: bool  # whether those leaves are GPUs (else leaf cells sized by CPU or memory)
    most: int  # the leaves of the VC's largest chain
    leaf_type: str


@dataclass(frozen=True, slots=True)
class TaskTooLarge:
    """A task larger than every one of its VC's cells (a task lies inside one)."""

    leaves: int
    gpus: bool
    largest: int  # the most leaves one task may take in those cells


@dataclass(frozen=True, slots=True)
class TooManyTasks:
    """A gang with more tasks than its VC's cells hold one by one."""

    tasks: int
    leaves: int  # per task
    gpus: bool
    slots: int  # tasks of this size the cells hold


@dataclass(frozen=True, slots=True)
class ChainRoom:
    """What one chain offered the failed search, in tasks of the job's (largest) size."""

    chain: str
    leaves: int  # the size: leaf cells of the largest waiting task
    level: int  # the cell level whose cells name that size (``unit_level``)
    usable: int  # tasks its cells hold now: bound ones, and unbound ones it could bind
    unhealthy: int  # more tasks on unhealthy nodes of its bound cells
    unbindable: int  # more in unbound cells that no free physical cell can take now


@dataclass(frozen=True, slots=True)
class NoRoom:
    """Not enough room now: per chain tried, what it held, and the tasks the unit needs (the
    gang's, or the next task of an incremental job)."""

    need: int
    chains: tuple[ChainRoom, ...]

    @property
    def best(self) -> ChainRoom:
        """The chain that came closest (the first of those that hold the most)."""
        return max(self.chains, key=lambda c: c.usable)  # max keeps the first of equals


#: Why a search failed.
Failure = NoVC | NoCells | GangTooLarge | TaskTooLarge | TooManyTasks | NoRoom


@dataclass(frozen=True, slots=True)
class Failed:
    """A class's last failure record: for which job (its head then) and how many of its
    tasks were waiting, and ``CellTree.moves`` when it was made (the cells it describes)."""

    record: Failure
    moves: int
    job_id: str
    waiting: int


@lru_cache(maxsize=256)
def unit_level(info: Chain, leaves: int) -> int:
    """The level whose cells name a task's size: the largest at or below the node level that
    is as small as the smallest cell holding ``leaves`` GPUs (cached: asked on every failed
    search)."""
    smallest = next(
        (lvl for lvl in sorted(info.level_leaves) if info.level_leaves[lvl] >= leaves),
        info.node_level,
    )
    size = info.level_leaves[smallest]
    same = [lvl for lvl in info.level_leaves if info.level_leaves[lvl] == size]
    return max(lvl for lvl in same if lvl <= max(info.node_level, smallest))


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
