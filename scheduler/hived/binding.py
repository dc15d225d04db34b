"""Binding a VC's cells to physical cells while a placement search goes (``Placer``'s part
that changes the VCs): which physical cell a VC cell of a level binds to (buddy allocation from
the lowest free-list level, preferring healthy cells no opportunistic job uses, safe relaxed
buddy check), binding inside a node down to single GPUs, and undoing a failed plan's bindings.
A mixin of ``placement.Placer``, which holds the tree, the VCs and the cells to avoid."""

from __future__ import annotations

from collections.abc import Callable

from labhive.scheduler.hived.cells import Cell, CellTree, Chain
from labhive.scheduler.hived.leaf_search import _leaf_parts, _oppo_path, _room
from labhive.scheduler.hived.plan import Plan
from labhive.scheduler.hived.vc import VC, VCs


class Binding:
    """The bindings a search makes on the way (the caller keeps or rolls them back)."""

    tree: CellTree
    vcs: VCs
    broken_tried: list[Cell]
    avoid: set[Cell]

    def undo(self, vc: VC, plan: Plan) -> None:
        for cell in reversed(plan.bound):
            if cell.bad:
                self.broken_tried.append(cell)
            self.vcs.unbind(vc, cell)
        plan.bound.clear()

    def _bind_for(
        self,
        vc: VC,
        chain: str,
        need: int,
        ok: Callable[[Cell], bool],
        plan: Plan,
        victims: bool,
    ) -> bool:
        """Bind one more of the VC's cells (several below node level) so a task fits."""
        info = self.tree.chains[chain]
        levels = []  # (a loop, not a generator: binding is on the path of many jobs)
        for lvl, n in vc.unbound.get(chain, {}).items():
            if n > 0:
                levels.append(lvl)
        levels.sort()
        for level in levels:
            if level < info.node_level or info.node_leaves < need:
                continue
            cell = self.choose_physical(vc, info, level, need, victims)
            if cell is not None:
                self.vcs.bind(vc, cell)
                plan.bound.append(cell)
                return True
        small = sorted((lvl for lvl in levels if lvl < info.node_level), reverse=True)
        return bool(small) and self._bind_inside_node(vc, info, small, need, ok, plan)

    def choose_physical(
        self, vc: VC, info: Chain, level: int, need: int, victims: bool
    ) -> Cell | None:
        """A free physical cell at ``level`` for ``vc``: lowest free-list level first (buddy),
        then, as HiveD splits, at every level down the cell holding the fewest opportunistic
        jobs (later guaranteed jobs preempt less), a free-list cell with a down node after
        healthy ones, then idle before busy; and only where binding it keeps every VC's cells
        placeable."""
        lists = self.tree.free_list[info.name]
        for root_level in info.levels[::-1]:
            if root_level < level or not lists[root_level]:
                continue
            best, best_root, best_key = None, None, None
            clean = False  # the best is idle with no opportunistic job on its path
            best_order = 0
            for root in lists[root_level].values():
                if clean and root.order >= best_order:
                    continue  # its cells' orders are above its own (see below)
                for cell in root.at_level(level):
                    if clean and cell.order >= best_order:
                        # A clean idle best ranks below every cell but a clean idle one of
                        # lower order; a root's cells come in order, so none follows here.
                        break
                    if cell.bad and cell in self.avoid:
                        continue  # bound by a search that failed on its bad nodes
                    idle = cell.free == cell.leaves
                    if not idle and (clean or not _room(cell, need, victims)):
                        continue  # once a clean idle cell is found no busy one ranks before it
                    path = _oppo_path(root, cell)
                    # A free-list cell holding a down node ranks after healthy ones of as
                    # few opportunistic jobs: HiveD appends a released cell to its free
                    # list's end, so the cell a failure emptied is its last choice (issue 34).
                    broken = root.bad > 0
                    if idle:
                        key = (path[0], broken, path, 0, 0, cell.order)
                    else:
                        key = (path[0], broken, path, 1, -cell.free, cell.order)
                    if best_key is None or key < best_key:
                        best, best_root, best_key = cell, root, key
                        best_order = cell.order
                        clean = idle and not broken and not any(path)
                    if clean and best is cell:
                        break  # later cells of this root rank after it
            if best is not None and best_root and self.vcs.can_bind(vc, best, best_root):
                return best
        return None

    def _bind_inside_node(
        self,
        vc: VC,
        info: Chain,
        levels: list[int],
        need: int,
        ok: Callable[[Cell], bool],
        plan: Plan,
    ) -> bool:
        """A VC with cells smaller than a node binds one that holds the whole task: a task
        lies inside one of its VC's cells, as in HiveD (two sockets' cells bound side by side
        are not a node's worth of guaranteed topology). The smallest such cell first, on a
        node where the VC already holds cells first."""
        parts = vc.parts.get(info.name, {})
        nodes = sorted(info.node_cells, key=lambda n: (n not in parts, n.order))
        for level in sorted(levels):
            if info.level_leaves[level] < need:
                continue
            for node in nodes:
                cell = self._free_inside(vc, node, level, ok, need)
                if cell is not None:
                    self.vcs.bind(vc, cell)
                    plan.bound.append(cell)
                    return True
        return 1 in levels and self._bind_gpus(vc, info, nodes, need, ok, plan)

    def _bind_gpus(
        self,
        vc: VC,
        info: Chain,
        nodes: list[Cell],
        need: int,
        ok: Callable[[Cell], bool],
        plan: Plan,
    ) -> bool:
        """A VC whose cells are single GPUs (LabHive's generated one-node clusters share a
        node GPU by GPU) binds several on one node for a multi-GPU task: a documented
        departure from HiveD, where such a task would never run."""
        parts = vc.parts.get(info.name, {})
        for node in nodes:
            have = sum(
                1
                for leaf in _leaf_parts(parts.get(node, []))
                if id(leaf) not in plan.taken and ok(leaf)
            )
            mark = len(plan.bound)
            while have < need and vc.unbound[info.name].get(1, 0) > 0:
                cell = self._free_inside(vc, node, 1, ok, 1)
                if cell is None:
                    break
                self.vcs.bind(vc, cell)
                plan.bound.append(cell)
                have += 1
            if have >= need:
                return True
            for cell in reversed(plan.bound[mark:]):
                self.vcs.unbind(vc, cell)
            del plan.bound[mark:]
        return False

    def _free_inside(
        self, vc: VC, node: Cell, level: int, ok: Callable[[Cell], bool], need: int
    ) -> Cell | None:
        best, best_key = None, None
        for cell in node.at_level(level):
            root = self.tree.free_root(cell)
            if root is None:
                continue
            usable = sum(1 for leaf in cell.leaf_cells() if ok(leaf))
            if usable < need:
                continue
            key = (-usable, root.level, cell.order)
            if (best_key is None or key < best_key) and self.vcs.can_bind(vc, cell, root):
                best, best_key = cell, key
        return best
