"""What HiveD's readers (``views``, ``why``) may see of the scheduler and its jobs.

``core.HivedScheduler`` calls these modules and passes itself; they type that argument with the
protocols below instead of importing ``core``, so ``core`` depends on them and not the other way
round (an import circle that tools drew as one knot of four modules). The protocols are read-only
views: the readers compute texts and views, and change nothing. (``admission`` needs none of
this: it reads ``admission.Admission``, numbers of the config.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from labhive.scheduler.core.config import ClusterConfig
    from labhive.scheduler.core.jobs import JobSpec, RoleSpec
    from labhive.scheduler.core.model import TaskPlacement
    from labhive.scheduler.hived.cells import Cell, CellTree
    from labhive.scheduler.hived.cpu_pool import CpuPool
    from labhive.scheduler.hived.fair_line import FairLine
    from labhive.scheduler.hived.fairshare import Ledger
    from labhive.scheduler.hived.queue import VCQueue
    from labhive.scheduler.hived.share_book import ShareBook, ShareHold
    from labhive.scheduler.hived.shortfall import Failure
    from labhive.scheduler.hived.vc import VCs


class HivedJob(Protocol):
    """A job as HiveD holds it (``job.Job``)."""

    @property
    def job_id(self) -> str: ...
    @property
    def spec(self) -> JobSpec: ...
    @property
    def seq(self) -> int: ...
    @property
    def prio(self) -> int: ...
    @property
    def tasks(self) -> Sequence[tuple[RoleSpec, int]]: ...
    @property
    def placed(self) -> Mapping[tuple[str, int], tuple[TaskPlacement, list[Cell]]]: ...
    @property
    def downgraded_by(self) -> str | None: ...
    @property
    def downgraded(self) -> Mapping[tuple[str, int], str]: ...
    @property
    def done(self) -> AbstractSet[tuple[str, int]]: ...
    @property
    def pinned(self) -> str | None: ...
    @property
    def cpu_only(self) -> bool: ...
    @property
    def share(self) -> int: ...
    @property
    def grouped(self) -> bool: ...
    @property
    def vc(self) -> str: ...
    @property
    def waiting_tasks(self) -> list[tuple[RoleSpec, int]]: ...
    @property
    def opportunistic(self) -> bool: ...


J = TypeVar("J", bound=HivedJob)


class WaitingJobs(Protocol):
    """The class queue's waiting jobs as the readers see them (``queueing.ClassQueue``)."""

    @property
    def queues(self) -> Mapping[str, VCQueue]: ...
    @property
    def cpu_waiting(self) -> Sequence[tuple[int, int, str]]: ...


class SharedGpus(Protocol):
    """GPU shares as the readers see them (``shares.Shares``)."""

    @property
    def book(self) -> ShareBook: ...

    def hold(self, vc: str | None, prio: int, /) -> ShareHold | None: ...


class HivedState(Protocol[J]):
    """The scheduler's state the readers look at (``core.HivedScheduler``)."""

    @property
    def config(self) -> ClusterConfig: ...
    @property
    def tree(self) -> CellTree: ...
    @property
    def vcs(self) -> VCs: ...
    @property
    def cpu(self) -> CpuPool: ...
    @property
    def down_reasons(self) -> Mapping[str, str]: ...
    @property
    def _jobs(self) -> Mapping[str, J]: ...
    @property
    def queue(self) -> WaitingJobs: ...
    @property
    def _ledger(self) -> Ledger | None: ...
    @property
    def shares(self) -> SharedGpus: ...

    def fair_position(self, job: J, /) -> int: ...
    def fair_line(self, vc: str, /) -> FairLine: ...

    def failure_of(self, job: J, /) -> Failure: ...
