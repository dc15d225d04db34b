"""The physical cell forest at run time: who uses each GPU, which cells VCs have bound, the
buddy free list.

Counters (free, bad, guaranteed and opportunistic leaves) are kept on every cell and updated
along the path to the root when a leaf changes, so placement can judge a rack or a node in O(1)
instead of counting GPUs. The free list holds the maximal cells no VC has bound; binding a cell
splits its free ancestor buddy-style and unbinding merges buddies back, as in HiveD.
"""

from __future__ import annotations

from collections.abc import Iterator

from labhive.scheduler.core.buddy import first_short_level
from labhive.scheduler.core.config import ClusterConfig, PhysicalCell, chain_levels
from labhive.scheduler.core.model import TaskPlacement

FREE = None


class Cell:
    """A physical cell with the counters placement reads."""

    __slots__ = (
        "_at_level",
        "_leaf_list",
        "_node_list",
        "bad",
        "bound_below",
        "chain",
        "children",
        "free",
        "gpu",
        "guaranteed",
        "id",
        "is_node",
        "job",
        "leaf_id",
        "leaves",
        "level",
        "node",
        "node_cell",
        "oppo",
        "order",
        "parent",
        "pinned",
        "pinned_id",
        "placements",
        "prio",
        "prio_count",
        "type",
        "vc",
    )

    def __init__(self, spec: PhysicalCell, parent: Cell | None, order: int, is_node: bool) -> None:
        self.id = spec.id
        self.type = spec.cell_type
        self.level = spec.level
        self.chain = spec.chain
        self.parent = parent
        self.children: list[Cell] = []
        self.node = spec.node
        self.gpu = spec.gpu
        self.leaf_id = spec.leaf_id if spec.gpu is not None else ""
        self.order = order
        self.is_node = is_node
        self.node_cell: Cell | None = None
        self.leaves = 0
        self.free = 0  # healthy leaves no job uses
        self.bad = 0  # leaves on unhealthy nodes
        self.guaranteed = 0  # leaves used by guaranteed jobs
        self.oppo = 0  # leaves used by opportunistic jobs
        self.job: str | None = None  # leaves only
        self.prio = 0  # leaves only: the using job's effective priority
        self.vc: str | None = None  # set on the cell a VC has bound
        self.pinned = False
        self.pinned_id = spec.pinned_id
        self.bound_below = 0  # bound cells in this subtree, this one included
        self.prio_count: dict[int, int] = {}  # node cells: priority -> GPUs its jobs use
        self._leaf_list: list[Cell] | None = None
        self._at_level: dict[int, list[Cell]] = {}
        self._node_list: list[Cell] | None = None
        # Leaves only: (role, index) -> the TaskPlacement of a one-GPU task here, made once
        # (``base.task_placement``; what it holds never changes: a new config, a new tree).
        self.placements: dict[tuple[str, int], TaskPlacement] = {}

    def __repr__(self) -> str:
        return f"Cell({self.leaf_id or self.id})"

    def walk(self) -> Iterator[Cell]:
        yield self
        for child in self.children:
            yield from child.walk()

    def leaf_cells(self) -> list[Cell]:
        if self._leaf_list is None:
            self._leaf_list = [c for c in self.walk() if not c.children]
        return self._leaf_list

    def at_level(self, level: int) -> list[Cell]:
        """The cells of ``level`` in this subtree, in order. Cached: the tree's shape never
        changes (a reconfiguration builds a new one), and buddy allocation asks for the
        same lists on every binding."""
        cells = self._at_level.get(level)
        if cells is None:
            if self.level == level:
                cells = [self]
            else:
                cells = [c for child in self.children for c in child.at_level(level)]
            self._at_level[level] = cells
        return cells

    def nodes(self) -> list[Cell]:
        """The node-level cells in this subtree, or the node holding this cell."""
        if self._node_list is None:
            if self.node_cell is not None:
                self._node_list = [self.node_cell]
            else:
                self._node_list = [c for c in self.walk() if c.is_node]
        return self._node_list

    def ancestors(self) -> Iterator[Cell]:
        cell = self.parent
        while cell is not None:
            yield cell
            cell = cell.parent

    def owner(self) -> Cell | None:
        """The bound cell (a VC's) this cell lies in, if any."""
        cell: Cell | None = self
        while cell is not None:
            if cell.vc is not None:
                return cell
            cell = cell.parent
        return None

    @property
    def healthy(self) -> bool:
        return self.bad == 0


class Chain:
    """Static facts of one chain (a top-level cell type): its levels and its cells."""

    def __init__(self, config: ClusterConfig, name: str) -> None:
        self.name = name
        self.levels, self.child_number = chain_levels(config.cell_types, name)
        self.node_level = next(
            config.cell_types[t].level
            for t in _types_down(config, name)
            if config.cell_types[t].is_node_level
        )
        self.leaf_type = _types_down(config, name)[-1]
        self.level_leaves: dict[int, int] = {1: 1}
        for level in reversed(self.levels[:-1]):
            self.level_leaves[level] = self.level_leaves[level - 1] * self.child_number[level]
        self.level_type = dict(zip(self.levels, _types_down(config, name), strict=True))
        self.tops: list[Cell] = []
        self.node_cells: list[Cell] = []
        #: Whether all its nodes share one parent (then no node lies nearer a gang's last
        #: task than another: best fit ranks on free GPUs alone; ``placement._best_free``).
        self.one_parent = False
        #: Whether its nodes' children are their GPUs (no level between).
        self.flat = False

    @property
    def node_leaves(self) -> int:
        return self.level_leaves[self.node_level]


def _types_down(config: ClusterConfig, chain: str) -> list[str]:
    out: list[str] = []
    name: str | None = chain
    while name is not None:
        out.append(name)
        name = config.cell_types[name].child
    return out


class FreeLevel:
    """One level of a chain's buddy free list, in HiveD's order.

    HiveD (``pkg/algorithm``) keeps each level as a slice: a split appends the parent's
    children at the end, a merge appends the merged cell at the end, and a removal moves the
    slice's last cell into the removed one's place. Binding tries free cells in that order
    (after fewer opportunistic leaves), so LabHive keeps the same order to choose as HiveD
    does after failures and releases (issue 34). ``where`` maps a cell's id to its index: a
    membership test and a removal cost O(1)."""

    __slots__ = ("cells", "where")

    def __init__(self) -> None:
        self.cells: list[Cell] = []
        self.where: dict[str, int] = {}

    def __contains__(self, cell_id: object) -> bool:
        return cell_id in self.where

    def __len__(self) -> int:
        return len(self.cells)

    def __bool__(self) -> bool:
        return bool(self.cells)

    def values(self) -> list[Cell]:
        """The cells in list order (the name a dict's would have: callers iterate it)."""
        return self.cells

    def append(self, cell: Cell) -> None:
        self.where[cell.id] = len(self.cells)
        self.cells.append(cell)

    def remove(self, cell: Cell) -> int:
        """Take ``cell`` out as Go's ``CellList.remove`` does (the last cell takes its
        place); returns the index it had, for ``put_back``."""
        index = self.where.pop(cell.id)
        last = self.cells.pop()
        if last is not cell:
            self.cells[index] = last
            self.where[last.id] = index
        return index

    def put_back(self, cell: Cell, index: int) -> None:
        """Undo ``remove(cell)`` that returned ``index``: the list is as it was before."""
        if index == len(self.cells):
            self.append(cell)
            return
        moved = self.cells[index]
        self.where[moved.id] = len(self.cells)
        self.cells.append(moved)
        self.cells[index] = cell
        self.where[cell.id] = index

    def pop(self) -> Cell:
        """Undo the last ``append``."""
        cell = self.cells.pop()
        del self.where[cell.id]
        return cell


#: One change to a free list, as ``CellTree.bind`` and ``unbind`` log it for an exact undo:
#: (level, cell, index) for a removal at ``index``, (level, cell, -1) for an append.
Move = tuple["FreeLevel", "Cell", int]


class CellTree:
    """Every physical cell, the buddy free list and per-node indexes."""

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self.chains: dict[str, Chain] = {}
        self.cells: dict[str, Cell] = {}
        self.leaf: dict[str, Cell] = {}
        self.nodes: dict[str, list[Cell]] = {}
        self.pinned: dict[str, Cell] = {}
        self.free_list: dict[str, dict[int, FreeLevel]] = {}
        # A bound cell's id -> the free-list moves its binding made (``unbind(exact=True)``).
        self._split: dict[str, list[Move]] = {}
        # Per chain, the nodes with a free healthy GPU: what most searches start from.
        self.open: dict[str, dict[Cell, None]] = {}
        self.oppo_total = 0  # GPUs opportunistic jobs use, cluster-wide
        self.free_total = 0  # healthy GPUs no job uses, cluster-wide
        self.bad_total = 0  # leaves on unhealthy nodes, cluster-wide
        # Bumped whenever a leaf is taken or left, or a node's health changes: a failed search's
        # record (``shortfall``) still describes the cells while this is what it was then.
        # (Binding needs no bump: a kept binding comes with a leaf taken, an unbinding after
        # one left, and a failed search undoes its own.)
        self.moves = 0
        order = 0
        for spec in config.physical_cells:
            chain = self.chains.get(spec.chain)
            if chain is None:
                chain = self.chains[spec.chain] = Chain(config, spec.chain)
                self.free_list[spec.chain] = {level: FreeLevel() for level in chain.levels}
            top, order = self._build(spec, None, order)
            chain.tops.append(top)
            self.free_list[spec.chain][top.level].append(top)
        for chain in self.chains.values():
            chain.node_cells = [c for t in chain.tops for c in t.walk() if c.is_node]
            chain.one_parent = len({c.parent for c in chain.node_cells}) == 1
            chain.flat = all(n.children and not n.children[0].children for n in chain.node_cells)
            self.open[chain.name] = dict.fromkeys(chain.node_cells)
            self.free_total += sum(t.leaves for t in chain.tops)
        for pid, spec in config.pinned.items():
            self.pinned[pid] = self.cells[spec.id]

    def _build(self, spec: PhysicalCell, parent: Cell | None, order: int) -> tuple[Cell, int]:
        is_node = self.config.cell_types[spec.cell_type].is_node_level
        cell = Cell(spec, parent, order, is_node)
        order += 1
        self.cells[cell.id] = cell
        if is_node:
            self.nodes.setdefault(cell.node or "", []).append(cell)
        if parent is not None and (parent.is_node or parent.node_cell is not None):
            cell.node_cell = parent if parent.is_node else parent.node_cell
        for child_spec in spec.children:
            child, order = self._build(child_spec, cell, order)
            cell.children.append(child)
        if not spec.children:
            cell.leaves = cell.free = 1
            self.leaf[cell.leaf_id] = cell
        else:
            cell.leaves = cell.free = sum(c.leaves for c in cell.children)
        return cell, order

    # ---- leaves ------------------------------------------------------------------------------

    def use(self, leaf: Cell, job_id: str, prio: int) -> None:
        self.moves += 1
        leaf.job, leaf.prio = job_id, prio
        healthy = leaf.bad == 0
        guaranteed = prio >= 0
        if not guaranteed:
            self.oppo_total += 1
        if healthy:
            self.free_total -= 1
        cell: Cell | None = leaf
        while cell is not None:
            if healthy:
                cell.free -= 1
            if guaranteed:
                cell.guaranteed += 1
            else:
                cell.oppo += 1
            if cell.is_node:
                cell.prio_count[prio] = cell.prio_count.get(prio, 0) + 1
                if cell.free == 0:
                    self.open[cell.chain].pop(cell, None)
            cell = cell.parent

    def release(self, leaf: Cell) -> None:
        self.moves += 1
        healthy = leaf.bad == 0
        guaranteed = leaf.prio >= 0
        if not guaranteed:
            self.oppo_total -= 1
        if healthy:
            self.free_total += 1
        leaf.job = None
        cell: Cell | None = leaf
        while cell is not None:
            if healthy:
                cell.free += 1
            if guaranteed:
                cell.guaranteed -= 1
            else:
                cell.oppo -= 1
            if cell.is_node:
                cell.prio_count[leaf.prio] -= 1
                if cell.free > 0:
                    self.open[cell.chain][cell] = None
            cell = cell.parent

    def use_run(self, leaves: list[Cell], node: Cell, job_id: str, prio: int) -> int:
        """``use`` of each of ``leaves`` (distinct leaves of ``node``, or ``node`` itself),
        with the counters of ``node`` and its ancestors changed once for all: a task's GPUs
        taken in one step, not one walk to the root per GPU. Returns how many were healthy
        (what the VC's counters need)."""
        guaranteed = prio >= 0
        healthy = 0
        if leaves[0].parent is node:  # GPUs right under their node: their own counters only
            for leaf in leaves:
                leaf.job, leaf.prio = job_id, prio
                if leaf.bad == 0:
                    healthy += 1
                    leaf.free -= 1
                if guaranteed:
                    leaf.guaranteed += 1
                else:
                    leaf.oppo += 1
        else:
            for leaf in leaves:
                leaf.job, leaf.prio = job_id, prio
                ok = leaf.bad == 0
                healthy += ok
                cell = leaf
                while cell is not node:  # the cells between a GPU and its node
                    if ok:
                        cell.free -= 1
                    if guaranteed:
                        cell.guaranteed += 1
                    else:
                        cell.oppo += 1
                    cell = cell.parent  # type: ignore[assignment]
        n = len(leaves)
        self.moves += n
        if not guaranteed:
            self.oppo_total += n
        self.free_total -= healthy
        node.prio_count[prio] = node.prio_count.get(prio, 0) + n
        up: Cell | None = node
        while up is not None:
            up.free -= healthy
            if guaranteed:
                up.guaranteed += n
            else:
                up.oppo += n
            up = up.parent
        if node.free == 0:
            self.open[node.chain].pop(node, None)
        return healthy

    def release_run(self, leaves: list[Cell], node: Cell) -> int:
        """``release`` of each of ``leaves`` (distinct busy leaves of ``node``, or ``node``
        itself), with the counters of ``node`` and its ancestors changed once for all. Returns
        how many of them were healthy: the VC's counters change by as much (``base``), and
        this loop is the one that reads every leaf."""
        counts = node.prio_count
        n = len(leaves)
        if n == 1:  # the usual run, a one-GPU task: no per-leaf sums to keep
            leaf = leaves[0]
            prio = leaf.prio
            healthy = 1 if leaf.bad == 0 else 0
            guaranteed = 1 if prio >= 0 else 0
            counts[prio] -= 1
            leaf.job = None
            cell = leaf
            while cell is not node:
                cell.free += healthy
                if guaranteed:
                    cell.guaranteed -= 1
                else:
                    cell.oppo -= 1
                cell = cell.parent  # type: ignore[assignment]
        else:
            healthy = guaranteed = 0
            for leaf in leaves:
                ok = leaf.bad == 0
                mine = leaf.prio >= 0
                healthy += ok
                guaranteed += mine
                counts[leaf.prio] -= 1
                leaf.job = None
                cell = leaf
                while cell is not node:
                    if ok:
                        cell.free += 1
                    if mine:
                        cell.guaranteed -= 1
                    else:
                        cell.oppo -= 1
                    cell = cell.parent  # type: ignore[assignment]
        oppo = n - guaranteed
        self.moves += n
        self.free_total += healthy
        up: Cell | None = node
        if oppo:
            self.oppo_total -= oppo
            while up is not None:
                up.free += healthy
                up.guaranteed -= guaranteed
                up.oppo -= oppo
                up = up.parent
        else:  # guaranteed jobs' GPUs only (the usual): no opportunistic counts change
            while up is not None:
                up.free += healthy
                up.guaranteed -= guaranteed
                up = up.parent
        if node.free > 0:
            self.open[node.chain][node] = None
        return healthy

    def set_health(self, node: Cell, healthy: bool) -> None:
        self.moves += 1
        for leaf in node.leaf_cells():
            if (leaf.bad == 0) == healthy:
                continue
            delta = 1 if healthy else -1
            self.bad_total -= delta
            if leaf.job is None:
                self.free_total += delta
            cell: Cell | None = leaf
            while cell is not None:
                cell.bad -= delta
                if leaf.job is None:
                    cell.free += delta
                cell = cell.parent
        if node.free > 0:
            self.open[node.chain][node] = None
        else:
            self.open[node.chain].pop(node, None)

    # ---- binding (buddy free list) -----------------------------------------------------------

    def free_root(self, cell: Cell) -> Cell | None:
        """The free-list cell that holds ``cell``; None when a VC has it or part of it bound."""
        if cell.bound_below:
            return None
        lists = self.free_list[cell.chain]
        probe: Cell | None = cell
        while probe is not None:
            if probe.id in lists[probe.level]:
                return probe
            if probe.vc is not None:
                return None
            probe = probe.parent
        return None

    def split_cost(self, root: Cell, level: int) -> dict[int, int]:
        """How the free list's per-level counts change when a level cell is cut from root."""
        chain = self.chains[root.chain]
        delta = {root.level: -1}
        for lvl in range(root.level, level, -1):
            delta[lvl - 1] = delta.get(lvl - 1, 0) + chain.child_number[lvl] - 1
        return delta

    def bind(self, cell: Cell, vc: str) -> None:
        """Cut ``cell`` from its free-list cell as HiveD's ``removeCellFromFreeList`` does:
        from ``cell`` up, each split parent's children are appended to their level, then the
        cell on the path is removed (the level's last cell takes its place). The moves are
        kept until the cell is unbound, so ``unbind(exact=True)`` can restore the order."""
        root = self.free_root(cell)
        assert root is not None, f"{cell} is not free to bind"
        lists = self.free_list[cell.chain]
        moves: list[Move] = []
        probe = cell
        while probe is not root:
            parent = probe.parent
            assert parent is not None
            for child in parent.children:
                level = lists[child.level]
                level.append(child)
                moves.append((level, child, -1))
            level = lists[probe.level]
            moves.append((level, probe, level.remove(probe)))
            probe = parent
        level = lists[root.level]
        moves.append((level, root, level.remove(root)))
        self._split[cell.id] = moves
        cell.vc = vc
        up: Cell | None = cell
        while up is not None:
            up.bound_below += 1
            up = up.parent

    def unbind(self, cell: Cell, exact: bool = False) -> None:
        """Give ``cell`` back to the free list. ``exact``: undo its binding move for move (a
        search's tentative binding, undone in the reverse order of binding before any other
        change to the list), so the list is as if it was never bound: HiveD searches on a copy
        of its free list. Otherwise as HiveD's ``addCellToFreeList``: while all its buddies
        are free they are removed and the parent is tried, and the merged cell is appended."""
        cell.vc = None
        probe: Cell | None = cell
        while probe is not None:
            probe.bound_below -= 1
            probe = probe.parent
        lists = self.free_list[cell.chain]
        moves = self._split.pop(cell.id)
        if exact:
            for level, moved, index in reversed(moves):
                if index < 0:
                    popped = level.pop()
                    # Another change since this binding would make the undo wrong: say so.
                    assert popped is moved, f"{cell}: unbound out of binding order"
                else:
                    level.put_back(moved, index)
            return
        merged = cell
        parent = cell.parent
        while parent is not None and parent.bound_below == 0 and parent.vc is None:
            if not all(c is merged or c.id in lists[c.level] for c in parent.children):
                break
            for child in parent.children:
                if child is not merged:
                    lists[child.level].remove(child)
            merged = parent
            parent = parent.parent
        lists[merged.level].append(merged)

    def supply(self, chain: str) -> dict[int, int]:
        return {level: len(cells) for level, cells in self.free_list[chain].items()}

    def safe_after(self, chain: str, delta: dict[int, int], demand: dict[int, int]) -> bool:
        """Whether every VC's unbound cells still fit once ``delta`` is applied to the free list."""
        info = self.chains[chain]
        supply = self.supply(chain)
        for level, change in delta.items():
            supply[level] = supply.get(level, 0) + change
        return first_short_level(info.levels, info.child_number, supply, demand) is None
