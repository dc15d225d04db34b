"""``labhive cluster from-slurm``: a HiveD cluster config written from what Slurm reports.

Nodes, their GPUs and GPU type come from ``sinfo --json`` (the GRES string: ``gpu:4`` or
``gpu:a100:8``); switches from ``topology.conf`` beside ``slurm.conf`` where there is one.
Each GPU type becomes a SKU (CPU and memory per GPU from its smallest node), each
(type, GPUs per node) a node-level cell type, and each switch (or, without a topology, all
nodes of one node type) a cell above the nodes. One VC, ``default``, owns everything: the admin
edits the VCs from there. Nodes without GPUs are left out, with a comment saying so: HiveD's
cells are GPU cells.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from labhive.scheduler.executors.slurm_cli import Slurm, SlurmNode, nodes


def cluster_from_slurm(slurm: Slurm, topology: Path | None = None) -> str:
    """The config's YAML text (with a header comment naming what was left out)."""
    listed = nodes(slurm.json(["sinfo"]))
    gpu_nodes = [n for n in listed if n.gpus > 0]
    skipped = [n.name for n in listed if n.gpus == 0]
    if not gpu_nodes:
        raise ValueError("Slurm reports no node with GPUs (no gpu GRES): nothing to schedule")
    topo = topology if topology is not None else _topology_beside(slurm)
    switches = _switches(slurm, topo) if topo and topo.exists() else {}
    config = _config(gpu_nodes, switches)
    header = "# Written by `labhive cluster from-slurm` from sinfo"
    header += f" and {topo}" if switches else ""
    header += ".\n# Edit virtualClusters to split the cluster between VCs.\n"
    if skipped:
        header += f"# Left out (no GPUs): {', '.join(skipped)}\n"
    return header + yaml.safe_dump(config, sort_keys=False)


def _config(gpu_nodes: list[SlurmNode], switches: dict[str, list[str]]) -> dict[str, Any]:
    sku_of = {n.name: _sku_name(n) for n in gpu_nodes}
    skus: dict[str, dict[str, Any]] = {}
    for node in gpu_nodes:
        cpu = max(1, node.cpus // node.gpus)
        per_gpu = {"gpu": 1, "cpu": cpu, "memory": f"{max(1, node.memory_mb // node.gpus)}Mi"}
        old = skus.get(sku_of[node.name])
        if old is None or cpu < old["cpu"]:
            skus[sku_of[node.name]] = per_gpu
    node_type = {n.name: f"{sku_of[n.name]}-{n.gpus}GPU-NODE" for n in gpu_nodes}
    cell_types: dict[str, dict[str, Any]] = {}
    for node in gpu_nodes:
        cell_types[node_type[node.name]] = {
            "childCellType": sku_of[node.name],
            "childCellNumber": node.gpus,
            "isNodeLevel": True,
        }
    groups = _groups(gpu_nodes, node_type, switches)
    physical, virtual = [], []
    for (group, ntype), members in groups.items():
        top = f"{ntype}-{group}" if group else f"{ntype}-POOL"
        cell_types[top] = {"childCellType": ntype, "childCellNumber": len(members)}
        physical.append({"cellType": top, "cellChildren": [{"cellAddress": m} for m in members]})
        virtual.append({"cellType": f"{top}.{ntype}", "cellNumber": len(members)})
    return {
        "physicalCluster": {"skuTypes": skus, "cellTypes": cell_types, "physicalCells": physical},
        "virtualClusters": {"default": {"virtualCells": virtual}},
    }


def _groups(
    gpu_nodes: list[SlurmNode], node_type: dict[str, str], switches: dict[str, list[str]]
) -> dict[tuple[str, str], list[str]]:
    """Nodes under one top-level cell: those of one node type under one switch (or anywhere,
    without a topology). A top-level cell holds nodes of one type only, as HiveD requires."""
    switch_of = {node: name for name, members in switches.items() for node in members}
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for node in gpu_nodes:
        groups[(switch_of.get(node.name, ""), node_type[node.name])].append(node.name)
    return dict(groups)


def _sku_name(node: SlurmNode) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", node.gpu_type or "gpu").upper()


def _topology_beside(slurm: Slurm) -> Path | None:
    return Path(slurm.conf).with_name("topology.conf") if slurm.conf else None


def _switches(slurm: Slurm, topology: Path) -> dict[str, list[str]]:
    """Leaf switches of ``topology.conf`` (those listing ``Nodes=``), their node names."""
    out: dict[str, list[str]] = {}
    for line in topology.read_text().splitlines():
        fields = dict(part.split("=", 1) for part in line.split("#")[0].split() if "=" in part)
        if "SwitchName" in fields and "Nodes" in fields:
            names = slurm.run(["scontrol", "show", "hostnames", fields["Nodes"]]).split()
            out[fields["SwitchName"]] = names
    return out
