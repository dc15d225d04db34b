"""``physicalCluster``: SKU types, cell types and the physical cell trees, inferred as HiveD
infers them (omitted ``cellAddress``, ``cellChildren: null``, default GPU indices).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labhive.scheduler.core.config_fields import _Ctx, _int, _no_unknown, memory_mb
from labhive.scheduler.core.config_model import CellType, PhysicalCell, SkuType
from labhive.scheduler.core.yamlines import LineList, line_of

#: The most leaf cells (GPUs) a config may define, and the most cells of all levels: a bound
#: far above any real cluster (the largest traces have a few thousand GPUs) that keeps a typo
#: such as ``childCellNumber: 100000000`` from building cells until memory runs out.
MAX_LEAF_CELLS = 1_000_000
MAX_CELLS = 2_000_000
#: Cell types on the way from a top-level cell down to a GPU.
MAX_CELL_LEVELS = 32


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
