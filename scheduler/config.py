"""HiveD's cluster config, loaded verbatim: cell types, physical cells and virtual clusters.

An admin's existing ``physicalCluster`` / ``virtualClusters`` config loads unchanged, with or
without OpenPAI's ``hivedscheduler: config: |`` wrapper, and every problem is reported with the
key and the line it is about. What HiveD infers (omitted ``cellAddress``, ``cellChildren: null``,
default GPU indices) is inferred here too, so the core always sees the complete cell forest.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labhive.scheduler.buddy import first_short_level
from labhive.scheduler.errors import UserError
from labhive.scheduler.yamlines import (
    LineList,
    YamlSyntaxError,
    line_of,
    load_yaml,
    read_text,
)


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


# ---- loading ---------------------------------------------------------------------------------

TOP_KEYS = {
    "physicalCluster",
    "virtualClusters",
    "kubeApiServerAddress",
    "kubeConfigFilePath",
    "webServerAddress",
    "waitingPodSchedulingBlockMilliSec",
    "fairShare",  # LabHive's: fair share between a VC's users (``FairShare``)
    "gpuSharing",  # LabHive's: how GPU shares are enforced (``GpuSharing``)
}
#: The most leaf cells (GPUs) a config may define, and the most cells of all levels: a bound
#: far above any real cluster (the largest traces have a few thousand GPUs) that keeps a typo
#: such as ``childCellNumber: 100000000`` from building cells until memory runs out.
MAX_LEAF_CELLS = 1_000_000
MAX_CELLS = 2_000_000
#: Cell types on the way from a top-level cell down to a GPU.
MAX_CELL_LEVELS = 32
_QUANTITY = re.compile(r"^\s*([0-9.]+)\s*([KMGTPE]i?|[kmgtpe])?\s*$")
_UNIT = {
    "": 1,
    "k": 1e3,
    "K": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


class _Ctx:
    """Where we are, so every error can say FILE line N: key.path: problem."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def error(self, key: str, line: int | None, problem: str) -> ConfigError:
        where = self.origin
        if line is not None:
            where = f"{where} line {line}" if where else f"line {line}"
        prefix = f"{where}: " if where else ""
        return ConfigError(f"{prefix}{key}: {problem}")


def load_cluster_config(source: str | Path | Mapping[str, Any]) -> ClusterConfig:
    """A cluster from a file path, YAML text or an already parsed mapping."""
    if isinstance(source, Mapping):
        return _from_mapping(source, _Ctx(""))
    text, origin = _read(source)
    try:
        data = load_yaml(text, origin=origin)
    except YamlSyntaxError as err:
        raise ConfigError(str(err)) from None
    return _from_mapping(data, _Ctx(origin), text=text)


def _read(source: str | Path) -> tuple[str, str]:
    if isinstance(source, Path) or (
        "\n" not in source and (source.endswith((".yaml", ".yml")) or Path(source).is_file())
    ):
        path = Path(source)
        try:
            return read_text(path, "cluster config"), str(path)
        except UserError as err:
            raise ConfigError(str(err)) from None
    return str(source), ""


def _from_mapping(data: Any, ctx: _Ctx, text: str | None = None) -> ClusterConfig:
    if not isinstance(data, Mapping):
        raise ctx.error("(top level)", line_of(data), "a cluster config must be a YAML mapping")
    if "hivedscheduler" in data:
        wrapper = data["hivedscheduler"]
        data = _unwrap(data, ctx, text)
        if not isinstance(data, Mapping):
            raise ctx.error(
                "hivedscheduler.config",
                line_of(wrapper, "config"),
                "must hold a HiveD config (a mapping)",
            )
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown:
        raise ctx.error(
            str(unknown[0]),
            line_of(data, unknown[0]),
            f"unknown key; a HiveD config has {', '.join(sorted(TOP_KEYS))}",
        )
    pc = _need(data, "physicalCluster", "", ctx, Mapping)
    _no_unknown(pc, {"skuTypes", "cellTypes", "physicalCells"}, "physicalCluster", ctx)
    skus = _skus(pc.get("skuTypes") or {}, ctx)
    cell_types = _cell_types(_need(pc, "cellTypes", "physicalCluster", ctx, Mapping), ctx)
    raw_cells = _need(pc, "physicalCells", "physicalCluster", ctx, list)
    cells, pinned = _physical_cells(raw_cells, cell_types, ctx)
    vcs = _vcs(_need(data, "virtualClusters", "", ctx, Mapping), cell_types, cells, pinned, ctx)
    _check_fits(vcs, cell_types, cells, pinned, ctx, data.get("virtualClusters"))
    fair = _fair_share(data, ctx)
    return ClusterConfig(
        skus,
        cell_types,
        tuple(cells),
        vcs,
        source=ctx.origin,
        pinned=pinned,
        fair_share=fair,
        gpu_sharing=_gpu_sharing(data, ctx),
    )


def _unwrap(data: Mapping[str, Any], ctx: _Ctx, text: str | None) -> Any:
    """OpenPAI's service-configuration.yaml: ``hivedscheduler: config: |`` holds the config."""
    wrapper = data["hivedscheduler"]
    if not isinstance(wrapper, Mapping) or "config" not in wrapper:
        raise ctx.error(
            "hivedscheduler", line_of(data, "hivedscheduler"), "expected a 'config' key under it"
        )
    inner = wrapper["config"]
    if isinstance(inner, Mapping):
        return inner
    if not isinstance(inner, str):
        raise ctx.error(
            "hivedscheduler.config", line_of(wrapper, "config"), "expected the HiveD config text"
        )
    offset = line_of(wrapper, "config") or 0  # a block scalar starts on the line after its key
    try:
        return load_yaml(inner, origin=ctx.origin, offset=offset)
    except YamlSyntaxError as err:
        raise ConfigError(str(err)) from None


def _need(data: Mapping[str, Any], key: str, parent: str, ctx: _Ctx, kind: type) -> Any:
    path = f"{parent}.{key}" if parent else key
    if key not in data or data[key] is None:
        raise ctx.error(path, line_of(data), "is required")
    value = data[key]
    if not isinstance(value, kind):
        want = "a mapping" if kind is Mapping else "a list"
        raise ctx.error(path, line_of(data, key), f"must be {want}")
    return value


def _no_unknown(data: Mapping[str, Any], allowed: set[str], path: str, ctx: _Ctx) -> None:
    for key in data:
        if key not in allowed:
            raise ctx.error(
                f"{path}.{key}",
                line_of(data, key),
                f"unknown key; allowed here: {', '.join(sorted(allowed))}",
            )


def _int(value: Any, path: str, line: int | None, ctx: _Ctx, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ctx.error(path, line, f"must be a whole number >= {minimum}, got {value!r}")
    return value


def memory_mb(value: Any) -> int | None:
    """A Kubernetes quantity ('4096Mi', '8G', 1024) in MiB; None when it is not one.

    A bare number is taken as MiB, as OpenPAI's ``memoryMB`` and most configs mean it.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value) if value >= 0 else None
    match = _QUANTITY.match(str(value))
    if not match:
        return None
    number, unit = float(match.group(1)), match.group(2) or ""
    if not unit:
        return int(number)
    return math.ceil(number * _UNIT[unit] / 2**20)


def _skus(raw: Any, ctx: _Ctx) -> dict[str, SkuType]:
    if not isinstance(raw, Mapping):
        raise ctx.error("physicalCluster.skuTypes", line_of(raw), "must be a mapping")
    out = {}
    for name, spec in raw.items():
        path = f"physicalCluster.skuTypes.{name}"
        if not isinstance(spec, Mapping):
            raise ctx.error(path, line_of(raw, name), "must be a mapping of gpu, cpu, memory")
        _no_unknown(spec, {"gpu", "cpu", "memory"}, path, ctx)
        gpu = _int(spec.get("gpu", 1), f"{path}.gpu", line_of(spec, "gpu"), ctx, 1)
        cpu = spec.get("cpu", 0)
        if isinstance(cpu, bool) or not isinstance(cpu, (int, float)) or cpu < 0:
            raise ctx.error(f"{path}.cpu", line_of(spec, "cpu"), f"must be a number, got {cpu!r}")
        mem = memory_mb(spec.get("memory", 0))
        if mem is None:
            raise ctx.error(
                f"{path}.memory",
                line_of(spec, "memory"),
                f"must be a quantity such as 4096Mi or 8Gi, got {spec.get('memory')!r}",
            )
        out[str(name)] = SkuType(str(name), gpu, float(cpu), mem)
    return out


def _cell_types(raw: Mapping[str, Any], ctx: _Ctx) -> dict[str, CellType]:
    specs: dict[str, tuple[str, int, bool]] = {}
    for name, spec in raw.items():
        path = f"physicalCluster.cellTypes.{name}"
        if not isinstance(spec, Mapping):
            raise ctx.error(path, line_of(raw, name), "must be a mapping")
        _no_unknown(spec, {"childCellType", "childCellNumber", "isNodeLevel"}, path, ctx)
        child = spec.get("childCellType")
        if not isinstance(child, str) or not child:
            raise ctx.error(f"{path}.childCellType", line_of(spec), "is required (a cell type)")
        number = _int(
            spec.get("childCellNumber"),
            f"{path}.childCellNumber",
            line_of(spec, "childCellNumber"),
            ctx,
            1,
        )
        node_level = spec.get("isNodeLevel", False)
        if not isinstance(node_level, bool):
            raise ctx.error(f"{path}.isNodeLevel", line_of(spec, "isNodeLevel"), "true or false")
        specs[str(name)] = (child, number, node_level)
    out: dict[str, CellType] = {}

    def level(name: str, seen: tuple[str, ...]) -> int:
        if name in out:
            return out[name].level
        if name not in specs:
            out[name] = CellType(name, None, 0, False, 1)
            return 1
        if len(seen) >= MAX_CELL_LEVELS:
            raise ctx.error(
                f"physicalCluster.cellTypes.{seen[0]}",
                line_of(raw, seen[0]),
                f"more than {MAX_CELL_LEVELS} cell types on the way down to a GPU, "
                "the most LabHive reads",
            )
        if name in seen:
            cycle = " -> ".join((*seen[seen.index(name) :], name))
            raise ctx.error(
                f"physicalCluster.cellTypes.{name}",
                line_of(raw, name),
                f"cell types form a cycle ({cycle}); each childCellType must lead down to a GPU",
            )
        child, number, node_level = specs[name]
        lvl = level(child, (*seen, name)) + 1
        out[name] = CellType(name, child, number, node_level, lvl)
        return lvl

    for name in specs:
        level(name, ())
    return out


class _CellBuilder:
    """Turns ``physicalCells`` into complete trees, inferring what HiveD infers."""

    def __init__(self, types: dict[str, CellType], ctx: _Ctx) -> None:
        self.types = types
        self.ctx = ctx
        self.pinned: dict[str, PhysicalCell] = {}
        self.leaves: dict[str, str] = {}
        self.chain = ""

    def chain_has_one_node_level(self, top: str, key: str, line: int | None) -> None:
        name: str | None = top
        count = 0
        while name is not None:
            count += self.types[name].is_node_level
            name = self.types[name].child
        if count != 1:
            raise self.ctx.error(
                key,
                line,
                f"cell type {top} has {count} node-level types below it; "
                "exactly one cell type on its way down to a GPU needs isNodeLevel: true",
            )

    def build(
        self,
        raw: Any,
        ctype: CellType,
        default_address: str,
        parent_path: tuple[str, ...],
        node: str | None,
        counters: dict[Any, int],
        key: str,
        line: int | None,
    ) -> PhysicalCell:
        raw = raw if raw is not None else {}
        if not isinstance(raw, Mapping):
            raise self.ctx.error(key, line, "must be a mapping (cellType, cellAddress, ...)")
        _no_unknown(raw, {"cellType", "cellAddress", "pinnedCellId", "cellChildren"}, key, self.ctx)
        line = line_of(raw) or line
        given = raw.get("cellType")
        if given is not None and given != ctype.name:
            raise self.ctx.error(
                f"{key}.cellType",
                line_of(raw, "cellType"),
                f"is {given}, but its parent's childCellType is {ctype.name}",
            )
        address = raw.get("cellAddress")
        if ctype.is_node_level:
            if address is None:
                raise self.ctx.error(
                    f"{key}.cellAddress", line, f"is required for node-level cell {ctype.name}"
                )
            node = str(address)
        address = default_address if address is None else str(address)
        gpu = None
        if ctype.is_leaf:
            if node is None:
                raise self.ctx.error(
                    key, line, f"GPU cell {ctype.name} lies above every node-level cell type"
                )
            try:
                gpu = int(address)
            except ValueError:
                raise self.ctx.error(
                    f"{key}.cellAddress",
                    line_of(raw, "cellAddress") or line,
                    f"a GPU's address must be its index on the node, got {address!r}",
                ) from None
            leaf_id = f"{node}/{gpu}"
            if leaf_id in self.leaves:
                raise self.ctx.error(
                    f"{key}.cellAddress", line, f"GPU {gpu} of node {node} is listed twice"
                )
            self.leaves[leaf_id] = key
        path = (*parent_path, address)
        children = self._children(raw, ctype, path, node, counters, key, line)
        pinned_id = raw.get("pinnedCellId")
        cell = PhysicalCell(
            ctype.name,
            address,
            ctype.level,
            self.chain,
            path,
            children,
            node,
            gpu,
            None if pinned_id is None else str(pinned_id),
            line,
        )
        if pinned_id is not None:
            if str(pinned_id) in self.pinned:
                raise self.ctx.error(
                    f"{key}.pinnedCellId", line, f"{pinned_id} is used by two cells"
                )
            self.pinned[str(pinned_id)] = cell
        return cell

    def _children(
        self,
        raw: Mapping[str, Any],
        ctype: CellType,
        path: tuple[str, ...],
        node: str | None,
        counters: dict[Any, int],
        key: str,
        line: int | None,
    ) -> tuple[PhysicalCell, ...]:
        if ctype.is_leaf:
            if raw.get("cellChildren"):
                raise self.ctx.error(f"{key}.cellChildren", line, "a GPU cell has no children")
            return ()
        child_type = self.types[ctype.child or ""]
        given = raw.get("cellChildren") or []
        if not isinstance(given, list):
            raise self.ctx.error(
                f"{key}.cellChildren", line_of(raw, "cellChildren"), "must be a list"
            )
        if len(given) > ctype.child_number:
            raise self.ctx.error(
                f"{key}.cellChildren",
                line_of(raw, "cellChildren"),
                f"lists {len(given)} cells, but {ctype.name} has childCellNumber "
                f"{ctype.child_number}",
            )
        below_node = node is not None
        children = []
        seen: set[str] = set()
        for i in range(ctype.child_number):
            # Defaults as HiveD infers them: per node below the node level, per top cell above.
            scope = (node, child_type.level) if below_node else (path[0], child_type.level)
            default = str(counters.get(scope, 0))
            counters[scope] = counters.get(scope, 0) + 1
            raw_child = given[i] if i < len(given) else None
            child_line = given.line_of(i) if isinstance(given, LineList) else line
            child = self.build(
                raw_child,
                child_type,
                default,
                path,
                node,
                counters,
                f"{key}.cellChildren[{i}]",
                child_line,
            )
            if child.address in seen:
                raise self.ctx.error(
                    f"{key}.cellChildren[{i}].cellAddress",
                    child_line,
                    f"address {child.address} is used by two sibling cells",
                )
            seen.add(child.address)
            children.append(child)
        return tuple(children)


def _physical_cells(
    raw: list[Any], types: dict[str, CellType], ctx: _Ctx
) -> tuple[list[PhysicalCell], dict[str, PhysicalCell]]:
    builder = _CellBuilder(types, ctx)
    tops = []
    total_leaves = total_cells = 0
    for i, spec in enumerate(raw):  # every top cell is checked and counted before any is built
        key = f"physicalCluster.physicalCells[{i}]"
        line = raw.line_of(i) if isinstance(raw, LineList) else None
        if not isinstance(spec, Mapping):
            raise ctx.error(key, line, "must be a mapping with a cellType")
        name = spec.get("cellType")
        if not isinstance(name, str) or name not in types or types[name].is_leaf:
            known = ", ".join(sorted(t for t in types if not types[t].is_leaf))
            raise ctx.error(
                f"{key}.cellType",
                line_of(spec, "cellType") or line,
                f"unknown cell type {name!r}; defined cellTypes: {known}",
            )
        builder.chain_has_one_node_level(name, f"{key}.cellType", line_of(spec, "cellType"))
        leaves, all_cells = _cell_counts(types, name)
        total_leaves, total_cells = total_leaves + leaves, total_cells + all_cells
        if total_leaves > MAX_LEAF_CELLS or total_cells > MAX_CELLS:
            raise ctx.error(
                f"{key}.cellType",
                line_of(spec, "cellType") or line,
                f"physicalCells up to this one hold {total_leaves:,} GPU cells and "
                f"{total_cells:,} cells in all (childCellNumber multiplied down each chain); "
                f"LabHive reads at most {MAX_LEAF_CELLS:,} GPU cells and {MAX_CELLS:,} cells",
            )
        tops.append((i, spec, name, key, line))
    cells = []
    for i, spec, name, key, line in tops:
        builder.chain = name
        cells.append(builder.build(spec, types[name], str(i), (), None, {}, key, line))
    if not cells:
        raise ctx.error("physicalCluster.physicalCells", line_of(raw), "lists no cells")
    return cells, builder.pinned


def _cell_counts(types: dict[str, CellType], top: str) -> tuple[int, int]:
    """How many leaf cells and how many cells in all a ``top`` cell holds once expanded, counted
    without building them (so an absurd childCellNumber is refused at once)."""
    width, cells = 1, 1
    ctype = types[top]
    while ctype.child is not None:
        width *= ctype.child_number
        cells += width
        ctype = types[ctype.child]
    return width, cells


def _vcs(
    raw: Mapping[str, Any],
    types: dict[str, CellType],
    cells: list[PhysicalCell],
    pinned: dict[str, PhysicalCell],
    ctx: _Ctx,
) -> dict[str, VCSpec]:
    chains = {c.cell_type for c in cells}
    used_pins: dict[str, str] = {}
    out = {}
    for name, spec in raw.items():
        key = f"virtualClusters.{name}"
        if not isinstance(spec, Mapping):
            raise ctx.error(key, line_of(raw, name), "must be a mapping with virtualCells")
        _no_unknown(
            spec, {"virtualCells", "pinnedCells", "timeLimit", "disk", "userLimits"}, key, ctx
        )
        vcells = []
        items = spec.get("virtualCells") or []
        if not isinstance(items, list):
            raise ctx.error(f"{key}.virtualCells", line_of(spec, "virtualCells"), "a list")
        for i, item in enumerate(items):
            ikey = f"{key}.virtualCells[{i}]"
            line = items.line_of(i) if isinstance(items, LineList) else None
            if not isinstance(item, Mapping):
                raise ctx.error(ikey, line, "must be a mapping of cellType and cellNumber")
            _no_unknown(item, {"cellType", "cellNumber"}, ikey, ctx)
            path = _cell_path(item.get("cellType"), types, chains, f"{ikey}.cellType", line, ctx)
            number = _int(item.get("cellNumber"), f"{ikey}.cellNumber", line, ctx, 0)
            vcells.append(VirtualCellSpec(path, number, line))
        pins = []
        pin_items = spec.get("pinnedCells") or []
        for i, item in enumerate(pin_items):
            ikey = f"{key}.pinnedCells[{i}]"
            line = pin_items.line_of(i) if isinstance(pin_items, LineList) else None
            pid = item.get("pinnedCellId") if isinstance(item, Mapping) else None
            if pid is None or str(pid) not in pinned:
                known = ", ".join(sorted(pinned)) or "none"
                raise ctx.error(
                    f"{ikey}.pinnedCellId",
                    line,
                    f"no physical cell has pinnedCellId {pid!r}; defined: {known}",
                )
            if str(pid) in used_pins:
                raise ctx.error(
                    f"{ikey}.pinnedCellId",
                    line,
                    f"{pid} is already pinned to {used_pins[str(pid)]}; a pinned cell has one VC",
                )
            used_pins[str(pid)] = str(name)
            pins.append(str(pid))
        default, most = _vc_time_limit(spec, f"{key}.timeLimit", ctx)
        cap, quota = _vc_disk(spec, f"{key}.disk", ctx)
        running, waiting = _user_limits(spec, f"{key}.userLimits", ctx)
        out[str(name)] = VCSpec(
            str(name), tuple(vcells), tuple(pins), line_of(raw, name), default, most, cap, quota,
            running, waiting,
        )  # fmt: skip
    if not out:
        raise ctx.error("virtualClusters", line_of(raw), "defines no virtual cluster")
    return out


def _vc_disk(spec: Mapping[str, Any], key: str, ctx: _Ctx) -> tuple[int | None, int | None]:
    """A VC's ``disk: {outputCap: 10M, workQuota: 2G}`` (sizes, or off; either may be left
    out): bytes, 0 for off, None for the service's default."""
    from labhive.scheduler.sizes import parse_size

    raw = spec.get("disk")
    if raw is None:
        return None, None
    line = line_of(spec, "disk")
    if not isinstance(raw, Mapping):
        raise ctx.error(key, line, "must be a mapping such as {outputCap: 10M, workQuota: 2G}")
    _no_unknown(raw, {"outputCap", "workQuota"}, key, ctx)
    out: list[int | None] = []
    for part in ("outputCap", "workQuota"):
        value = raw.get(part)
        try:
            out.append(None if value is None else parse_size(str(value)) or 0)
        except ValueError as err:
            raise ctx.error(f"{key}.{part}", line, str(err)) from None
    return out[0], out[1]


def _vc_time_limit(
    spec: Mapping[str, Any], key: str, ctx: _Ctx
) -> tuple[float | None, float | None]:
    """A VC's ``timeLimit: {default: 2h, max: 1d}`` (either may be left out)."""
    from labhive.scheduler.time_limits import parse_time_limit

    raw = spec.get("timeLimit")
    if raw is None:
        return None, None
    line = line_of(spec, "timeLimit")
    if not isinstance(raw, Mapping):
        raise ctx.error(key, line, "must be a mapping such as {default: 2h, max: 1d}")
    _no_unknown(raw, {"default", "max"}, key, ctx)
    out: list[float | None] = []
    for part in ("default", "max"):
        try:
            out.append(None if raw.get(part) is None else parse_time_limit(raw[part]))
        except ValueError as err:
            raise ctx.error(f"{key}.{part}", line, str(err)) from None
    default, most = out
    if default is not None and most is not None and default > most:
        raise ctx.error(key, line, "default must not be longer than max")
    return default, most


def _user_limits(spec: Mapping[str, Any], key: str, ctx: _Ctx) -> tuple[int | None, int | None]:
    """A VC's ``userLimits: {maxRunningGpus: 4, maxWaitingJobs: 100}`` (either may be left out)."""
    raw = spec.get("userLimits")
    if raw is None:
        return None, None
    line = line_of(spec, "userLimits")
    if not isinstance(raw, Mapping):
        raise ctx.error(
            key, line, "must be a mapping such as {maxRunningGpus: 4, maxWaitingJobs: 100}"
        )
    _no_unknown(raw, {"maxRunningGpus", "maxWaitingJobs"}, key, ctx)
    running, waiting = (
        None if raw.get(k) is None else _int(raw[k], f"{key}.{k}", line, ctx, 1)
        for k in ("maxRunningGpus", "maxWaitingJobs")
    )
    return running, waiting


def _gpu_sharing(data: Mapping[str, Any], ctx: _Ctx) -> GpuSharing:
    """The top-level ``gpuSharing: mps`` or ``{mode: mps, gpuMemoryMB: 81920}``; left out or
    ``timeslice``: shares are a scheduling share only (nothing enforces them)."""
    raw = data.get("gpuSharing")
    if raw is None:
        return GpuSharing()
    line = line_of(data, "gpuSharing")
    memory = None
    if isinstance(raw, Mapping):
        _no_unknown(raw, {"mode", "gpuMemoryMB"}, "gpuSharing", ctx)
        if raw.get("gpuMemoryMB") is not None:
            memory = _int(raw["gpuMemoryMB"], "gpuSharing.gpuMemoryMB", line, ctx, 1)
        raw = raw.get("mode", "timeslice")
    if raw not in SHARING_MODES:
        raise ctx.error(
            "gpuSharing",
            line,
            f"must be one of {', '.join(SHARING_MODES)} (or {{mode: mps, gpuMemoryMB: N}}), got "
            f"{raw!r}; timeslice (the default) enforces nothing, mps runs shares as CUDA MPS "
            "clients with a thread percentage and a pinned memory limit each",
        )
    return GpuSharing(str(raw), memory)


def _fair_share(data: Mapping[str, Any], ctx: _Ctx) -> FairShare | None:
    """The top-level ``fairShare: {halfLife: 7d, reserveAfter: 1h, shares: {alice: 2}}``."""
    from labhive.scheduler.time_limits import parse_time_limit

    raw = data.get("fairShare")
    if raw is None:
        return None
    line = line_of(data, "fairShare")
    if not isinstance(raw, Mapping):
        raise ctx.error("fairShare", line, "must be a mapping such as {halfLife: 7d}")
    _no_unknown(raw, {"halfLife", "reserveAfter", "shares"}, "fairShare", ctx)
    times: list[float | None] = []
    for part, default in (("halfLife", 7 * 86400.0), ("reserveAfter", None)):
        value = raw.get(part, default)
        if part == "reserveAfter" and value in (None, "never"):
            times.append(None)
            continue
        try:
            times.append(parse_time_limit(value))
        except ValueError as err:
            raise ctx.error(f"fairShare.{part}", line, str(err)) from None
    shares = raw.get("shares") or {}
    if not isinstance(shares, Mapping):
        raise ctx.error("fairShare.shares", line, "must map user names to weights, e.g. {alice: 2}")
    weights = {}
    for user, weight in shares.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
            raise ctx.error(
                f"fairShare.shares.{user}", line, f"must be a number above 0, got {weight!r}"
            )
        weights[str(user)] = float(weight)
    half_life, reserve_after = times
    assert half_life is not None
    return FairShare(half_life, reserve_after, weights)


def _cell_path(
    value: Any,
    types: dict[str, CellType],
    chains: set[str],
    key: str,
    line: int | None,
    ctx: _Ctx,
) -> tuple[str, ...]:
    if not isinstance(value, str) or not value:
        raise ctx.error(key, line, "is required: a dotted path such as RACK.NODE")
    parts = tuple(value.split("."))
    if parts[0] not in chains:
        raise ctx.error(
            key,
            line,
            f"{value}: must start with a cell type used in physicalCells "
            f"({', '.join(sorted(chains))})",
        )
    for upper, lower in itertools.pairwise(parts):
        if types[upper].child != lower:
            raise ctx.error(key, line, f"{value}: {lower} is not the childCellType of {upper}")
    return parts


def _check_fits(
    vcs: dict[str, VCSpec],
    types: dict[str, CellType],
    cells: list[PhysicalCell],
    pinned: dict[str, PhysicalCell],
    ctx: _Ctx,
    raw: Any,
) -> None:
    """Refuse VCs that ask for more cells than a chain holds (HiveD's initial assignment)."""
    for chain in sorted({c.chain for c in cells}):
        free: dict[tuple[str, ...], PhysicalCell] = {c.path: c for c in cells if c.chain == chain}
        for pin in (p for p in pinned.values() if p.chain == chain):
            _take(free, pin)
        supply: dict[int, int] = {}
        for cell in free.values():
            supply[cell.level] = supply.get(cell.level, 0) + 1
        demand: dict[int, int] = {}
        askers: dict[int, list[str]] = {}
        for vc in vcs.values():
            for spec in vc.cells:
                if spec.chain == chain and spec.number:
                    lvl = types[spec.cell_type].level
                    demand[lvl] = demand.get(lvl, 0) + spec.number
                    askers.setdefault(lvl, []).append(f"{vc.name} {spec.number}")
        levels, child_number = chain_levels(types, chain)
        short = first_short_level(levels, child_number, supply, demand)
        if short is None:
            continue
        level, need, have = short
        name = levels_name(types, chain, level)
        raise ctx.error(
            "virtualClusters",
            line_of(raw),
            f"the VCs ask for more cells of chain {chain} than physicalCells hold: at level "
            f"{name} they need {need} ({', '.join(askers.get(level, []))}) but only {have} "
            "are left once larger and pinned cells are assigned; lower a cellNumber or add "
            "physical cells",
        )


def _take(free: dict[tuple[str, ...], PhysicalCell], cell: PhysicalCell) -> None:
    """Buddy-split the free cell holding ``cell`` until ``cell`` itself is taken."""
    for depth in range(1, len(cell.path) + 1):
        holder = free.pop(cell.path[:depth], None)
        if holder is None:
            continue
        node = holder
        while node.path != cell.path:
            nxt = next(c for c in node.children if cell.path[: len(c.path)] == c.path)
            for sibling in node.children:
                if sibling is not nxt:
                    free[sibling.path] = sibling
            node = nxt
        return


def chain_levels(types: dict[str, CellType], chain: str) -> tuple[list[int], dict[int, int]]:
    """The levels of a chain, top first, and how many children a cell of each level has."""
    levels, child_number = [], {}
    name: str | None = chain
    while name is not None:
        ctype = types[name]
        levels.append(ctype.level)
        child_number[ctype.level] = ctype.child_number
        name = ctype.child
    return levels, child_number


def levels_name(types: dict[str, CellType], chain: str, level: int) -> str:
    """The dotted path of the chain's cell type at ``level``, as VCs write it."""
    parts = []
    name: str | None = chain
    while name is not None:
        parts.append(name)
        if types[name].level == level:
            break
        name = types[name].child
    return ".".join(parts)


# ---- built-in clusters -----------------------------------------------------------------------


def virtual_cluster(
    nodes: int = 2, gpus_per_node: int = 4, vcs: tuple[str, ...] = ("default", "vc1")
) -> ClusterConfig:
    """A cluster of GPU slots for machines without NVIDIA GPUs, labelled virtual.

    The nodes are shared out between the VCs as whole nodes when there are enough of them,
    GPU by GPU otherwise.
    """
    if nodes < 1 or gpus_per_node < 1 or not vcs:
        raise ConfigError("a virtual cluster needs at least one node, one GPU and one VC")
    names = [f"vnode-{i}" for i in range(nodes)]
    whole_nodes = nodes >= len(vcs)
    units = nodes if whole_nodes else nodes * gpus_per_node
    path = "VGPU-POOL.VGPU-NODE" if whole_nodes else "VGPU-POOL.VGPU-NODE.VGPU"
    shares = [units // len(vcs) + (1 if i < units % len(vcs) else 0) for i in range(len(vcs))]
    data = {
        "physicalCluster": {
            "cellTypes": {
                "VGPU-NODE": {
                    "childCellType": "VGPU",
                    "childCellNumber": gpus_per_node,
                    "isNodeLevel": True,
                },
                "VGPU-POOL": {"childCellType": "VGPU-NODE", "childCellNumber": nodes},
            },
            "physicalCells": [
                {"cellType": "VGPU-POOL", "cellChildren": [{"cellAddress": n} for n in names]}
            ],
        },
        "virtualClusters": {
            vc: {"virtualCells": [{"cellType": path, "cellNumber": share}]}
            for vc, share in zip(vcs, shares, strict=True)
        },
    }
    config = load_cluster_config(data)
    return ClusterConfig(
        config.skus,
        config.cell_types,
        config.physical_cells,
        config.vcs,
        virtual=True,
        source="virtual",
        pinned=config.pinned,
    )


def cluster_from_gpus(
    node: str, gpus: int, vcs: tuple[str, ...] = ("default", "vc1")
) -> ClusterConfig:
    """One real node with ``gpus`` GPUs, shared GPU by GPU between the VCs (NVML detection)."""
    shares = [gpus // len(vcs) + (1 if i < gpus % len(vcs) else 0) for i in range(len(vcs))]
    data = {
        "physicalCluster": {
            "cellTypes": {
                "GPU-NODE": {"childCellType": "GPU", "childCellNumber": gpus, "isNodeLevel": True}
            },
            "physicalCells": [{"cellType": "GPU-NODE", "cellAddress": node}],
        },
        "virtualClusters": {
            vc: {"virtualCells": [{"cellType": "GPU-NODE.GPU", "cellNumber": share}]}
            for vc, share in zip(vcs, shares, strict=True)
            if share
        },
    }
    return load_cluster_config(data)
