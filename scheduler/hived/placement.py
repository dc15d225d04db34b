"""Topology-aware search for where a gang (or one task) goes, without changing anything but
the bindings it makes on the way (the caller keeps or rolls them back).

Guaranteed jobs search their VC's bound cells first, packing tasks onto the fullest node that
still fits (best fit), and bind one more of the VC's cells only when those are full: the new
physical cell comes from the lowest free-list level that has one (buddy allocation), preferring
healthy cells no opportunistic job uses, and any choice must keep every VC's remaining cells
placeable (safe relaxed buddy allocation). Opportunistic jobs search all physical cells for idle
GPUs, preferring cells no VC has bound, because those are the last a guaranteed job reclaims.

``Placer`` holds the searches; the bindings they make on the way are its mixin's
(``binding.Binding``); what a search works with and yields (``TaskNeed``, ``Plan``, ``usable``)
is in ``plan``, the node rankings and leaf choices below it are in ``leaf_search``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from labhive.scheduler.hived.binding import Binding
from labhive.scheduler.hived.cells import Cell, CellTree
from labhive.scheduler.hived.leaf_search import (
    _best_free,
    _cheapest_leaves,
    _first_free,
    _larger_first,
    _leaf_parts,
    _next_ranked,
    _one_size,
    _ranked,
    _regions,
    _search_leaves,
    _task_regions,
    fewest_victims,
    pick_leaves,
)
from labhive.scheduler.hived.plan import (
    NO_VICTIMS,
    OPPORTUNISTIC_ONLY,
    Plan,
    TaskNeed,
    TaskNeeds,
    Threshold,
    _is_free,
    _not_guaranteed,
    usable,
    usable_on,
    victim_threshold,
)
from labhive.scheduler.hived.vc import VC, VCs

# Re-exported: other modules and tests import these from here, where they lived before the
# plan (``plan``) and the leaf rankings (``leaf_search``) got modules of their own.
__all__ = [
    "Placer",
    "Plan",
    "TaskNeed",
    "TaskNeeds",
    "Threshold",
    "_best_free",
    "_cheapest_leaves",
    "_first_free",
    "_is_free",
    "_search_leaves",
    "fewest_victims",
    "pick_leaves",
    "usable",
    "usable_on",
    "victim_threshold",
]


class Placer(Binding):
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
            mark = len(plan.bound)  # the bindings made for this task follow
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
                    node = self._spare_guaranteed(vc, chain, task.leaves, plan, node, mark)
                    if node is None:
                        whole, partial = _regions(vc, chain, pinned)
                        opened = vc.open.get(chain, {}) if pinned is None else None
                        if only is not None and len(plan.bound) > mark:
                            only = only | set(plan.bound[-1].nodes())
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
        self, vc: VC, chain: str, need: int, plan: Plan, node: Cell, mark: int
    ) -> Cell | None:
        """HiveD binds a VC's unbound quota on idle or opportunistic cells before it preempts
        a guaranteed job of the VC: ``node`` (which would preempt one) when no such binding
        exists, else None (the caller searches again, the new cell included).

        The cells this task bound so far (``plan.bound[mark:]``) only made ``node`` fit, by
        preempting: they are undone first, exactly and newest first, and the spare binding
        is sought on the free list as it was before them. Kept, they stayed bound and idle
        when the spare binding won (issue 34: a VC's GPU cell bound beside its guaranteed
        job's for a preempting fit, then the task went to opportunistic GPUs bound instead).
        When no spare binding exists after such an undo, None too: the caller's search binds
        the same cells again (the list is as it was) and finds ``node`` once more."""
        undone = len(plan.bound) > mark
        if undone:
            for cell in reversed(plan.bound[mark:]):
                self.vcs.unbind(vc, cell, exact=True)
            del plan.bound[mark:]
        if not self._bind_for(vc, chain, need, _not_guaranteed, plan, True):
            return None if undone else node
        return None if len(plan.bound) > mark else node

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
