"""Given pools of 2-, 4- and 8-GPU nodes taken, freed, failed and brought back in random orders,
expect every answer read from ``NodePool.top_free`` (the most free GPUs of a healthy node, kept
as nodes change buckets) to be the plain computation's: ``top_free`` itself the highest bucket
holding a node, ``may_fit`` the walk up the buckets from the gang's size, ``_most_free`` and
``_most_free_reaches`` the walk down from the largest node, and ``_plan`` the first node with
room in ``_ascending`` order. A ``top_free`` left too low (a release or node-up not raising it)
refuses a gang the walk places; one left too high (a take or node-down not lowering it) is
caught by the first assertion."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from sim_helpers import job
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.policies.node_pool import Gang, NodePool, PoolNode, gang_of

SIZES = (0, 1, 2, 3, 4, 5, 6, 8, 9, 12, 16, 17, 24)


def _gang(gpus: int) -> Gang:
    """A trace job's gang: ``gpus`` one-GPU tasks of a CPU each (a job of none: no tasks)."""
    return gang_of(job("j", 0, gpus, 1).spec)


def _plain_top(pool: NodePool) -> int:
    return max((f for f, bucket in enumerate(pool._buckets) if bucket), default=0)


def _plain_may_fit(pool: NodePool, gpus: int) -> bool:
    """``may_fit`` as written before ``top_free``: every bucket walked."""
    if gpus > pool.free_gpus:
        return False
    if pool.locality != "consolidated":
        return True
    top = pool.max_node_gpus
    if gpus <= top:
        return any(pool._buckets[f] for f in range(max(gpus, 1), top + 1))
    return _plain_most_free(pool, -(-gpus // top)) >= gpus


def _plain_most_free(pool: NodePool, nodes: int) -> int:
    """The free GPUs of the ``nodes`` most-free healthy nodes, every node counted."""
    frees = sorted((len(n.free) for n in pool.nodes.values() if n.healthy), reverse=True)
    return sum(frees[:nodes])


def _plain_node(pool: NodePool, gang: Gang) -> PoolNode | None:
    """The node a one-node gang goes on: the first with room in ``_ascending`` order."""
    for node in pool._ascending(gang.gpus):
        if gang.cpu <= node.cpu_free and gang.memory_mb <= node.memory_free:
            return node
    return None


def _check(pool: NodePool) -> None:
    assert pool.top_free == _plain_top(pool)
    for gpus in SIZES:
        assert pool.may_fit(gpus) == _plain_may_fit(pool, gpus), gpus
    for nodes in range(1, 5):
        most = _plain_most_free(pool, nodes)
        assert pool._most_free(nodes) == most
        for gpus in (most, most + 1, 9, 17):
            assert pool._most_free_reaches(nodes, gpus) == (most >= gpus)
    if pool.locality == "consolidated":
        for gpus in (0, 1, 2, 4, 5, 8):
            gang = _gang(gpus)
            if gpus <= pool.free_gpus and gpus <= pool.max_node_gpus:  # (one node)
                plan = pool._plan(gang)
                node = _plain_node(pool, gang)
                assert (plan[0][0] if plan else None) is node, gpus


@st.composite
def pools(draw: Any) -> NodePool:
    sizes = draw(st.lists(st.sampled_from([2, 4, 8]), min_size=1, max_size=8))
    limited = draw(st.booleans())  # some nodes with 2 CPUs: placement skips them for big gangs
    nodes = [
        PoolNode(f"n{i}", None, tuple(range(g)), cpu=2.0 if limited and i % 3 == 0 else 1e9)
        for i, g in enumerate(sizes)
    ]
    locality = draw(st.sampled_from(["consolidated", "consolidated", "anywhere"]))
    return NodePool(nodes, locality)


@PROPERTY_SETTINGS
@given(pool=pools(), data=st.data())
def test_top_free_answers_as_the_walks_over_every_bucket(pool: NodePool, data: Any) -> None:
    _check(pool)
    held: list[str] = []
    for step in range(data.draw(st.integers(1, 40))):
        op = data.draw(st.sampled_from(["place", "place", "place", "release", "health", "claim"]))
        if op == "place":
            gang = _gang(data.draw(st.sampled_from(SIZES)))
            if pool.place(f"j{step}", gang) is not None:
                held.append(f"j{step}")
        elif op == "release" and held:
            pool.release(held.pop(data.draw(st.integers(0, len(held) - 1))))
        elif op == "health":
            name = data.draw(st.sampled_from(sorted(pool.nodes)))
            for gone in pool.set_healthy(name, data.draw(st.booleans()), "test"):
                pool.release(gone)
                held.remove(gone)
        elif op == "claim" and held:  # a search's undo: release, then claim the same GPUs
            job_id = held[data.draw(st.integers(0, len(held) - 1))]
            tasks, gang = pool.placement(job_id), _gang(0)
            pool.release(job_id)
            assert pool.claim(job_id, tasks, gang)
        _check(pool)


def test_a_take_that_empties_the_top_bucket_lowers_it_to_the_next_node() -> None:
    """Given two 8-GPU nodes, one with 3 taken: a 5-GPU gang fills the fuller one first (best
    fit), a 7-GPU gang then takes the empty one, and the most free is 1, then 0, then back."""
    pool = NodePool([PoolNode(f"b{i}", None, tuple(range(8))) for i in range(2)], "consolidated")
    assert pool.top_free == 8
    pool.place("a", _gang(3))
    assert pool.top_free == 8 and pool.place("b", _gang(5)) is not None
    assert pool.nodes["b0"].free == () and pool.top_free == 8
    pool.place("c", _gang(7))
    assert pool.top_free == 1 and not pool.may_fit(2) and pool.may_fit(1)
    pool.place("d", _gang(1))
    assert pool.top_free == 0 and not pool.may_fit(0)
    pool.release("b")
    assert pool.top_free == 5 and pool.may_fit(5) and not pool.may_fit(6)
    pool.set_healthy("b0", False)
    assert pool.top_free == 0
    pool.set_healthy("b0", True)
    assert pool.top_free == 5
