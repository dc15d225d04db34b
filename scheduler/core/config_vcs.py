"""``virtualClusters``: each VC's cells, pins, time limits, disk and per-user limits, and the
check that the VCs together fit the physical cells (HiveD's initial assignment).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from labhive.scheduler.core.buddy import first_short_level
from labhive.scheduler.core.config_cells import chain_levels, levels_name
from labhive.scheduler.core.config_fields import _Ctx, _int, _no_unknown
from labhive.scheduler.core.config_model import CellType, PhysicalCell, VCSpec, VirtualCellSpec
from labhive.scheduler.core.yamlines import LineList, line_of


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
    from labhive.scheduler.core.sizes import parse_size

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
    from labhive.scheduler.core.time_limits import parse_time_limit

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
