"""``--vc-quota VC=+Nnodes`` / ``VC=-Nnodes``: a cluster config with one VC's quota changed,
for ``labhive whatif``.

``+N`` adds N new nodes to the cluster (top-level physical cells of the node-level cell type
the VC already holds, named ``whatif-node-K``) and gives them to the VC; ``-N`` takes N of the
VC's node cells away from it (the nodes stay in the cluster, owned by no VC: HiveD lends them
opportunistically). It edits the config's mapping (the YAML as read), so the result is checked
by the same loader as any config file.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from labhive.scheduler.core.errors import UserError

SYNTAX = "VC=+Nnodes or VC=-Nnodes (e.g. --vc-quota vc1=+2nodes; repeat for more VCs)"
_PATTERN = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*=\s*([+-])\s*(\d+)\s*nodes?\s*$")


@dataclass(frozen=True)
class QuotaChange:
    vc: str
    nodes: int  # > 0 adds nodes, < 0 takes them away

    def __str__(self) -> str:
        return f"{self.vc}={self.nodes:+d}nodes"


def parse_vc_quota(text: str) -> QuotaChange:
    found = _PATTERN.match(text)
    if found is None or int(found.group(3)) == 0:
        raise UserError(f"--vc-quota {text!r}: the syntax is {SYNTAX}")
    sign = 1 if found.group(2) == "+" else -1
    return QuotaChange(found.group(1), sign * int(found.group(3)))


def apply(data: Any, changes: list[QuotaChange]) -> dict[str, Any]:
    """A copy of the config mapping ``data`` with ``changes`` made."""
    out: dict[str, Any] = _plain(data)
    if "hivedscheduler" in out:
        raise UserError("--vc-quota edits a plain HiveD config, not OpenPAI's wrapper")
    added = 0
    for change in changes:
        vcs = out.get("virtualClusters") or {}
        if change.vc not in vcs:
            raise UserError(
                f"--vc-quota {change}: no VC {change.vc!r} in the cluster (it has "
                f"{', '.join(sorted(vcs)) or 'none'})"
            )
        cells = vcs[change.vc].setdefault("virtualCells", [])
        chain, node_type = _node_chain(out, cells, change)
        if change.nodes > 0:
            for _ in range(change.nodes):
                out["physicalCluster"]["physicalCells"].append(
                    {"cellType": node_type, "cellAddress": f"whatif-node-{added}"}
                )
                added += 1
            cells.append({"cellType": node_type, "cellNumber": change.nodes})
        else:
            _take_away(cells, chain, -change.nodes, change)
    return out


def _node_chain(data: dict[str, Any], cells: list[Any], change: QuotaChange) -> tuple[str, str]:
    """The VC's cell chain that ends at a node (``POOL.VNODE``) and that node's type; for a VC
    without one, the first node-level type of the cluster."""
    types = data["physicalCluster"]["cellTypes"]
    node_types = [name for name, t in types.items() if (t or {}).get("isNodeLevel")]
    for cell in cells:
        last = str(cell.get("cellType", "")).split(".")[-1]
        if last in node_types:
            return str(cell["cellType"]), last
    if change.nodes < 0:
        raise UserError(f"--vc-quota {change}: VC {change.vc!r} holds no whole nodes to give up")
    if not node_types:
        raise UserError(f"--vc-quota {change}: the cluster has no node-level cell type")
    return node_types[0], node_types[0]


def _take_away(cells: list[Any], chain: str, n: int, change: QuotaChange) -> None:
    held = sum(int(c.get("cellNumber", 1)) for c in cells if c.get("cellType") == chain)
    if n > held:
        raise UserError(f"--vc-quota {change}: VC {change.vc!r} holds only {held} nodes")
    for cell in cells:
        if cell.get("cellType") == chain and n > 0:
            take = min(n, int(cell.get("cellNumber", 1)))
            cell["cellNumber"] = int(cell.get("cellNumber", 1)) - take
            n -= take
    cells[:] = [c for c in cells if int(c.get("cellNumber", 1)) > 0]


def _plain(value: Any) -> Any:
    """The YAML loader's mappings and lists as plain dicts and lists (a deep copy)."""
    if isinstance(value, dict) or hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return copy.copy(value)
