"""Binding a VC's cells to physical cells while a placement search goes (``Placer``'s part
that changes the VCs): which physical cell a VC cell of a level binds to (buddy allocation from
the lowest free-list level, preferring healthy cells no opportunistic job uses, safe relaxed
buddy check), binding inside a node down to single GPUs, and undoing a failed plan's bindings.
A mixin of ``placement.Placer``, which holds the tree, the VCs and the cells to avoid."""

from __future__ import annotations

from collections.abc import Callable

from labhive.scheduler.hived.cells import Cell, CellTree, Chain
from labhive.scheduler.hived.leaf_search import _leaf_parts, _room
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
            self.vcs.unbind(vc, cell, exact=True)
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
        """A free physical cell at ``level`` for ``vc``, as HiveD's ``buddyAlloc`` picks it:
        from the lowest free-list level that has cells, the free cells in the list's order
        (``cells.FreeLevel``) sorted (stably) by opportunistic GPUs, then down each one's
        children sorted the same way, a node with a down node's GPUs skipped; only where
        binding it keeps every VC's cells placeable. When none there will do (bad nodes),
        HiveD's ``safeRelaxedBuddyAlloc``: higher cells, the first its safety count allows."""
        lists = self.tree.free_list[info.name]
        lowest = level
        while lowest in lists and not lists[lowest]:
            lowest += 1
        if lowest not in lists:
            return None
        best, best_root, best_key = None, None, None
        for index, root in enumerate(lists[lowest].values()):
            if best_root is not None and root.oppo >= best_root.oppo:
                continue  # an earlier free cell with as few opportunistic GPUs ranks first
            if root.oppo == 0:  # no opportunistic GPU below: its first usable cell is best
                for cell in root.at_level(level):
                    if self._usable(cell, need, victims):
                        best, best_root = cell, root
                        break
                if best_root is root:
                    break
                continue
            for cell in root.at_level(level):
                if not self._usable(cell, need, victims):
                    continue
                key = _buddy_key(root, index, cell)
                if best_key is None or key < best_key:
                    best, best_root, best_key = cell, root, key
        if best is not None and best_root and self.vcs.can_bind(vc, best, best_root):
            return best
        return self._relaxed(vc, info, level, need, victims)

    def _usable(self, cell: Cell, need: int, victims: bool) -> bool:
        """Whether HiveD's mapping could take ``cell`` for a task of ``need`` GPUs: no node of
        it is down if it lies in one node (a larger cell may hold a down node beside the one
        the task takes), not a bad cell a failed search bound, room for the task."""
        if cell.bad and (cell.is_node or cell.node_cell is not None or cell in self.avoid):
            return False
        return cell.free == cell.leaves or _room(cell, need, victims)

    def _relaxed(self, vc: VC, info: Chain, level: int, need: int, victims: bool) -> Cell | None:
        """HiveD's ``safeRelaxedBuddyAlloc``: from each level above ``level``, bottom up, the
        first cells of its free list that can be split without leaving a VC short (every
        level's free cells less the VCs' unbound ones, plus what splitting the level above
        yields); each level's split cells go before those split below it, the cells already
        free at ``level`` after them all, and the candidates are ranked by opportunistic
        GPUs alone, then in that order."""
        lists = self.tree.free_list[info.name]
        demand = self.vcs.demand[info.name]
        splittable: dict[int, int] = {}
        carry = 0
        for lvl in info.levels:  # top first
            if lvl <= level:
                break
            splittable[lvl] = len(lists[lvl]) - demand.get(lvl, 0) + carry
            carry = splittable[lvl] * info.child_number[lvl]
        groups: list[list[Cell]] = [list(lists[level].values())]
        for lvl in sorted(splittable):  # bottom up: the first level that yields a cell wins
            take = min(len(lists[lvl]), splittable[lvl])
            if take <= 0:
                continue
            groups.insert(0, list(lists[lvl].values())[:take])
            best, best_root, best_key = None, None, None
            rank = 0
            for group in groups:
                for root in group:
                    for cell in root.at_level(level):
                        rank += 1
                        if self._usable(cell, need, victims) and (
                            best_key is None or (cell.oppo, rank) < best_key
                        ):
                            best, best_root, best_key = cell, root, (cell.oppo, rank)
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
            # Undone exactly, newest first: a plain unbind would merge buddies and append
            # the merged cell, reordering the free list under the search's earlier bindings
            # (whose exact undo then replays moves on a list they no longer describe).
            for cell in reversed(plan.bound[mark:]):
                self.vcs.unbind(vc, cell, exact=True)
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


def _buddy_key(root: Cell, index: int, cell: Cell) -> tuple[int, ...]:
    """HiveD's order of the cells buddy allocation tries: the free-list cell's opportunistic
    GPUs and its place in the list, then at each level down to ``cell`` the child's
    opportunistic GPUs and its place among its siblings (``getUsablePhysicalCells`` sorts
    stably by opportunistic GPUs alone)."""
    if cell is root:
        return (root.oppo, index)
    path: list[int] = []
    probe = cell
    while probe is not root:
        path.append(probe.order)
        path.append(probe.oppo)
        probe = probe.parent  # type: ignore[assignment]
    path.append(index)
    path.append(root.oppo)
    path.reverse()
    return tuple(path)
