"""Virtual clusters: each VC's quota of cells and its lazy binding to physical cells.

A VC owns cells (a number per chain and level), not particular machines. A cell is bound to a
physical cell only while the VC's guaranteed jobs use it, and unbound once they leave, so an
idle quota is never tied to a failing node and the physical cells stay free for buddy
allocation. Pinned cells are the exception: bound for good.
"""

from __future__ import annotations

from labhive.scheduler.core.config import ClusterConfig
from labhive.scheduler.hived.cells import Cell, CellTree


class VC:
    """One VC's quota, its bound cells and the usage counters the queue's pre-checks read."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.quota: dict[str, dict[int, int]] = {}  # chain -> level -> cells (pinned excluded)
        self.unbound: dict[str, dict[int, int]] = {}
        self.bound: dict[str, dict[str, Cell]] = {}  # chain -> cell id -> bound cell
        self.pinned: list[Cell] = []
        # Where the VC's bound cells lie: whole nodes, and nodes it holds only parts of
        # (pinned cells excluded: only jobs that name them run there).
        self.nodes: dict[str, dict[Cell, None]] = {}
        self.parts: dict[str, dict[Cell, list[Cell]]] = {}
        self.open: dict[str, dict[Cell, None]] = {}  # whole nodes with a free healthy GPU
        self.total: dict[str | None, int] = {}  # leaves per chain (None: all), cached
        self.epoch = 0  # bumped whenever this VC's capacity may have grown for every job
        self.version = 0  # bumped with any of the three below (caches the core's stamps)
        self.pool_epoch = 0  # bumped when more physical cells became free to bind
        self.freed: dict[int, int] = {}  # priority -> times GPUs of such jobs were freed
        # Usage inside the VC's bound cells, kept by the core for cheap pre-checks.
        self.free_in = 0  # healthy GPUs no job uses
        self.oppo_in = 0  # GPUs opportunistic jobs use
        self.prio_in: dict[int, int] = {}  # priority -> GPUs its guaranteed jobs use
        self.unbound_leaves = 0  # GPUs in cells not bound yet
        self.grown: dict[Cell, int] = {}  # node -> when GPUs were last freed on it (core)

    def chains(self) -> list[str]:
        return list(self.quota)

    # ---- usage counters: changed only here, so ``check`` can state what they mean ----

    def count_bound(self, cell: Cell) -> None:
        """``cell`` was bound to the VC: its free and opportunistic GPUs count as the VC's."""
        self.free_in += cell.free
        self.oppo_in += cell.oppo

    def count_unbound(self, cell: Cell) -> None:
        """``cell`` is no longer the VC's (or its binding was rolled back)."""
        self.free_in -= cell.free
        self.oppo_in -= cell.oppo

    def occupy(self, healthy: bool, prio: int) -> None:
        """A job of ``prio`` took one GPU of the VC's cells."""
        if healthy:
            self.free_in -= 1
        if prio >= 0:
            self.prio_in[prio] = self.prio_in.get(prio, 0) + 1
        else:
            self.oppo_in += 1

    def vacate(self, healthy: bool, prio: int) -> None:
        """A job of ``prio`` left one GPU of the VC's cells."""
        if healthy:
            self.free_in += 1
        if prio >= 0:
            self.prio_in[prio] -= 1
        else:
            self.oppo_in -= 1

    def occupy_run(self, healthy: int, prio: int, n: int) -> None:
        """``occupy`` of ``n`` GPUs at ``prio``, ``healthy`` of them healthy, at once."""
        self.free_in -= healthy
        if prio >= 0:
            self.prio_in[prio] = self.prio_in.get(prio, 0) + n
        else:
            self.oppo_in += n

    def vacate_run(self, healthy: int, prio: int, n: int) -> None:
        """``vacate`` of ``n`` GPUs at ``prio``, ``healthy`` of them healthy, at once."""
        self.free_in += healthy
        if prio >= 0:
            self.prio_in[prio] -= n
        else:
            self.oppo_in -= n

    def check(self) -> None:
        """Raise AssertionError unless the counters equal what the VC's bound cells say (the
        queue's cheap pre-checks trust them; property tests call this after every event)."""
        free = oppo = 0
        prio: dict[int, int] = {}
        for cells in self.bound.values():
            for cell in cells.values():
                for leaf in cell.leaf_cells():
                    if leaf.job is None:
                        free += leaf.bad == 0
                    elif leaf.prio < 0:
                        oppo += 1
                    else:
                        prio[leaf.prio] = prio.get(leaf.prio, 0) + 1
        if (self.free_in, self.oppo_in) != (free, oppo):
            raise AssertionError(
                f"{self.name}: free/oppo {self.free_in}/{self.oppo_in}, cells {free}/{oppo}"
            )
        if {p: n for p, n in self.prio_in.items() if n} != prio:
            raise AssertionError(f"{self.name}: prio_in {self.prio_in}, cells {prio}")
        for chain, nodes in self.nodes.items():
            if set(self.open.get(chain, {})) != {n for n in nodes if n.free > 0}:
                raise AssertionError(f"{self.name}: open nodes of {chain} disagree with free")
        if self.unbound_leaves < 0 or any(
            n < 0 for lv in self.unbound.values() for n in lv.values()
        ):
            raise AssertionError(f"{self.name}: more cells bound than its quota")

    def leaves(self, tree: CellTree, chain: str | None = None) -> int:
        """The VC's guaranteed leaf cells, in one chain or all."""
        if chain in self.total:
            return self.total[chain]
        total = 0
        for name, levels in self.quota.items():
            if chain is not None and name != chain:
                continue
            info = tree.chains[name]
            total += sum(info.level_leaves[level] * n for level, n in levels.items())
        total += sum(c.leaves for c in self.pinned if chain is None or c.chain == chain)
        self.total[chain] = total
        return total

    def add_cell(self, cell: Cell) -> None:
        if cell.node_cell is not None:
            self.parts.setdefault(cell.chain, {}).setdefault(cell.node_cell, []).append(cell)
        else:
            self.nodes.setdefault(cell.chain, {}).update(dict.fromkeys(cell.nodes()))
            opened = self.open.setdefault(cell.chain, {})
            opened.update(dict.fromkeys(n for n in cell.nodes() if n.free > 0))

    def drop_cell(self, cell: Cell) -> None:
        if cell.node_cell is not None:
            parts = self.parts[cell.chain][cell.node_cell]
            parts.remove(cell)
            if not parts:
                del self.parts[cell.chain][cell.node_cell]
        else:
            nodes = self.nodes[cell.chain]
            opened = self.open.get(cell.chain, {})
            for node in cell.nodes():
                del nodes[node]
                opened.pop(node, None)

    def refresh_open(self, node: Cell) -> None:
        """Keep ``open`` true after ``node``'s free GPUs changed."""
        if node in self.nodes.get(node.chain, {}):
            if node.free > 0:
                self.open.setdefault(node.chain, {})[node] = None
            else:
                self.open.get(node.chain, {}).pop(node, None)


class VCs:
    """All VCs and the per-chain demand of their unbound cells (what safety must keep)."""

    def __init__(self, config: ClusterConfig, tree: CellTree) -> None:
        self.tree = tree
        self.by_name: dict[str, VC] = {}
        self.demand: dict[str, dict[int, int]] = {c: {} for c in tree.chains}
        for spec in config.vcs.values():
            vc = self.by_name[spec.name] = VC(spec.name)
            for want in spec.cells:
                level = config.cell_types[want.cell_type].level
                quota = vc.quota.setdefault(want.chain, {})
                quota[level] = quota.get(level, 0) + want.number
                vc.bound.setdefault(want.chain, {})
            for chain, levels in vc.quota.items():
                vc.unbound[chain] = dict(levels)
                info = tree.chains[chain]
                vc.unbound_leaves += sum(info.level_leaves[lvl] * n for lvl, n in levels.items())
                for level, n in levels.items():
                    self.demand[chain][level] = self.demand[chain].get(level, 0) + n
            for pid in spec.pinned:
                cell = tree.pinned[pid]
                tree.bind(cell, vc.name)
                cell.pinned = True
                vc.pinned.append(cell)
                vc.bound.setdefault(cell.chain, {})[cell.id] = cell
                vc.quota.setdefault(cell.chain, {})
                vc.unbound.setdefault(cell.chain, {})

    def __getitem__(self, name: str) -> VC:
        return self.by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def can_bind(self, vc: VC, cell: Cell, root: Cell) -> bool:
        """Safe relaxed buddy allocation: binding ``cell`` (cut from free-list ``root``) for
        ``vc`` must leave room for every VC's other unbound cells."""
        if vc.unbound.get(cell.chain, {}).get(cell.level, 0) <= 0:
            return False
        demand = dict(self.demand[cell.chain])
        demand[cell.level] -= 1
        return self.tree.safe_after(cell.chain, self.tree.split_cost(root, cell.level), demand)

    def bind(self, vc: VC, cell: Cell) -> None:
        self.tree.bind(cell, vc.name)
        vc.unbound[cell.chain][cell.level] -= 1
        vc.unbound_leaves -= cell.leaves
        self.demand[cell.chain][cell.level] -= 1
        vc.bound[cell.chain][cell.id] = cell
        vc.add_cell(cell)

    def unbind(self, vc: VC, cell: Cell, exact: bool = False) -> None:
        """``exact``: a search's tentative binding undone (``CellTree.unbind``)."""
        self.tree.unbind(cell, exact)
        vc.unbound[cell.chain][cell.level] += 1
        vc.unbound_leaves += cell.leaves
        self.demand[cell.chain][cell.level] += 1
        del vc.bound[cell.chain][cell.id]
        vc.drop_cell(cell)
