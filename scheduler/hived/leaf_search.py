"""The placement search's rankings, below ``Placer``: best fit among whole nodes (``_best_free``,
``_ranked``), the regions of a VC's bound cells a task may use, and which leaves inside a node a
task takes (``pick_leaves``: free ones first, then the fewest, lowest-priority victims). Pure
functions of the cell tree and the plan so far; they bind nothing."""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection
from typing import Any

from labhive.scheduler.hived.cells import Cell
from labhive.scheduler.hived.plan import (
    FREE_RANK,
    NO_VICTIMS,
    UNBOUNDED_FREE,
    TaskNeed,
    _is_free,
)
from labhive.scheduler.hived.vc import VC


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
        if victims or (taken and _short_of_free(parts, need, ok, taken)):
            # The jobs the plan already stops here add no victim (a gang's second task on
            # the node takes its first task's victim's other GPUs, not another job's).
            victims |= hit_here(parts, taken)
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
    priority, then cell order), as HiveD preempts. The GPUs of a job the plan already takes
    GPUs of here (``hit_here``) count as free: stopping it again costs no second victim."""
    free = 0
    jobs: dict[str, list[int]] = {}  # job -> [usable GPUs here, priority, first cell order]
    hit = hit_here(parts, taken) if taken else ()
    for part in parts:
        for leaf in part.leaf_cells():
            if id(leaf) in taken or not ok(leaf):
                continue
            if leaf.job is None or leaf.job in hit:  # a job the plan stops already: free
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


def hit_here(parts: list[Cell], taken: Collection[int]) -> set[str]:
    """The jobs whose GPUs in ``parts`` the plan so far (``taken``) takes: its victims here.

    Where a victim stops task by task (``base._unit_of``), taking another of its GPUs may stop
    another of its tasks: still no second job, which is what ``fewest_victims`` minimises."""
    return {
        leaf.job
        for part in parts
        for leaf in part.leaf_cells()
        if leaf.job is not None and id(leaf) in taken
    }


def _short_of_free(
    parts: list[Cell], need: int, ok: Callable[[Cell], bool], taken: Collection[int]
) -> bool:
    """Whether the usable free GPUs in ``parts`` hold fewer than ``need``."""
    free = 0
    for part in parts:
        for leaf in part.leaf_cells():
            if leaf.job is None and id(leaf) not in taken and ok(leaf):
                free += 1
    return free < need
