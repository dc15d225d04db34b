"""Events in, decisions out: the contract between a scheduling policy and the drivers.

Every policy (HiveD's algorithm in ``hived/core.py``, FIFO, SJF, DRF, capacity, LAS) implements
``Scheduler``; every driver (scenario replay, trace simulator, job service with its executors)
feeds it ``Event`` objects and applies the ``Decision`` objects it returns. A policy does no I/O
and reads no clock: time arrives inside the events, so a replay is deterministic and the same
policy serves a simulation and a live cluster.

A job lives in a policy only while it is WAITING or RUNNING; the driver owns the rest of the
lifecycle (retries, terminal states, persistence).

Events, decisions and views name a job by ``JobId``: ``str`` unless said otherwise, as every
policy, the simulator and replay take it; the job service's own ``int`` ids cross over in
``service/policy_port.py``, which types them ``Submit[int]``, ``Start[int]``, ``JobView[int]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Literal, Protocol

from labhive.scheduler.core.jobs import JobSpec

if TYPE_CHECKING:
    from typing_extensions import TypeVar

    from labhive.scheduler.core.config import ClusterConfig

    #: A job's id: ``str`` (the default) in the core, ``int`` in the service (see above).
    JobId = TypeVar("JobId", default=str)
else:  # the default matters to type checkers only (typing's TypeVar takes none before 3.13)
    from typing import TypeVar

    JobId = TypeVar("JobId")


class SpecRejected(ValueError):
    """A job that can never run on this cluster; the message says what would fit."""


@dataclass(frozen=True, slots=True)
class TaskPlacement:
    """Where one task runs: a node and the GPU indices (leaf cells) on it."""

    role: str
    index: int
    node: str
    gpus: tuple[int, ...]
    cells: tuple[str, ...] = ()  # leaf cell ids, as the config addresses them


# ---- events (driver -> policy) -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Submit(Generic[JobId]):
    job_id: JobId
    spec: JobSpec
    time: float = 0.0
    #: The driver has already checked ``spec`` against this same cluster (the service's
    #: intake, with ``policies.admission``): the policy keeps it without checking it again.
    admitted: bool = False


@dataclass(frozen=True, slots=True)
class Finish(Generic[JobId]):
    """The job's attempt ended (success, failure without retry, or done): free its cells."""

    job_id: JobId
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class Requeue(Generic[JobId]):
    """The attempt ended and the job will retry: free its cells, wait in its original place."""

    job_id: JobId
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class Cancel(Generic[JobId]):
    """Remove the job, waiting or running."""

    job_id: JobId
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class NodeDown:
    node: str
    time: float = 0.0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class NodeUp:
    node: str
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class Reconfigure:
    """Load a changed cluster; running jobs keep their cells where those still exist."""

    config: ClusterConfig
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed; policies that reprioritise over time (LAS) act on it."""

    time: float


@dataclass(frozen=True, slots=True)
class Adopt(Generic[JobId]):
    """Restore a job that is already running on these cells (after a driver restart)."""

    job_id: JobId
    spec: JobSpec
    tasks: tuple[TaskPlacement, ...]
    opportunistic: bool = False
    time: float = 0.0
    #: Tasks downgraded to opportunistic on their own, as (role, index, by whom): HiveD adopts
    #: them outside their VC's cells (lazy preemption left them there).
    downgraded: tuple[tuple[str, int, str], ...] = ()
    #: Tasks of the attempt that ended on their own, as (role, index): not placed again.
    ended: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class TasksEnded(Generic[JobId]):
    """Some tasks of a running job exited on their own while its attempt goes on (the others
    still run, or wait to be placed): they are done for this attempt, so HiveD frees their
    cells, as it frees a completed pod's, and does not place them again. (Holding them until
    the job ended left an incremental job larger than its VC waiting for ever for its next
    task, on cells its own ended tasks held.) Queue policies keep a job's GPUs until it ends."""

    job_id: JobId
    tasks: tuple[tuple[str, int], ...]  # (role, index)
    time: float = 0.0


Event = (
    Submit | Finish | Requeue | Cancel | NodeDown | NodeUp | Reconfigure | Tick | Adopt | TasksEnded
)


# ---- decisions (policy -> driver) ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start(Generic[JobId]):
    """Start these tasks of the job (all of a gang at once; some of an incremental job)."""

    job_id: JobId
    tasks: tuple[TaskPlacement, ...]
    opportunistic: bool = False


@dataclass(frozen=True, slots=True)
class Preempt(Generic[JobId]):
    """Stop every task of the job; it is WAITING again (no retry spent)."""

    job_id: JobId
    by: str
    reason: str


@dataclass(frozen=True, slots=True)
class Downgrade(Generic[JobId]):
    """Lazy preemption: the job keeps running, now as opportunistic (only ``tasks`` of it
    when given: a task of an incremental job, or an affinity group, is its own unit)."""

    job_id: JobId
    by: str
    reason: str
    tasks: tuple[TaskPlacement, ...] = ()


@dataclass(frozen=True, slots=True)
class StopTasks(Generic[JobId]):
    """Stop only these tasks of a running job; the others keep running and the job stays
    RUNNING. HiveD's unit of preemption and node failure is a task of an incremental job
    (``gang: false``) or one affinity group, not the job: the stopped tasks wait to be placed
    again as their own group (no retry spent). ``by`` is the preemptor; "" for a node that
    went down."""

    job_id: JobId
    tasks: tuple[TaskPlacement, ...]
    reason: str
    by: str = ""


@dataclass(frozen=True, slots=True)
class Stop(Generic[JobId]):
    """Stop these tasks (a node went down under them); the job is WAITING again."""

    job_id: JobId
    reason: str


Decision = Start | Preempt | Downgrade | Stop | StopTasks


# ---- views (what a driver shows) -----------------------------------------------------------

#: What a job view shows of a job in the scheduler (not the lifecycle ``states.JobState``).
ViewState = Literal["WAITING", "RUNNING"]


@dataclass(frozen=True, slots=True)
class JobView(Generic[JobId]):
    job_id: JobId
    name: str
    vc: str
    priority: int
    state: ViewState
    tasks: tuple[TaskPlacement, ...] = ()
    opportunistic: bool = False
    queue_position: int | None = None  # 1-based, within the job's VC; None while running
    queue_length: int | None = None
    why: str | None = None  # why it waits (or runs opportunistically)
    #: Tasks running opportunistic on their own (lazy preemption of one unit), as an ``Adopt``
    #: takes them: (role, index, by whom).
    downgraded: tuple[tuple[str, int, str], ...] = ()
    #: Tasks of the attempt that ended on their own (``TasksEnded``), as an ``Adopt`` takes them.
    ended: tuple[tuple[str, int], ...] = ()
    #: A GPU share's thousandths of its one GPU (``jobs.RoleSpec.share_milli``); 0: whole GPUs.
    share_milli: int = 0


@dataclass(frozen=True, slots=True)
class VCView:
    name: str
    guaranteed_gpus: int
    #: GPU counts: a GPU share counts as its fraction, an ``int`` without shares (``int | float``,
    #: not ``float``: the compiled modules would read an ``int`` as a ``float``, 8 as 8.0)
    used_gpus: int | float
    opportunistic_gpus: int | float
    waiting: int


@dataclass(frozen=True, slots=True)
class NodeView(Generic[JobId]):
    name: str
    sku: str | None
    gpus: tuple[int, ...]
    healthy: bool = True
    used: dict[int, JobId] = field(default_factory=dict)  # GPU index -> job id
    reason: str = ""  # why it is down: the NodeDown's reason, "down" when it gave none
    # Its CPUs and memory, and how much tasks that take no GPU cell hold (HiveD; 0 unknown).
    cpu: float = 0.0
    cpu_used: float = 0.0
    memory_mb: int = 0
    memory_used_mb: int = 0
    #: GPU index -> job id -> its share in thousandths, for GPUs that host shares (``used``
    #: names one of the sharers; HiveD's ``shares``).
    shares: dict[int, dict[JobId, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClusterView(Generic[JobId]):
    nodes: tuple[NodeView[JobId], ...]
    vcs: dict[str, VCView]
    virtual: bool = False


class Scheduler(Protocol):
    """What every policy offers its drivers."""

    name: str

    def check(self, spec: JobSpec) -> None:
        """Raise ``SpecRejected`` if the job can never run on this cluster."""

    def handle(self, event: Event) -> list[Decision]:
        """Apply one event and return what the driver must do, in order."""

    def job(self, job_id: str) -> JobView | None:
        """The job's state, queue position and why-text; None once it left the policy."""

    def jobs(self) -> list[JobView]:
        """Every job the policy holds, running first, then waiting in queue order."""

    def cluster(self) -> ClusterView:
        """Nodes, GPUs, health and per-VC usage."""

    def next_wakeup(self) -> float | None:
        """The virtual time at which the policy wants a ``Tick``, if any."""


def handle_together(scheduler: Scheduler, events: list[Event]) -> list[Decision]:
    """The events of one virtual instant, then the decisions. A policy that offers
    ``handle_batch(events)`` applies them all before it decides (so three jobs submitted in the
    same second are ordered by the policy, not by the file); any other gets them one by one."""
    batch = getattr(scheduler, "handle_batch", None)
    if batch is not None and len(events) > 1:
        return list(batch(events))
    out: list[Decision] = []
    for event in events:
        out.extend(scheduler.handle(event))
    return out
