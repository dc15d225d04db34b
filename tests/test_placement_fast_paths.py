"""Given random states of a node's GPUs, expect each fast path of the placement search to
choose what the general search chooses (they exist only for speed)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.hived.cells import Cell, CellTree
from labhive.scheduler.hived.placement import (
    Placer,
    Plan,
    TaskNeed,
    _best_free,
    _cheapest_leaves,
    _first_free,
    _is_free,
    _search_leaves,
    usable,
)
from labhive.scheduler.hived.vc import VCs

CLUSTER = """\
physicalCluster:
  cellTypes:
    NODE: {childCellType: GPU, childCellNumber: %d, isNodeLevel: true}
  physicalCells:
  - {cellType: NODE, cellAddress: n0}
  - {cellType: NODE, cellAddress: n1}
  - {cellType: NODE, cellAddress: n2}
  - {cellType: NODE, cellAddress: n3}
  - {cellType: NODE, cellAddress: n4}
virtualClusters:
  a: {virtualCells: [{cellType: NODE, cellNumber: 5}]}
"""

#: One GPU's state: (bad, None = free or the priority of the job on it).
GPU = st.tuples(st.booleans(), st.none() | st.sampled_from([-1, 0, 1, 2]))


def _tree(gpus: int) -> CellTree:
    return CellTree(load_cluster_config(CLUSTER % gpus))


def _set(node: Cell, states: list[tuple[bool, int | None]]) -> None:
    """Give the node's GPUs these states (the leaf fields the searches read)."""
    for i, (leaf, (bad, prio)) in enumerate(zip(node.children, states, strict=False)):
        leaf.bad = int(bad)
        leaf.job = None if prio is None else f"j{i % 3}"
        leaf.prio = 0 if prio is None else prio


def _node(tree: CellTree) -> Cell:
    return next(c for c in tree.cells.values() if c.is_node)


@settings(max_examples=60, deadline=None)
@given(
    gpus=st.sampled_from([2, 4, 8]),
    states=st.lists(GPU, min_size=8, max_size=8),
    taken=st.sets(st.integers(0, 7), max_size=3),
    need=st.integers(1, 8),
)
def test_first_free_takes_what_the_general_search_takes(gpus, states, taken, need):
    node = _node(_tree(gpus))
    _set(node, states)
    ids = {id(node.children[i]) for i in taken if i < gpus}
    free = [leaf for leaf in node.children if _is_free(leaf) and id(leaf) not in ids]
    need = min(need, max(1, len(free)))
    if len(free) < need:
        return
    assert _first_free(node, need, ids) == _search_leaves([node], need, _is_free, ids, False)


@settings(max_examples=60, deadline=None)
@given(
    gpus=st.sampled_from([2, 4, 8]),
    states=st.lists(GPU, min_size=8, max_size=8),
    threshold=st.sampled_from([-1, 0, 1, 2]),
    taken=st.sets(st.integers(0, 7), max_size=3),
    need=st.integers(1, 8),
)
def test_cheapest_leaves_take_what_the_general_search_takes(gpus, states, threshold, taken, need):
    node = _node(_tree(gpus))
    _set(node, states)
    ok = usable(threshold)
    ids = {id(node.children[i]) for i in taken if i < gpus}
    left = [leaf for leaf in node.children if ok(leaf) and id(leaf) not in ids]
    if len(left) < need:
        return
    assert _cheapest_leaves(node, need, ok, ids) == _search_leaves([node], need, ok, ids, False)


def _vc_of_nodes(busy: list[int], bound: int) -> tuple[CellTree, VCs, list[Cell]]:
    """Nodes of 4 GPUs, the first ``busy[i]`` of node i used by another job, and VC ``a``
    with its first ``bound`` nodes bound."""
    config = load_cluster_config(CLUSTER % 4)
    tree = CellTree(config)
    vcs = VCs(config, tree)
    nodes = [c for c in tree.cells.values() if c.is_node]
    for node, n in zip(nodes, busy, strict=True):
        for leaf in node.children[:n]:
            tree.use(leaf, "other", 0)
    for node in nodes[:bound]:
        vcs.bind(vcs.by_name["a"], node)
    return tree, vcs, nodes


@settings(max_examples=80, deadline=None)
@given(
    busy=st.lists(st.integers(0, 4), min_size=5, max_size=5),
    need=st.integers(1, 4),
    tasks=st.integers(1, 10),
)
def test_a_free_only_gang_goes_where_a_full_scan_per_task_puts_it(busy, need, tasks):
    """A gang of same-size tasks on free GPUs: ``guaranteed`` skips the scan for a task
    whose previous node still holds it, ranks the nodes once for a gang spread over several,
    and takes a flat node's first free GPUs; expect
    each task where a full best-fit scan (with the plan's GPUs taken so far) and the
    general leaf search put it, and no plan where they find no room."""
    tree, vcs, nodes = _vc_of_nodes(busy, bound=len(busy))
    vc = vcs.by_name["a"]
    gang = [TaskNeed("worker", i, need) for i in range(tasks)]
    plan = Placer(tree, vcs).guaranteed(vc, nodes[0].chain, gang, None, bind=False)

    ref = Plan(nodes[0].chain)
    last = None
    for task in gang:
        node, _ = _best_free(nodes, need, last.parent if last else None, ref.free_taken)
        if node is None:
            assert plan is None
            return
        ref.add(task, node, _search_leaves([node], need, _is_free, ref.taken, False))
        last = node
    assert plan is not None
    assert plan.placed == ref.placed


RACK = """\
physicalCluster:
  cellTypes:
    NODE: {childCellType: GPU, childCellNumber: 4, isNodeLevel: true}
    RACK: {childCellType: NODE, childCellNumber: 4}
  physicalCells:
  - cellType: RACK
    cellChildren: [{cellAddress: n0}, {cellAddress: n1}, {cellAddress: n2}, {cellAddress: n3}]
virtualClusters:
  a: {virtualCells: [{cellType: RACK, cellNumber: 1}]}
"""


@settings(max_examples=80, deadline=None)
@given(
    frees=st.lists(st.integers(0, 4), min_size=4, max_size=4),
    taken=st.lists(st.integers(0, 2), min_size=4, max_size=4),
    need=st.integers(1, 4),
    near_rack=st.booleans(),
)
def test_best_fit_among_nodes_of_one_parent_ranks_as_the_full_key_does(
    frees, taken, need, near_rack
):
    """Nodes that share a parent are all as near a gang's last task: the shortcut that
    ranks them on free GPUs and order alone picks the node, with the key, that the full
    ranking (nearness first) picks."""
    tree = CellTree(load_cluster_config(RACK))
    nodes = [c for c in tree.cells.values() if c.is_node]
    assert tree.chains[nodes[0].chain].one_parent
    for node, free in zip(nodes, frees, strict=True):
        node.free = free
    free_taken = {n: t for n, t in zip(nodes, taken, strict=True) if t}
    for plan_took in (free_taken, {}):
        if near_rack:  # every node is next to the last task
            rack = nodes[0].parent
            full = _best_free(nodes, need, rack, plan_took, one_parent=False)
            assert _best_free(nodes, need, rack, plan_took, one_parent=True) == full
        else:  # none is (a first task: no ``near``); the full ranking, with a cell none is next to
            full = _best_free(nodes, need, nodes[0].children[0], plan_took, one_parent=False)
            assert _best_free(nodes, need, None, plan_took) == full


def _gang_plan(busy: list[int], bound: int, need: int, tasks: int, rank: bool) -> list[object]:
    """Where ``guaranteed`` puts a gang when the VC has bound its first ``bound`` nodes (it
    binds more as it goes); ``rank``: with the one-parent shortcuts (else the full scans)."""
    tree, vcs, _ = _vc_of_nodes(busy, bound)
    tree.chains["NODE"].one_parent = rank
    vc = vcs.by_name["a"]
    gang = [TaskNeed("worker", i, need) for i in range(tasks)]
    plan = Placer(tree, vcs).guaranteed(vc, "NODE", gang, None)
    if plan is None:
        return []
    placed = [(t.index, n.id, [leaf.id for leaf in leaves]) for t, n, leaves in plan.placed]
    return [placed, [c.id for c in plan.bound]]


@settings(max_examples=80, deadline=None)
@given(
    busy=st.lists(st.integers(0, 4), min_size=5, max_size=5),
    bound=st.integers(0, 5),
    need=st.integers(1, 4),
    tasks=st.integers(1, 10),
)
def test_a_gang_ranked_once_goes_where_scans_put_it_bindings_included(busy, bound, need, tasks):
    """A gang that outgrows the VC's bound nodes binds more on its way: the ranking of the
    nodes (made once per task size) is made afresh with them, as the scans would see them."""
    assert _gang_plan(busy, bound, need, tasks, True) == _gang_plan(busy, bound, need, tasks, False)
