"""Topology-aware search for where a gang (or one task) goes, without changing anything but
the bindings it makes on the way (the caller keeps or rolls them back).

Guaranteed jobs search their VC's bound cells first, packing tasks onto the fullest node that
still fits (best fit), and bind one more of the VC's cells only when those are full: the new
physical cell comes from the lowest free-list level that has one (buddy allocation), preferring
healthy cells no opportunistic job uses, and any choice must keep every VC's remaining cells
placeable (safe relaxed buddy allocation). Opportunistic jobs search all physical cells for idle
GPUs, preferring cells no VC has bound, because those are the last a guaranteed job reclaims.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from labhive.scheduler.hived.cells import Cell, CellTree, Chain
from labhive.scheduler.hived.vc import VC, VCs

#: ``threshold`` of a search: None = free GPUs only; p = GPUs of jobs with priority <= p too.
Threshold = int | None

#: A node's preemption level when free GPUs suffice: below every level that preempts.
NO_VICTIMS = -2
#: The level when only opportunistic jobs (priority -1, ``jobs.OPPORTUNISTIC``) are preempted.
OPPORTUNISTIC_ONLY = -1
#: How a free GPU ranks against busy ones: below any job priority, opportunistic included.
FREE_RANK = -100
#: More free GPUs than any node has: where a best-fit scan starts.
UNBOUNDED_FREE = 1 << 62


@dataclass(slots=True)
class TaskNeed:
    role: str
    index: int
    leaves: int


class TaskNeeds(list[TaskNeed]):
    """A unit's task needs in one chain (``sizing._needs``), with the leaves they take in all:
    every attempt bounds its search by the least of those over its chains."""

    __slots__ = ("leaves",)

    def __init__(self) -> None:
        super().__init__()
        self.leaves = 0

    def add(self, task: TaskNeed) -> None:
        self.append(task)
        self.leaves += task.leaves


@dataclass(slots=True, init=False)
class Plan:
    chain: str
    placed: list[tuple[TaskNeed, Cell, list[Cell]]]
    bound: list[Cell]
    taken: set[int]  # id() of leaves chosen
    free_taken: dict[Cell, int]  # node -> free leaves chosen
    taken_on: dict[Cell, int]  # node -> leaves chosen
    busy: int  # leaves chosen that a job uses (none: the plan has no victims)

    def __init__(self, chain: str) -> None:
        # (written out: a dataclass's own, with five default factories, cost as much as
        # the rest of a one-task search's set-up)
        self.chain = chain
        self.placed = []
        self.bound = []
        self.taken = set()
        self.free_taken = {}
        self.taken_on = {}
        self.busy = 0

    def add(self, task: TaskNeed, node: Cell, leaves: list[Cell]) -> None:
        self.placed.append((task, node, leaves))
        free = 0
        for leaf in leaves:  # one loop, no generators: this runs once per task
            self.taken.add(id(leaf))
            if leaf.job is None:
                free += 1
        self.free_taken[node] = self.free_taken.get(node, 0) + free
        self.taken_on[node] = self.taken_on.get(node, 0) + len(leaves)
        self.busy += len(leaves) - free

    def add_free(self, task: TaskNeed, node: Cell, leaves: list[Cell]) -> None:
        """``add`` of free GPUs (a free-only search's: none has a job)."""
        self.placed.append((task, node, leaves))
        taken = self.taken
        for leaf in leaves:
            taken.add(id(leaf))
        n = len(leaves)
        self.free_taken[node] = self.free_taken.get(node, 0) + n
        self.taken_on[node] = self.taken_on.get(node, 0) + n

    def victims(self) -> set[str]:
        if not self.busy:
            return set()
        return {leaf.job for _, _, leaves in self.placed for leaf in leaves if leaf.job}


def _is_free(leaf: Cell) -> bool:
    return leaf.bad == 0 and leaf.job is None


def _not_guaranteed(leaf: Cell) -> bool:
    return leaf.bad == 0 and (leaf.job is None or leaf.prio < 0)


def usable(threshold: Threshold) -> Callable[[Cell], bool]:
    """Which leaf cells a search with ``threshold`` may take: healthy, and free or used by a
    job it may preempt. The one definition, for the search and for the record of why it
    failed (``Placer.room``)."""
    if threshold is None:
        return _is_free  # one function, so pick_leaves can tell free-only searches apart
    return lambda leaf: leaf.bad == 0 and (leaf.job is None or leaf.prio <= threshold)


def usable_on(node: Cell, threshold: Threshold) -> int:
    """``usable`` leaves of a whole node, from its counters (a leaf that is busy on an
    unhealthy node counts too: its job is stopped with the node)."""
    count = node.free
    if threshold is not None:
        for p, n in node.prio_count.items():
            if p <= threshold:
                count += n
    return count


def victim_threshold(lower: list[int], oppo_running: bool) -> Threshold:
    """The threshold of a search that may preempt, for a job whose VC runs jobs of the
    priorities ``lower`` below its own: the highest of them, or opportunistic jobs only;
    None when there is nobody to preempt."""
    if not lower and not oppo_running:
        return None
    return max(lower, default=OPPORTUNISTIC_ONLY)


class Placer:
    """Searches one chain for a VC's (or an opportunistic) job."""

    def __init__(self, tree: CellTree, vcs: VCs) -> None:
        self.tree = tree
        self.vcs = vcs
        #: Cells with unhealthy leaves that a failed search had bound (``undo`` notes them),
        #: and those a search must not bind: HiveD's buddy allocation backtracks from a cell
        #: whose bad nodes the placement would need to the next one (``attempt``'s retry).
        self.broken_tried: list[Cell] = []
        self.avoid: set[Cell] = set()

    # ---- guaranteed ------------------------------------------------------------------------

    def guaranteed(
        self,
        vc: VC,
        chain: str,
        tasks: list[TaskNeed],
        threshold: Threshold,
        only: set[Cell] | None = None,
        pinned: Cell | None = None,
        bind: bool = True,
    ) -> Plan | None:
        """Place every task in ``vc``'s cells of ``chain``, or nothing (bindings undone).

        ``only``: the bound nodes that changed since the same search last failed; no other
        can have become a fit. ``bind``: whether binding more cells may help (it failed then
        too, unless physical cells were freed since). ``pinned``: the job named one of the
        VC's pinned cells and runs there or nowhere.
        """
        plan = Plan(chain)
        ok = usable(threshold)
        last: Cell | None = None
        whole, partial = _regions(vc, chain, pinned)
        opened = vc.open.get(chain, {}) if pinned is None else None
        prev_need = 0
        # Largest first (a stable sort: one task, or tasks of one size, keep their order).
        ordered = tasks if _one_size(tasks) else sorted(tasks, key=_larger_first)
        free_only = threshold is None
        free_taken = plan.free_taken
        info = self.tree.chains[chain]
        one_parent = info.one_parent
        flat = free_only and info.flat  # a free-only pick on a whole node: its first free GPUs
        spare_first = bind and pinned is None  # may bind quota to spare a guaranteed job
        # A gang's later scans for one task size, where nearness ranks no node above another:
        # the nodes that fit, ranked once, worst last (``_ranked``); (size, scans so far).
        ranked: list[Cell] = []
        scans = (0, 0)
        for task in ordered:
            need = task.leaves
            node = None
            # A free-only search skips the scan when the previous task's node is the best fit
            # again: this task is as large and that node still holds it. Safe because the
            # node won the last scan (same candidates, since only a failed scan binds more
            # cells; same need, so the same nodes qualify); since then only its own free count
            # dropped, which ranks it better, and it now counts as next to the gang's previous
            # task, which no node outside its parent does. (A gang of one-GPU tasks, the
            # simulator's usual job, scans once per node, not once per GPU.)
            if (
                free_only
                and need == prev_need
                and last is not None
                and last in whole
                and last.free - free_taken.get(last, 0) >= need
            ):
                node = last
            spare = spare_first
            while node is None:
                if free_only and opened is not None and only is None and not partial:
                    # ``_best_node``'s free-only case when the VC has whole nodes only
                    scans = (need, scans[1] + 1) if scans[0] == need else (need, 1)
                    if one_parent and scans[1] > 1:
                        if scans[1] == 2:
                            ranked = _ranked(opened, need, free_taken)
                        node = _next_ranked(ranked, need, free_taken)
                    else:
                        near = last.parent if last is not None else None
                        node = _best_free(opened, need, near, free_taken, one_parent)[0]
                    level = NO_VICTIMS
                else:
                    node, level = self._best_node(
                        whole, partial, chain, need, threshold, ok, plan, last, only, opened
                    )
                if node is not None and level >= 0 and spare:
                    spare = False
                    node = self._spare_guaranteed(vc, chain, task.leaves, plan, node, only)
                    if node is None:
                        whole, partial = _regions(vc, chain, pinned)
                        opened = vc.open.get(chain, {}) if pinned is None else None
                        only = None if only is None else only | set(plan.bound[-1].nodes())
                        continue
                if node is not None:
                    break
                if (
                    not bind
                    or pinned is not None
                    or not self._bind_for(vc, chain, task.leaves, ok, plan, threshold is not None)
                ):
                    self.undo(vc, plan)
                    return None
                if only is not None:
                    only = only | set(plan.bound[-1].nodes())
                whole, partial = _regions(vc, chain, pinned)
                opened = vc.open.get(chain, {}) if pinned is None else None
                scans = (0, 0)  # more nodes now: scan (and rank) afresh
            region = [node]
            if not node.is_node:  # one of the VC's cells inside a node
                node = node.node_cell
                assert node is not None
            elif node not in whole:  # the VC's single-GPU cells on this node, together
                region = _leaf_parts(partial[node])
            if flat and region[0] is node:
                # ``pick_leaves``' free-only case on a node whose children are its GPUs
                plan.add_free(task, node, _first_free(node, need, plan.taken))
            else:
                counters = free_only and region[0] is node and node not in plan.taken_on
                plan.add(task, node, pick_leaves(region, need, ok, plan.taken, counters))
            last, prev_need = node, need
        return plan

    def room(
        self,
        vc: VC,
        chain: str,
        need: int,
        threshold: Threshold,
        pinned: Cell | None,
        count: bool = True,
    ) -> tuple[int, int]:
        """How many tasks of ``need`` leaves the VC's bound cells of ``chain`` hold now, and
        how many more their unhealthy leaves would: counted in the regions a search places a
        task in (``_regions``, ``_task_regions``) with the leaves it may take (``usable``).
        For the record of a failed search (``failures``), never on its way. Not ``count``:
        the caller knows the first number (the failed search found it; 0 is returned), so
        only unhealthy leaves are counted, and only while some node is down."""
        if not count and self.tree.bad_total == 0:
            return 0, 0
        ok = usable(threshold)
        whole, partial = _regions(vc, chain, pinned)
        fits = bad = 0
        for node in whole:
            if count:
                fits += usable_on(node, threshold) // need
            if node.bad:
                bad += node.bad // need
        for node, parts in partial.items():
            for part in _task_regions(node, parts):
                leaves = part.leaf_cells() if part is not node else _leaf_parts(parts)
                if count:
                    fits += sum(1 for leaf in leaves if ok(leaf)) // need
                bad += sum(leaf.bad for leaf in leaves) // need
        return fits, bad

    def bindable(
        self, vc: VC, chain: str, need: int, threshold: Threshold, probe: bool = True
    ) -> tuple[int, int]:
        """How many tasks of ``need`` leaves the VC's unbound cells of ``chain`` would hold:
        in cells a search could bind now (the choices of ``_bind_for``), and in the others
        (the free physical cells left are unhealthy or guaranteed to other VCs). Not
        ``probe``: the caller knows none can be bound (a search for one task just failed)."""
        info = self.tree.chains[chain]
        ok = usable(threshold)
        can = cannot = 0
        for level, n in vc.unbound.get(chain, {}).items():
            if n <= 0:
                continue
            if level >= info.node_level:
                nodes = info.level_leaves[level] // info.node_leaves
                per_cell = nodes * (info.node_leaves // need)
                found = (
                    probe
                    and per_cell > 0
                    and self.choose_physical(vc, info, level, need, threshold is not None)
                    is not None
                )
            else:
                per_cell = info.level_leaves[level] // need
                found = (
                    probe
                    and per_cell > 0
                    and any(
                        self._free_inside(vc, node, level, ok, need) is not None
                        for node in info.node_cells
                    )
                )
            if found:
                can += n * per_cell
            else:
                cannot += n * per_cell
        return can, cannot

    def _spare_guaranteed(
        self, vc: VC, chain: str, need: int, plan: Plan, node: Cell, only: set[Cell] | None
    ) -> Cell | None:
        """HiveD binds a VC's unbound quota on idle or opportunistic cells before it preempts
        a guaranteed job of the VC: ``node`` (which would preempt one) when no such binding
        exists, else None (the caller searches again, the new cell included)."""
        mark = len(plan.bound)
        if not self._bind_for(vc, chain, need, _not_guaranteed, plan, True):
            return node
        return None if len(plan.bound) > mark else node

    def undo(self, vc: VC, plan: Plan) -> None:
        for cell in reversed(plan.bound):
            if cell.bad:
                self.broken_tried.append(cell)
            self.vcs.unbind(vc, cell)
        plan.bound.clear()

    def _best_node(
        self,
        whole: dict[Cell, None],
        partial: dict[Cell, list[Cell]],
        chain: str,
        need: int,
        threshold: Threshold,
        ok: Callable[[Cell], bool],
        plan: Plan,
        last: Cell | None,
        only: set[Cell] | None = None,
        opened: dict[Cell, None] | None = None,
    ) -> tuple[Cell | None, int]:
        """Best fit: the node with the fewest usable GPUs that still holds the task, next to
        the gang's previous task where possible, preempting as few jobs as it can; with the
        highest priority it must preempt there (``NO_VICTIMS``: none; ``OPPORTUNISTIC_ONLY``)."""
        best, best_key = None, None
        near = last.parent if last else None
        if only is not None:
            whole = dict.fromkeys(n for n in only if n in whole)
        if threshold is None:
            if opened is not None:
                candidates: Any = opened if only is None else [n for n in opened if n in whole]
            else:
                candidates = [n for n in whole if n.free > 0]
            one_parent = self.tree.chains[chain].one_parent
            best, best_key = _best_free(candidates, need, near, plan.free_taken, one_parent)
        else:
            # One pass for every victim priority: a node's key starts with the lowest
            # priority it must preempt, so opportunistic jobs go first, then the lowest.
            taken_on, free_taken = plan.taken_on, plan.free_taken
            for node in whole:
                counts = node.prio_count
                usable = usable_on(node, threshold)
                if usable < need:
                    continue
                if taken_on:
                    usable -= taken_on.get(node, 0)
                    if usable < need:
                        continue
                have = node.free - taken_on.get(node, 0)
                level = NO_VICTIMS
                if have < need:
                    for p in sorted(counts):  # ascending, so stop at the first above
                        if p > threshold:
                            break
                        have += counts[p]
                        level = p
                        if have >= need:
                            break
                if best_key is not None and level > best_key[0]:
                    continue  # keys rank by this level first: this node cannot win
                free = node.free - free_taken.get(node, 0)
                rest = (max(0, need - free), node.parent is not near, usable, node.order)
                victims = 0
                if level > NO_VICTIMS:
                    if best_key is not None and (level, 1, *rest) >= best_key:
                        continue  # even with one victim (the fewest possible) it cannot win
                    victims = len(fewest_victims([node], need, ok, plan.taken))
                key = (level, victims, *rest)
                if best_key is None or key < best_key:
                    best, best_key = node, key
        for node, parts in partial.items():
            for part in _task_regions(node, parts):  # a task lies inside one VC cell
                free = usable = spare = 0
                for leaf in part.leaf_cells() if part is not node else _leaf_parts(parts):
                    if id(leaf) in plan.taken or not ok(leaf):
                        continue
                    usable += 1
                    free += leaf.job is None
                    spare += leaf.job is None or leaf.prio < 0
                if usable < need:
                    continue
                victims = 0
                if free >= need or threshold is None:
                    level = NO_VICTIMS
                else:
                    level = OPPORTUNISTIC_ONLY if spare >= need else threshold
                    region = [part] if part is not node else _leaf_parts(parts)
                    victims = len(fewest_victims(region, need, ok, plan.taken))
                key = (
                    level,
                    victims,
                    max(0, need - free),
                    node.parent is not near,
                    usable,
                    part.order,
                )
                if best_key is None or key < best_key:
                    best, best_key = part, key
        return best, NO_VICTIMS if best_key is None else best_key[0]

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

    # ---- opportunistic -----------------------------------------------------------------------

    def opportunistic(self, chain: str, tasks: list[TaskNeed]) -> Plan | None:
        """Idle GPUs anywhere in the chain, cells no VC has bound first; never preempts."""
        plan = Plan(chain)
        ok = usable(None)
        last: Cell | None = None
        for task in sorted(tasks, key=lambda t: -t.leaves):
            best, best_key = None, None
            for node in self.tree.open[chain]:
                free = node.free - plan.free_taken.get(node, 0)
                if free < task.leaves:
                    continue
                key = (
                    node.parent is not (last.parent if last else None),
                    node.bound_below > 0 or node.owner() is not None,
                    free,
                    node.order,
                )
                if best_key is None or key < best_key:
                    best, best_key = node, key
            if best is None:
                return None
            counters = best not in plan.taken_on
            plan.add(task, best, pick_leaves([best], task.leaves, ok, plan.taken, counters))
            last = best
        return plan


def _larger_first(task: TaskNeed) -> int:
    return -task.leaves


def _one_size(tasks: list[TaskNeed]) -> bool:
    """Whether the tasks all take as many leaves (so sorting keeps them as they are): a
    loop, cheaper than a sort's key call per task for the usual gang of one-GPU tasks."""
    size = tasks[0].leaves if tasks else 0
    for task in tasks:  # noqa: SIM110 (``all`` would take a generator)
        if task.leaves != size:
            return False
    return True


def _best_free(
    candidates: Any,
    need: int,
    near: Cell | None,
    free_taken: dict[Cell, int],
    one_parent: bool = False,
) -> tuple[Cell | None, tuple[int | bool, ...] | None]:
    """Best fit among whole nodes using free GPUs only, with its key as ``_best_node``
    ranks it: next to ``near`` first, then the fewest free GPUs, then ``order``.

    The loop of most searches, so it rejects on the node's own counter before looking up
    what the plan took there (which only lowers it), and ranks on the key's varying part,
    part by part (no key tuple per node; orders are unique, so no two nodes tie). Where
    nearness cannot tell the candidates apart (no ``near``, or ``one_parent``: all of them
    share a parent) it ranks on free GPUs and order alone (``_fittest``).
    """
    if near is None or one_parent:
        best, best_free = _fittest(candidates, need, free_taken)
        if best is None:
            return None, None
        return best, (NO_VICTIMS, 0, 0, best.parent is not near, best_free, best.order)
    best = None
    best_far, best_free, best_order = True, 0, 0
    for node in candidates:
        free = node.free
        if free < need:
            continue
        if free_taken and node in free_taken:  # (``in``: cheaper than a call to ``get``)
            free -= free_taken[node]
            if free < need:
                continue
        far = node.parent is not near
        if best is not None and (
            (far and not best_far)
            or (
                far == best_far
                and (free > best_free or (free == best_free and node.order > best_order))
            )
        ):
            continue
        best, best_far, best_free, best_order = node, far, free, node.order
    if best is None:
        return None, None
    return best, (NO_VICTIMS, 0, 0, best_far, best_free, best_order)


def _ranked(candidates: Any, need: int, free_taken: dict[Cell, int]) -> list[Cell]:
    """The candidates that hold ``need`` in ``_fittest``'s order, the best last.

    For a gang whose tasks of one size spread over several nodes, where nearness ranks no
    node above another: each next node is the best of those the gang has not taken from
    (the ones it took from are full for this size: it left each only when it held no more),
    so one ranking serves all its scans (``_next_ranked``) instead of a scan per node."""
    fits = []
    for node in candidates:
        free = node.free
        if free < need:
            continue
        if free_taken and node in free_taken:
            free -= free_taken[node]
            if free < need:
                continue
        fits.append((free, node.order, node))  # (orders are unique: nodes never compared)
    fits.sort(reverse=True)
    return list(map(_third, fits))


_third = operator.itemgetter(2)


def _next_ranked(ranked: list[Cell], need: int, free_taken: dict[Cell, int]) -> Cell | None:
    """The best node of ``_ranked`` that still holds ``need``, taken off the ranking (the
    search then stays on it while it holds the next tasks)."""
    while ranked:
        node = ranked.pop()
        if node.free - free_taken.get(node, 0) >= need:
            return node
    return None


def _fittest(candidates: Any, need: int, free_taken: dict[Cell, int]) -> tuple[Cell | None, int]:
    """``_best_free`` among candidates all equally near: the fewest free GPUs (what the plan
    took there not counted) that still hold ``need``, then the lowest ``order``; with the
    node's free GPUs. Without the plan's GPUs to discount (its first task), a loop of its own."""
    best = None
    best_free, best_order = UNBOUNDED_FREE, 0
    if not free_taken:
        for node in candidates:
            free = node.free
            if need <= free and (
                free < best_free or (free == best_free and node.order < best_order)
            ):
                best, best_free, best_order = node, free, node.order
        return best, best_free
    for node in candidates:
        free = node.free
        if free < need:
            continue
        if node in free_taken:
            free -= free_taken[node]
            if free < need:
                continue
        if free < best_free or (free == best_free and node.order < best_order):
            best, best_free, best_order = node, free, node.order
    return best, best_free


def _regions(
    vc: VC, chain: str, pinned: Cell | None
) -> tuple[dict[Cell, None], dict[Cell, list[Cell]]]:
    """The nodes a search may use: whole ones, and the parts of others."""
    if pinned is None:
        return vc.nodes.get(chain, {}), vc.parts.get(chain, {})
    if pinned.node_cell is not None:
        return {}, {pinned.node_cell: [pinned]}
    return dict.fromkeys(pinned.nodes()), {}


def _task_regions(node: Cell, parts: list[Cell]) -> list[Cell]:
    """Where in a node a task may lie: one of the VC's cells there, or (standing for them
    all, as ``node``) its single-GPU cells together (see ``Placer._bind_gpus``)."""
    if any(not p.children for p in parts):
        return [*(p for p in parts if p.children), node]
    return parts


def _leaf_parts(parts: list[Cell]) -> list[Cell]:
    return [p for p in parts if not p.children]


def _oppo_path(root: Cell, cell: Cell) -> tuple[int, ...]:
    """Opportunistic jobs in each cell from ``root`` down to ``cell`` (zeros at no cost)."""
    if root.oppo == 0:
        return (0,) * (root.level - cell.level + 1)
    path = []
    probe: Cell | None = cell
    while probe is not None:
        path.append(_oppo_jobs(probe))
        if probe is root:
            break
        probe = probe.parent
    return tuple(reversed(path))


def _oppo_jobs(cell: Cell) -> int:
    if cell.oppo == 0:
        return 0
    return len({leaf.job for leaf in cell.leaf_cells() if leaf.job and leaf.prio < 0})


def _order(cell: Cell) -> int:
    return cell.order


def _room(cell: Cell, need: int, victims: bool) -> bool:
    """Whether some node in free ``cell`` (or the node part it is) has ``need`` usable GPUs:
    free ones, and with ``victims`` those of opportunistic jobs (the only jobs a cell no VC
    has bound can hold)."""
    parts = [cell] if cell.node_cell is not None else cell.nodes()
    return any(n.free + (n.oppo if victims else 0) >= need for n in parts)


def pick_leaves(
    parts: list[Cell],
    need: int,
    ok: Callable[[Cell], bool],
    taken: set[int],
    free_only: bool = False,
) -> list[Cell]:
    """``need`` GPUs from ``parts`` of one node, packed into the smallest sub-cell that holds
    them (buddy best fit), free GPUs before those of lower-priority jobs.

    ``free_only`` with nothing taken yet: the cells' own free counters say what is usable.
    A preempting pick takes busy GPUs only of ``fewest_victims``' jobs.
    """
    if not free_only and ok is not _is_free:
        victims = fewest_victims(parts, need, ok, taken)
        if victims:
            usable = ok
            ok = lambda leaf: usable(leaf) and (leaf.job is None or leaf.job in victims)  # noqa: E731
    if len(parts) == 1:
        part = parts[0]
        if free_only and part.free == need:
            return [leaf for leaf in part.leaf_cells() if leaf.job is None and leaf.bad == 0]
        # One cell type per level in a chain: the first child tells for all of them.
        if part.children and not part.children[0].children:
            if free_only or ok is _is_free:
                return _first_free(part, need, () if free_only else taken)
            return _cheapest_leaves(part, need, ok, taken)
    return _search_leaves(parts, need, ok, taken, free_only)


def _search_leaves(
    parts: list[Cell], need: int, ok: Callable[[Cell], bool], taken: set[int], free_only: bool
) -> list[Cell]:
    """The general search of ``pick_leaves``, which its fast paths must agree with."""
    counts: dict[int, tuple[int, int]] = {}

    def avail(cell: Cell) -> tuple[int, int]:
        if free_only:
            return cell.free, cell.free
        key = id(cell)
        if key not in counts:
            if not cell.children:
                usable = id(cell) not in taken and ok(cell)
                counts[key] = (int(usable), int(usable and cell.job is None))
            else:
                total = free = 0
                for child in cell.children:
                    a, f = avail(child)
                    total += a
                    free += f
                counts[key] = (total, free)
        return counts[key]

    out: list[Cell] = []

    def take(cell: Cell, n: int) -> None:
        if not cell.children:
            out.append(cell)
            return
        kids = [c for c in cell.children if avail(c)[0] > 0]
        fits = [c for c in kids if avail(c)[0] >= n]
        if fits:
            take(min(fits, key=lambda c: _fit_key(c, n, avail)), n)
            return
        for child in sorted(kids, key=lambda c: (-avail(c)[1], -avail(c)[0], _prio(c), c.order)):
            share = min(n, avail(child)[0])
            take(child, share)
            n -= share
            if n == 0:
                return

    for part in sorted(parts, key=lambda c: _fit_key(c, need, avail)):
        share = min(need, avail(part)[0])
        if share:
            take(part, share)
            need -= share
        if need == 0:
            break
    return out


def _first_free(node: Cell, need: int, taken: Collection[int]) -> list[Cell]:
    """The first ``need`` free healthy GPUs not ``taken`` of a cell whose children are GPUs,
    in order.

    What the general search below picks there, without its per-call bookkeeping (the
    simulator's hottest path): with only free GPUs counted every usable child holds exactly
    one (all with the same priority key), so no child "fits" a larger request and children
    are taken in ``order``; a request for one GPU takes the fitting child of lowest
    ``order``, the same one. Children are built in ``order``, so their list order is it.
    """
    out: list[Cell] = []
    for leaf in node.children:
        if leaf.job is None and leaf.bad == 0 and id(leaf) not in taken:
            out.append(leaf)
            if len(out) == need:
                break
    return out


def _cheapest_leaves(
    node: Cell, need: int, ok: Callable[[Cell], bool], taken: Collection[int]
) -> list[Cell]:
    """``need`` usable GPUs of a cell whose children are GPUs: free ones first, then those
    of the lowest-priority jobs, each in ``order``.

    What the general search below picks there: a usable child holds one GPU, so for one GPU
    it takes the child of least (busy, priority, order) and for more it takes children
    sorted by (-free, -1, priority, order), the same ranking (free GPUs rank as ``FREE_RANK``).
    """
    usable = [leaf for leaf in node.children if id(leaf) not in taken and ok(leaf)]
    usable.sort(key=lambda leaf: (leaf.job is not None, _prio(leaf), leaf.order))
    return usable[:need]


def _fit_key(
    cell: Cell, n: int, avail: Callable[[Cell], tuple[int, int]]
) -> tuple[int, int, int, int]:
    total, free = avail(cell)
    return (free < n, total, _prio(cell), cell.order)


def _prio(cell: Cell) -> int:
    return cell.prio if not cell.children and cell.job is not None else FREE_RANK


def fewest_victims(
    parts: list[Cell], need: int, ok: Callable[[Cell], bool], taken: Collection[int]
) -> set[str]:
    """The jobs whose GPUs in ``parts`` (of one node) a task of ``need`` GPUs preempts: none
    while free GPUs suffice; else only jobs up to the lowest priority that covers the
    shortfall, and of those as few as possible (the largest here first, then the lowest
    priority, then cell order), as HiveD preempts."""
    free = 0
    jobs: dict[str, list[int]] = {}  # job -> [usable GPUs here, priority, first cell order]
    for part in parts:
        for leaf in part.leaf_cells():
            if id(leaf) in taken or not ok(leaf):
                continue
            if leaf.job is None:
                free += 1
                continue
            entry = jobs.get(leaf.job)
            if entry is None:
                jobs[leaf.job] = [1, leaf.prio, leaf.order]
            else:
                entry[0] += 1
    short = need - free
    if short <= 0 or not jobs:
        return set()
    level, have = NO_VICTIMS, 0
    for count, prio, _ in sorted(jobs.values(), key=lambda e: e[1]):
        if have >= short and prio > level:
            break
        have += count
        level = prio
    out: set[str] = set()
    ranked = sorted(
        (e for e in jobs.items() if e[1][1] <= level), key=lambda e: (-e[1][0], e[1][1], e[1][2])
    )
    for job, (count, _, _) in ranked:
        out.add(job)
        short -= count
        if short <= 0:
            break
    return out
