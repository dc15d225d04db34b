"""What a queue policy takes from a cluster config and from ``--policy name:key=value``: the
node pool, each VC's quota, and the options checked against the policy's defaults."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.policies.node_pool import Locality, NodePool, PoolNode

if TYPE_CHECKING:
    from labhive.scheduler.core.config import ClusterConfig


def pool_from_config(config: ClusterConfig, locality: Locality = "consolidated") -> NodePool:
    """The config's nodes as GPU slots; CPU and memory per node from its SKU when given (a
    leaf cell's share times the node's leaf cells), unbounded otherwise."""
    merged: dict[str, tuple[str | None, set[int]]] = {}
    for spec in config.nodes():  # a node in two chains is listed twice: one node here
        _, gpus = merged.setdefault(spec.name, (spec.sku, set()))
        gpus.update(spec.gpus)
    nodes = []
    for name, (leaf, gpus) in merged.items():
        sku = config.sku(leaf) if leaf else None
        n = len(gpus)
        cpu = sku.cpu * n if sku is not None and sku.cpu > 0 else math.inf
        mem = sku.memory_mb * n if sku is not None and sku.memory_mb > 0 else math.inf
        nodes.append(PoolNode(name, leaf, tuple(sorted(gpus)), cpu=cpu, memory_mb=mem))
    return NodePool(nodes, locality)


def vc_gpus(config: ClusterConfig) -> dict[str, int]:
    """Each VC's guaranteed GPUs (its quota): its virtual cells' leaf cells."""
    return {
        name: sum(cell.number * _leaves(config, cell.cell_type) for cell in vc.cells)
        for name, vc in config.vcs.items()
    }


def _leaves(config: ClusterConfig, cell_type: str) -> int:
    ctype = config.cell_types[cell_type]
    if ctype.child is None:
        return 1
    return ctype.child_number * _leaves(config, ctype.child)


def policy_options(options: dict[str, Any], **defaults: Any) -> dict[str, Any]:
    """Options a policy accepts, with defaults. Text values (from ``--policy las:knob=4``) are
    converted to the default's type (a tuple is written ``3250/7200``); an unknown option is a
    clear error."""
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise UserError(
            f"unknown option(s) {', '.join(unknown)}; "
            f"this policy takes {', '.join(sorted(defaults))}"
        )
    merged = dict(defaults)
    for key, value in options.items():
        merged[key] = _coerce(key, value, defaults[key])
    return merged


def _coerce(key: str, value: Any, default: Any) -> Any:
    if not isinstance(value, str) or isinstance(default, str):
        return value
    try:
        if isinstance(default, bool):
            if value.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(value)
            return value.lower() in ("1", "true", "yes", "on")
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
        if isinstance(default, tuple):
            return tuple(float(v) for v in value.replace(";", "/").split("/") if v.strip())
    except ValueError:
        raise UserError(f"option {key}={value!r} should look like {default!r}") from None
    return value
