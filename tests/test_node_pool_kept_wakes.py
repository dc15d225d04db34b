"""Given pools of 2-, 4- and 8-GPU nodes (or none), consolidated or ``anywhere``, and GPU counts
asked in any order and again, expect ``NodePool.wake_level`` (worked out once a count, kept in
``_Wakes``) to answer as the formula worked out at every call: the count itself within a node;
for a wider gang what its other most-free nodes, all empty, leave to find; 1 under
``anywhere`` or on a pool without nodes. A kept level is exact because it depends on nothing
that changes while the pool lives (the count, the locality, the largest node).

And given an ``anywhere`` pool with every GPU taken, expect ``may_fit(0)`` still yes (its one
comparison for a gang within a node is asked only where placement is consolidated)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from test_node_pool_top_free import _gang
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.policies.node_pool import NodePool, PoolNode


def _plain_wake_level(pool: NodePool, gpus: int) -> int:
    """``wake_level`` as written before it was kept: the formula at every call."""
    if pool.locality != "consolidated":
        return 1
    top = pool.max_node_gpus
    return max(1, gpus - top * (-(-gpus // top) - 1)) if top else 1


@PROPERTY_SETTINGS
@given(
    sizes=st.lists(st.sampled_from([2, 4, 8]), max_size=6),
    locality=st.sampled_from(["consolidated", "anywhere"]),
    asked=st.lists(st.integers(0, 40), min_size=1, max_size=30),
)
def test_a_kept_wake_level_is_the_formula_worked_out_again(
    sizes: list[int], locality: str, asked: list[int]
) -> None:
    pool = NodePool(
        [PoolNode(f"n{i}", None, tuple(range(g))) for i, g in enumerate(sizes)],
        locality,  # type: ignore[arg-type]
    )
    for gpus in asked + asked[::-1]:  # each asked twice at least: once worked out, once kept
        assert pool.wake_level(gpus) == _plain_wake_level(pool, gpus), gpus


def test_a_full_pool_anywhere_still_fits_a_gang_of_no_gpus() -> None:
    pool = NodePool([PoolNode("n0", None, (0, 1))], "anywhere")
    assert pool.place("a", _gang(2)) is not None and pool.free_gpus == 0
    assert pool.may_fit(0) and not pool.may_fit(1)
    assert pool.wake_level(0) == pool.wake_level(9) == 1
