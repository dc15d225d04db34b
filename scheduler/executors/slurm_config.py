"""``labhive cluster from-slurm``: a HiveD cluster config written from what Slurm reports.

Nodes, their GPUs and GPU type come from ``sinfo --json`` (the GRES string: ``gpu:4`` or
``gpu:a100:8``); switches from ``topology.conf`` beside ``slurm.conf`` where there is one.
Each GPU type becomes a SKU (CPU and memory per GPU from its smallest node), each
(type, GPUs per node) a node-level cell type, and each switch (or, without a topology, all
nodes of one node type) a cell above the nodes. One VC, ``default``, owns everything: the admin
edits the VCs from there. Nodes without GPUs are left out, with a comment saying so: HiveD's
cells are GPU cells. The VC's ``timeLimit`` is the partition's ``DefaultTime``/``MaxTime``
(the partition the service will submit to, else Slurm's default one): the service then
passes every job a limit Slurm accepts, and says at submission when a job asks for more than
the partition allows instead of Slurm refusing it later.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from labhive.scheduler.executors.slurm_cli import Slurm, SlurmNode, nodes


def cluster_from_slurm(
    slurm: Slurm, topology: Path | None = None, partition: str | None = None
) -> str:
    """The config's YAML text (with a header comment naming what was left out)."""
    listed = nodes(slurm.json(["sinfo"]))
    gpu_nodes = [n for n in listed if n.gpus > 0]
    skipped = [n.name for n in listed if n.gpus == 0]
    if not gpu_nodes:
        raise ValueError("Slurm reports no node with GPUs (no gpu GRES): nothing to schedule")
    topo = topology if topology is not None else _topology_beside(slurm)
    switches = _switches(slurm, topo) if topo and topo.exists() else {}
    config = _config(gpu_nodes, switches)
    limits = partition_time_limit(slurm, partition)
    if limits:
        config["virtualClusters"]["default"]["timeLimit"] = limits
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


def partition_time_limit(slurm: Slurm, name: str | None) -> dict[str, str]:
    """``{default, max}`` from the partition's ``DefaultTime`` and ``MaxTime`` as
    ``scontrol show partition`` prints them (either left out when Slurm sets none); the
    partition ``name``, else the one marked ``Default=YES``. ValueError for a name Slurm lacks."""
    fields = [
        dict(word.split("=", 1) for word in line.split() if "=" in word)
        for line in slurm.run(["scontrol", "show", "partition", "--oneliner"]).splitlines()
    ]
    chosen = [
        f
        for f in fields
        if f.get("PartitionName") == name or (not name and f.get("Default") == "YES")
    ]
    if not chosen:
        have = ", ".join(f.get("PartitionName", "?") for f in fields)
        if name:
            raise ValueError(f"Slurm has no partition {name!r} (it has: {have})")
        return {}
    out = {}
    for key, word in (("default", "DefaultTime"), ("max", "MaxTime")):
        seconds = slurm_seconds(chosen[0].get(word, "NONE"))
        if seconds is not None:
            out[key] = f"{seconds}s" if seconds % 60 else f"{seconds // 60}m"
    return out


def slurm_seconds(text: str) -> int | None:
    """Seconds in a Slurm duration (``[days-]hours:minutes:seconds``, ``minutes:seconds``, or
    minutes); None for ``UNLIMITED``, ``NONE`` or ``INFINITE``."""
    if text.upper() in ("UNLIMITED", "NONE", "INFINITE", "N/A", ""):
        return None
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if len(parts) == 1:
        parts = [0, parts[0], 0]  # a bare number is minutes
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, seconds = parts
    return int(days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds
