"""A job as HiveD holds it, and how many leaf cells one of its tasks takes.

``Job`` is the scheduler's own mutable record: the job's tasks, where the placed ones run and on
which leaf cells, its effective priority (``-1`` while opportunistic, by spec or downgraded), the
class it waits in. Every part of the scheduler changes it; the readers (``why``, ``views``) see it
read-only, through ``state.HivedJob``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass

from labhive.scheduler.core.config import ClusterConfig, SkuType
from labhive.scheduler.core.jobs import OPPORTUNISTIC, JobSpec, RoleSpec
from labhive.scheduler.core.model import TaskPlacement
from labhive.scheduler.hived.cells import Cell
from labhive.scheduler.hived.placement import TaskNeeds


@dataclass(slots=True, eq=False, init=False)
class Job:
    job_id: str
    spec: JobSpec
    seq: int
    prio: int  # effective: -1 while opportunistic (by spec or downgraded)
    tasks: list[tuple[RoleSpec, int]]
    vc: str  # ``spec.vc``, read on every attempt: a field, not a property
    placed: dict[tuple[str, int], tuple[TaskPlacement, list[Cell]]]
    downgraded_by: str | None
    queued_key: Hashable | None  # the class it waits in, if any
    in_order: bool  # listed in its VC's queue order
    pinned: str | None  # the pinned cell its roles name, if any
    needs: dict[str, TaskNeeds] | None  # per chain, while nothing is placed
    cpu_only: bool  # asks for no GPU on a cluster without skuTypes (``cpu_pool``)
    share: int  # its one task's share of a GPU in thousandths; 0: whole GPUs (``shares``)
    grouped: bool  # a gang of several affinity groups, each placed whole and apart
    # Tasks downgraded to opportunistic on their own (lazy preemption of one unit) -> by whom.
    downgraded: dict[tuple[str, int], str]
    # Tasks of this attempt that ended on their own (``TasksEnded``): never placed again in it.
    done: set[tuple[str, int]]

    def __init__(
        self,
        job_id: str,
        spec: JobSpec,
        seq: int,
        prio: int,
        tasks: list[tuple[RoleSpec, int]],
        vc: str,
    ) -> None:
        # (written out: one per job, and a dataclass's own, with its default factories,
        # cost twice this)
        self.job_id = job_id
        self.spec = spec
        self.seq = seq
        self.prio = prio
        self.tasks = tasks
        self.vc = vc
        self.placed = {}
        self.downgraded_by = None
        self.queued_key = None
        self.in_order = False
        self.pinned = None
        self.needs = None
        self.cpu_only = False
        self.share = 0
        self.grouped = False
        self.downgraded = {}
        self.done = set()

    @property
    def waiting_tasks(self) -> list[tuple[RoleSpec, int]]:
        if not self.placed and not self.done:
            return self.tasks
        placed, done = self.placed, self.done
        return [
            (r, i) for r, i in self.tasks if (r.name, i) not in placed and (r.name, i) not in done
        ]

    @property
    def all_placed(self) -> bool:
        """No task waits (``not waiting_tasks``, without building the list: a placed or done
        task's key is its role's name and index, every task has its own, and a done task is
        never placed)."""
        return len(self.placed) + len(self.done) >= len(self.tasks)

    @property
    def opportunistic(self) -> bool:
        return self.prio == OPPORTUNISTIC


def leaves_needed(role: RoleSpec, config: ClusterConfig, leaf_type: str) -> int:
    """Leaf cells one task of ``role`` takes on ``leaf_type``: the most any resource needs."""
    return leaves_on(role, config.sku(leaf_type))


def leaves_on(role: RoleSpec, sku: SkuType) -> int:
    """Leaf cells one task of ``role`` takes where one leaf cell offers ``sku``."""
    need = math.ceil(role.gpu / sku.gpu)
    if sku.cpu > 0:
        need = max(need, math.ceil(role.cpu / sku.cpu))
    if sku.memory_mb > 0:
        need = max(need, math.ceil(role.memory_mb / sku.memory_mb))
    return max(need, 1)
