"""Given pools of 2-, 4- and 8-GPU nodes (some with CPU limits), and a few trace gangs wider
than a node placed, released and placed again in random order (so a node's share of a gang
is found kept in ``PoolNode.pieces``, or kept for another gang, or for other GPUs), expect
``NodePool.place`` to give each job the placements and spans the general path builds anew
(the same gang marked unordered: no sharing), and the pool left alike. Sharing is exact only
if a kept share is found for the same gang's same tasks on the same GPUs of that node."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_node_pool_in_order import _gang, _pool, _state
from test_properties import PROPERTY_SETTINGS


@PROPERTY_SETTINGS
@given(
    sizes=st.lists(st.sampled_from([2, 4, 8]), min_size=2, max_size=8),
    limited=st.booleans(),
    shapes=st.lists(st.tuples(st.integers(2, 24), st.sampled_from([1, 2])), min_size=1, max_size=3),
    steps=st.lists(st.tuples(st.integers(0, 2), st.booleans()), min_size=1, max_size=30),
)
def test_a_wide_gang_placed_again_gets_what_the_general_path_builds(
    sizes: list[int],
    limited: bool,
    shapes: list[tuple[int, int]],
    steps: list[tuple[int, bool]],
) -> None:
    pools = [_pool(sizes, limited, "consolidated") for _ in range(2)]
    gangs = [_gang(tasks, gpu) for tasks, gpu in shapes]  # shared by the jobs of one shape
    general = [dataclasses.replace(g, ordered=False) for g in gangs]
    running: list[str] = []
    for k, (shape, release) in enumerate(steps):
        if release and running:  # the oldest job ends: its GPUs are the next ones taken
            gone = running.pop(0)
            assert pools[0].release(gone) == pools[1].release(gone)
        else:
            job = f"j{k}"
            i = shape % len(gangs)
            got = pools[0].place(job, gangs[i])
            assert got == pools[1].place(job, general[i])
            if got is not None:
                running.append(job)
        assert _state(pools[0]) == _state(pools[1])


@pytest.mark.sources
def test_a_sixteen_task_gang_placed_again_on_the_same_gpus_shares_its_placements() -> None:
    """Two empty 8-GPU nodes: a 16-task gang takes both; once it ends, the next job of that
    gang takes the same GPUs and gets the very same ``TaskPlacement`` objects (and spans),
    none built again; a gang of another shape on those GPUs (8 two-GPU tasks) gets its own."""
    pool = _pool([8, 8], False, "consolidated")
    gang = _gang(16, 1)
    first = pool.place("a", gang)
    spans = pool._jobs["a"][1]
    pool.release("a")
    again = pool.place("b", gang)
    assert first is not None and again is not None
    assert again == first and all(x is y for x, y in zip(again, first, strict=True))
    assert all(x is y for x, y in zip(pool._jobs["b"][1], spans, strict=True))
    pool.release("b")
    other = pool.place("c", _gang(8, 2))
    assert other is not None and other[0].gpus == (0, 1) and other[:4] != first[:4]
