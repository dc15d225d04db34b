"""What a placement search works with and produces: the task needs of a gang in one chain, the
plan of the leaves it chose (with the victims they imply), and which leaves a search of a given
preemption threshold may take (``usable``: the one definition, for the search and for the text
of why it failed)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from labhive.scheduler.hived.cells import Cell

#: ``threshold`` of a search: None = free GPUs only; p = GPUs of jobs with priority <= p too.
Threshold = int | None

#: A node's preemption level when free GPUs suffice: below every level that preempts.
NO_VICTIMS = -2
#: The level when only opportunistic jobs (priority -1, ``jobs.OPPORTUNISTIC``) are preempted.
OPPORTUNISTIC_ONLY = -1
#: How a free GPU ranks against busy ones: below any job priority, opportunistic included.
FREE_RANK = -100
#: More free GPUs than any node has: where a best-fit scan starts.
UNBOUNDED_FREE = 1 << 62


@dataclass(slots=True)
class TaskNeed:
    role: str
    index: int
    leaves: int


class TaskNeeds(list[TaskNeed]):
    """A unit's task needs in one chain (``sizing.Sizing.needs``), with the leaves they take in all:
    every attempt bounds its search by the least of those over its chains."""

    __slots__ = ("leaves",)

    def __init__(self) -> None:
        super().__init__()
        self.leaves = 0

    def add(self, task: TaskNeed) -> None:
        self.append(task)
        self.leaves += task.leaves


@dataclass(slots=True, init=False)
class Plan:
    chain: str
    placed: list[tuple[TaskNeed, Cell, list[Cell]]]
    bound: list[Cell]
    taken: set[int]  # id() of leaves chosen
    free_taken: dict[Cell, int]  # node -> free leaves chosen
    taken_on: dict[Cell, int]  # node -> leaves chosen
    busy: int  # leaves chosen that a job uses (none: the plan has no victims)

    def __init__(self, chain: str) -> None:
        # (written out: a dataclass's own, with five default factories, cost as much as
        # the rest of a one-task search's set-up)
        self.chain = chain
        self.placed = []
        self.bound = []
        self.taken = set()
        self.free_taken = {}
        self.taken_on = {}
        self.busy = 0

    def add(self, task: TaskNeed, node: Cell, leaves: list[Cell]) -> None:
        self.placed.append((task, node, leaves))
        free = 0
        for leaf in leaves:  # one loop, no generators: this runs once per task
            self.taken.add(id(leaf))
            if leaf.job is None:
                free += 1
        self.free_taken[node] = self.free_taken.get(node, 0) + free
        self.taken_on[node] = self.taken_on.get(node, 0) + len(leaves)
        self.busy += len(leaves) - free

    def add_free(self, task: TaskNeed, node: Cell, leaves: list[Cell]) -> None:
        """``add`` of free GPUs (a free-only search's: none has a job)."""
        self.placed.append((task, node, leaves))
        taken = self.taken
        for leaf in leaves:
            taken.add(id(leaf))
        n = len(leaves)
        self.free_taken[node] = self.free_taken.get(node, 0) + n
        self.taken_on[node] = self.taken_on.get(node, 0) + n

    def victims(self) -> set[str]:
        if not self.busy:
            return set()
        return {leaf.job for _, _, leaves in self.placed for leaf in leaves if leaf.job}


def _is_free(leaf: Cell) -> bool:
    return leaf.bad == 0 and leaf.job is None


def _not_guaranteed(leaf: Cell) -> bool:
    return leaf.bad == 0 and (leaf.job is None or leaf.prio < 0)


def usable(threshold: Threshold) -> Callable[[Cell], bool]:
    """Which leaf cells a search with ``threshold`` may take: healthy, and free or used by a
    job it may preempt. The one definition, for the search and for the record of why it
    failed (``Placer.room``)."""
    if threshold is None:
        return _is_free  # one function, so pick_leaves can tell free-only searches apart
    return lambda leaf: leaf.bad == 0 and (leaf.job is None or leaf.prio <= threshold)


def usable_on(node: Cell, threshold: Threshold) -> int:
    """``usable`` leaves of a whole node, from its counters (a leaf that is busy on an
    unhealthy node counts too: its job is stopped with the node)."""
    count = node.free
    if threshold is not None:
        for p, n in node.prio_count.items():
            if p <= threshold:
                count += n
    return count


def victim_threshold(lower: list[int], oppo_running: bool) -> Threshold:
    """The threshold of a search that may preempt, for a job whose VC runs jobs of the
    priorities ``lower`` below its own: the highest of them, or opportunistic jobs only;
    None when there is nobody to preempt."""
    if not lower and not oppo_running:
        return None
    return max(lower, default=OPPORTUNISTIC_ONLY)
