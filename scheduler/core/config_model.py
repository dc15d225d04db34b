"""The cluster config as the core sees it: SKUs, cell types, physical cells, VCs.

Plain frozen dataclasses, built by ``config.load_cluster_config``; nothing here reads YAML.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from labhive.scheduler.core.errors import UserError


class ConfigError(UserError):
    """The cluster config is wrong; the message names the key and the line."""


@dataclass(frozen=True, slots=True)
class SkuType:
    """What one leaf cell of this type offers (HiveD's ``skuTypes``)."""

    name: str
    gpu: int = 1
    cpu: float = 0.0
    memory_mb: int = 0


@dataclass(frozen=True, slots=True)
class CellType:
    """A cell type; leaf types (GPUs) have no child and level 1."""

    name: str
    child: str | None
    child_number: int
    is_node_level: bool
    level: int

    @property
    def is_leaf(self) -> bool:
        return self.child is None


@dataclass(frozen=True, slots=True, eq=False)
class PhysicalCell:
    """One cell of the physical forest, fully inferred (addresses, children, node, GPU)."""

    cell_type: str
    address: str
    level: int
    chain: str
    path: tuple[str, ...]  # addresses from the top-level cell down to this one
    children: tuple[PhysicalCell, ...] = ()
    node: str | None = None  # the node name, for node-level cells and below
    gpu: int | None = None  # the GPU index, for leaf cells
    pinned_id: str | None = None
    line: int | None = None

    @property
    def id(self) -> str:
        return "/".join(self.path)

    @property
    def leaf_id(self) -> str:
        """How a leaf cell is named outside the core: ``node/gpu``."""
        return f"{self.node}/{self.gpu}"

    def walk(self) -> Iterator[PhysicalCell]:
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass(frozen=True, slots=True)
class VirtualCellSpec:
    """``cellNumber`` cells of the type at the end of the dotted ``cellType`` path."""

    path: tuple[str, ...]
    number: int
    line: int | None = None

    @property
    def chain(self) -> str:
        return self.path[0]

    @property
    def cell_type(self) -> str:
        return self.path[-1]


@dataclass(frozen=True, slots=True)
class VCSpec:
    name: str
    cells: tuple[VirtualCellSpec, ...]
    pinned: tuple[str, ...] = ()
    line: int | None = None
    #: ``timeLimit: {default: 2h, max: 1d}``: the limit of jobs that declare none, the most any
    #: job may declare (seconds; time_limits.py applies them).
    time_limit_default: float | None = None
    time_limit_max: float | None = None
    #: ``disk: {outputCap: 10M, workQuota: 2G}``: the local executor's limits for this VC's
    #: tasks, in bytes; None: the service's (``--output-cap``, ``--work-quota``); 0: off.
    output_cap: int | None = None
    work_quota: int | None = None
    #: ``userLimits: {maxRunningGpus: 4, maxWaitingJobs: 100}``: what one user may hold in this
    #: VC at once (GPUs of running jobs; jobs waiting). None: no cap.
    user_max_running_gpus: int | None = None
    user_max_waiting_jobs: int | None = None


#: How GPU shares may be enforced (``gpuSharing``).
SHARING_MODES = ("timeslice", "mps")


@dataclass(frozen=True, slots=True)
class GpuSharing:
    """``gpuSharing``: how a GPU's shares are enforced on hardware. ``timeslice`` (the default):
    not at all, every sharer sees the whole GPU and CUDA time-slices them; ``mps``: each share
    runs as a CUDA MPS client with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and, when
    ``gpu_memory_mb`` (the GPUs' memory) is given, ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` set to
    its part of it (``executors/gpu_share_env.py``; the admin runs the MPS control daemon)."""

    mode: str = "timeslice"
    gpu_memory_mb: int | None = None


@dataclass(frozen=True, slots=True)
class FairShare:
    """``fairShare: {halfLife: 7d, reserveAfter: 1h, shares: {alice: 2}}``: inside each VC and
    priority, waiting jobs go in order of their user's recent GPU-seconds in that VC (decayed
    by 2^(-dt/halfLife), as Slurm's fair-share factor) divided by the user's share (1 unless
    ``shares`` names the user), then submission. A job that has waited ``reserveAfter``
    (None, the default: never) holds its VC and priority for itself until it starts
    (``hived.turns``; it costs utilization: docs/policies.md)."""

    half_life: float  # seconds
    reserve_after: float | None = None
    shares: dict[str, float] = field(default_factory=dict)

    def share(self, user: str) -> float:
        return self.shares.get(user, 1.0)


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A node as drivers see it; a node in two chains appears once per chain."""

    name: str
    sku: str | None
    gpus: tuple[int, ...]
    chain: str
    path: tuple[str, ...]  # addresses of the node's ancestor cells, top first


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    skus: dict[str, SkuType]
    cell_types: dict[str, CellType]
    physical_cells: tuple[PhysicalCell, ...]
    vcs: dict[str, VCSpec]
    virtual: bool = False
    source: str = ""
    pinned: dict[str, PhysicalCell] = field(default_factory=dict)
    # CPUs and memory (MB) of nodes, for tasks that ask for no GPU on a cluster without
    # skuTypes (``cpu_pool.py``); a node not named here gets ``cpu_pool.default_capacity``.
    node_resources: dict[str, tuple[float, int]] = field(default_factory=dict)
    #: Fair share between the users of each VC (``fairShare``); None: first come, first served.
    fair_share: FairShare | None = None
    #: How GPU shares (``--gpus 0.25``) are enforced (``gpuSharing``); default: not at all.
    gpu_sharing: GpuSharing = field(default_factory=GpuSharing)

    @property
    def per_user(self) -> bool:
        """Whether the scheduler tells users apart: fair share, or a VC caps what one holds."""
        return self.fair_share is not None or any(
            v.user_max_running_gpus is not None or v.user_max_waiting_jobs is not None
            for v in self.vcs.values()
        )

    def nodes(self) -> list[NodeSpec]:
        out = []
        for top in self.physical_cells:
            for cell in top.walk():
                if self.cell_types[cell.cell_type].is_node_level:
                    gpus = tuple(sorted(c.gpu for c in cell.walk() if c.gpu is not None))
                    leaf = next(c.cell_type for c in cell.walk() if c.gpu is not None)
                    out.append(NodeSpec(cell.node or "", leaf, gpus, cell.chain, cell.path[:-1]))
        return out

    @property
    def leaf_types(self) -> set[str]:
        return {t.name for t in self.cell_types.values() if t.is_leaf}

    def sku(self, leaf_type: str) -> SkuType:
        """The SKU of a leaf type; without ``skuTypes`` a leaf is one GPU and nothing else."""
        return self.skus.get(leaf_type) or SkuType(leaf_type)

    def total_gpus(self) -> int:
        return sum(len(n.gpus) for n in self.nodes())
