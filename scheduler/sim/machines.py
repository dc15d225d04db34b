"""A simulated cluster from a machine list (Philly's ``cluster_machine_list``), in HiveD's format.

The result is a plain HiveD config dict, loaded by the core's own loader, so the simulator's
cluster is the same kind of object an admin's YAML gives. Machines of one shape (GPU count and
GPU memory) form one chain: a pool cell of node cells of leaf cells. The machine list says
nothing about racks, so there is no rack level. VCs: one VC ``default`` with every node, or,
given VC weights (Helios' per-VC node counts for Philly), each chain's nodes shared out in
proportion to the weights (largest remainder), since the weights need not match the list.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labhive.scheduler.core.config import ClusterConfig, load_cluster_config
from labhive.scheduler.core.errors import UserError

DEFAULT_VC = "default"


@dataclass(frozen=True, slots=True)
class Machine:
    name: str
    gpus: int
    gpu_memory: str = ""  # e.g. "12GB"; empty when the list does not say


def is_machine_list(path: str | Path) -> bool:
    """True for a CSV whose header names a machine id and a GPU count."""
    try:
        with open(path, encoding="utf-8-sig") as fh:
            header = fh.readline().lower()
    except (OSError, UnicodeDecodeError):
        return False
    return "machineid" in header.replace(" ", "") and "gpu" in header


def load_machine_list(path: str | Path) -> tuple[list[Machine], int]:
    """Machines with GPUs, and how many listed machines had none (left out)."""
    text = Path(path).read_text(encoding="utf-8-sig")
    reader = csv.reader(io.StringIO(text))
    header = [h.strip().lower() for h in next(reader, [])]
    try:
        name_col = header.index("machineid")
        gpu_col = header.index("number of gpus")
    except ValueError:
        raise UserError(
            f"{path}: line 1: a machine list needs the columns 'machineId' and 'number of GPUs'"
        ) from None
    mem_col = header.index("single gpu mem") if "single gpu mem" in header else None
    machines, empty = [], 0
    for row in reader:
        line = reader.line_num
        if not row or not "".join(row).strip():
            continue
        try:
            gpus = int(float(row[gpu_col]))
            name = row[name_col].strip()
        except (IndexError, ValueError):
            raise UserError(f"{path}: line {line}: expected a machine id and a GPU count") from None
        if gpus <= 0:
            empty += 1
            continue
        mem = row[mem_col].strip() if mem_col is not None and mem_col < len(row) else ""
        machines.append(Machine(name, gpus, mem))
    if not machines:
        raise UserError(f"{path}: no machine with GPUs listed")
    return machines, empty


def load_vc_weights(path: str | Path) -> dict[str, int]:
    """VC -> weight from a two-column CSV with a header (Helios' ``vc,node num``)."""
    out: dict[str, int] = {}
    with open(path, encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        next(reader, None)
        for row in reader:
            if not row or not row[0].strip():
                continue
            try:
                out[row[0].strip()] = int(float(row[1]))
            except (IndexError, ValueError):
                raise UserError(f"{path}: line {reader.line_num}: expected 'vc,weight'") from None
    if not out or sum(out.values()) <= 0:
        raise UserError(f"{path}: no VC with a positive weight")
    return out


def _shape_names(m: Machine) -> tuple[str, str, str]:
    mem = re.sub(r"[^A-Za-z0-9]", "", m.gpu_memory).upper()
    tag = f"{m.gpus}G{mem}" if mem else f"{m.gpus}G"
    leaf = f"GPU{mem}" if mem else "GPU"
    return leaf, f"NODE-{tag}", f"POOL-{tag}"


def cluster_dict(
    machines: list[Machine], vc_weights: dict[str, int] | None = None
) -> dict[str, Any]:
    """The HiveD config (as a dict) for these machines, with one VC or weighted VCs."""
    shapes: dict[tuple[str, str, str], list[Machine]] = {}
    for m in machines:
        shapes.setdefault(_shape_names(m), []).append(m)
    cell_types: dict[str, Any] = {}
    physical: list[dict[str, Any]] = []
    vcs: dict[str, list[dict[str, Any]]] = {}
    weights = vc_weights or {DEFAULT_VC: 1}
    for (leaf, node, pool), group in sorted(shapes.items(), key=lambda kv: kv[0][2]):
        cell_types[node] = {
            "childCellType": leaf,
            "childCellNumber": group[0].gpus,
            "isNodeLevel": True,
        }
        cell_types[pool] = {"childCellType": node, "childCellNumber": len(group)}
        physical.append(
            {"cellType": pool, "cellChildren": [{"cellAddress": m.name} for m in group]}
        )
        for vc, count in share_out(len(group), weights).items():
            if count:
                vcs.setdefault(vc, []).append({"cellType": f"{pool}.{node}", "cellNumber": count})
    return {
        "physicalCluster": {"cellTypes": cell_types, "physicalCells": physical},
        "virtualClusters": {vc: {"virtualCells": cells} for vc, cells in vcs.items()},
    }


def share_out(total: int, weights: dict[str, int]) -> dict[str, int]:
    """Split ``total`` units by ``weights``, largest remainder first (ties by name)."""
    wsum = sum(weights.values())
    exact = {k: total * w / wsum for k, w in weights.items()}
    out = {k: int(v) for k, v in exact.items()}
    left = total - sum(out.values())
    for k in sorted(exact, key=lambda k: (-(exact[k] - out[k]), k))[:left]:
        out[k] += 1
    return out


def load_sim_cluster(
    path: str | Path, vc_weights_path: str | Path | None = None, machines: int | None = None
) -> tuple[ClusterConfig, str]:
    """A machine list (``machines``: only its first N with GPUs) or a HiveD config file;
    returns the config and a one-line description."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"cluster {path} does not exist; give a HiveD config or a machine list")
    if is_machine_list(path):
        listed, empty = load_machine_list(path)
        listed = listed[:machines] if machines is not None else listed
        weights = load_vc_weights(vc_weights_path) if vc_weights_path else None
        config = load_cluster_config(cluster_dict(listed, weights))
        shapes = Counter((m.gpus, m.gpu_memory) for m in listed)
        parts = ", ".join(
            f"{n} x {g} GPU{(' ' + mem) if mem else ''}" for (g, mem), n in sorted(shapes.items())
        )
        note = f"; {empty} machines without GPUs left out" if empty else ""
        if machines is not None:
            note += f"; the first {len(listed)} machines (--machines)"
        return (
            config,
            f"{path.name}: {parts} = {config.total_gpus()} GPUs, {len(config.vcs)} VCs{note}",
        )
    if vc_weights_path:
        raise UserError("--vcs applies to a machine list; a HiveD config defines its own VCs")
    if machines is not None:
        raise UserError("--machines applies to a machine list; a HiveD config is taken whole")
    config = load_cluster_config(path)
    return config, f"{path.name}: {config.total_gpus()} GPUs, {len(config.vcs)} VCs"
