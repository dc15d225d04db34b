"""What one of HiveD's parts asks of another it does not import: typed promises instead of the
``raise NotImplementedError`` stubs the mixins once shared.

``core.HivedScheduler`` holds its parts (``attempt``, ``preemption``, ``health``, ``adoption``);
a part's module imports ``base`` for the scheduler's state, so ``base`` cannot import the parts
back (an import circle, which ``tests/test_import_circles.py`` refuses). It declares them by
these protocols, and each part keeps its promise structurally (mypy checks the assignment in
``core``).
"""

from __future__ import annotations

from typing import Protocol

from labhive.scheduler.core.jobs import RoleSpec
from labhive.scheduler.core.model import Decision
from labhive.scheduler.hived.cells import CellTree
from labhive.scheduler.hived.job import Job
from labhive.scheduler.hived.placement import Placer
from labhive.scheduler.hived.plan import Plan
from labhive.scheduler.hived.queue import JobClass
from labhive.scheduler.hived.vc import VCs


class Placing(Protocol):
    """``attempt.Attempt`` as the queue, GPU shares, preemption and failure records see it."""

    #: The search over the current config's cells (lazy preemption undoes its bindings).
    placer: Placer

    def load(self, tree: CellTree, vcs: VCs) -> None:
        """Search the cells of a (new) config (``base._load``)."""
        ...

    def place(
        self,
        job: Job,
        out: list[Decision],
        since: tuple[int, bool] | None = None,
        cls: JobClass | None = None,
    ) -> None:
        """Place what of the job fits now, unit by unit, each plan carried out (``out``)."""
        ...

    def find(
        self,
        job: Job,
        unit: list[tuple[RoleSpec, int]],
        since: tuple[int, bool] | None = None,
        cls: JobClass | None = None,
    ) -> Plan | None:
        """Search cells for one unit of the job; change nothing but the plan's bindings."""
        ...


class Committing(Protocol):
    """``preempt.Preemption`` as GPU shares see it."""

    def commit(self, job: Job, plan: Plan, out: list[Decision]) -> bool:
        """Carry ``plan`` out: preempt or downgrade its victims, start ``job``; False when lazy
        preemption's second search found no room after all."""
        ...
