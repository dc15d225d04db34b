"""Given random states of a node's GPUs, expect each fast path of the placement search to
choose what the general search chooses (they exist only for speed)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from labhive.scheduler.config import load_cluster_config
from labhive.scheduler.hived.cells import Cell, CellTree
from labhive.scheduler.hived.placement import (
    Plan,
    _best_free,
    _cheapest_leaves,
    _first_free,
    _is_free,
    _search_leaves,
    _still_best,
    usable,
)

CLUSTER = """\
physicalCluster:
  cellTypes:
    NODE: {childCellType: GPU, childCellNumber: %d, isNodeLevel: true}
  physicalCells:
  - {cellType: NODE, cellAddress: n0}
  - {cellType: NODE, cellAddress: n1}
  - {cellType: NODE, cellAddress: n2}
virtualClusters:
  a: {virtualCells: [{cellType: NODE, cellNumber: 3}]}
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


@settings(max_examples=60, deadline=None)
@given(
    frees=st.lists(st.integers(0, 4), min_size=3, max_size=3),
    need=st.integers(1, 4),
)
def test_the_previous_node_is_still_best_only_where_a_full_scan_picks_it(frees, need):
    """A gang's next task of the same size: when ``_still_best`` skips the scan, a scan of
    the same candidates, with the plan's GPUs taken, picks the previous node too."""
    tree = _tree(4)
    nodes = [c for c in tree.cells.values() if c.is_node]
    for node, free in zip(nodes, frees, strict=True):
        node.free = free
    whole = dict.fromkeys(nodes)
    first, _ = _best_free(list(whole), need, None, {})
    if first is None:
        return
    plan = Plan(first.chain)
    plan.free_taken[first] = need  # the previous task took ``need`` GPUs there
    if _still_best(first, need, need, whole, plan):
        again, _ = _best_free(list(whole), need, first.parent, plan.free_taken)
        assert again is first
