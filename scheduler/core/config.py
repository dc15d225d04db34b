"""HiveD's cluster config, loaded verbatim: cell types, physical cells and virtual clusters.

An admin's existing ``physicalCluster`` / ``virtualClusters`` config loads unchanged, with or
without OpenPAI's ``hivedscheduler: config: |`` wrapper, and every problem is reported with the
key and the line it is about. What HiveD infers (omitted ``cellAddress``, ``cellChildren: null``,
default GPU indices) is inferred here too, so the core always sees the complete cell forest.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from labhive.scheduler.core.config_cells import (
    MAX_CELL_LEVELS,
    MAX_CELLS,
    MAX_LEAF_CELLS,
    _cell_types,
    _physical_cells,
    _skus,
    chain_levels,
    levels_name,
)
from labhive.scheduler.core.config_fields import _Ctx, _need, _no_unknown, memory_mb
from labhive.scheduler.core.config_model import (
    SHARING_MODES,
    CellType,
    ClusterConfig,
    ConfigError,
    FairShare,
    GpuSharing,
    NodeSpec,
    PhysicalCell,
    SkuType,
    VCSpec,
    VirtualCellSpec,
)
from labhive.scheduler.core.config_sharing import _fair_share, _gpu_sharing
from labhive.scheduler.core.config_vcs import _check_fits, _vcs
from labhive.scheduler.core.errors import UserError
from labhive.scheduler.core.yamlines import YamlSyntaxError, line_of, load_yaml, read_text

# The names other modules import from here, wherever they are defined now.
__all__ = [
    "MAX_CELLS",
    "MAX_CELL_LEVELS",
    "MAX_LEAF_CELLS",
    "SHARING_MODES",
    "TOP_KEYS",
    "CellType",
    "ClusterConfig",
    "ConfigError",
    "FairShare",
    "GpuSharing",
    "NodeSpec",
    "PhysicalCell",
    "SkuType",
    "VCSpec",
    "VirtualCellSpec",
    "chain_levels",
    "cluster_from_gpus",
    "levels_name",
    "load_cluster_config",
    "memory_mb",
    "virtual_cluster",
]

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
