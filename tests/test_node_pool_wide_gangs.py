"""Given pools of 2- and 8-GPU nodes in random states of use, expect a gang wider than a node to
be placed exactly as the node-by-node search places it: ``NodePool._plan`` now refuses at once
where the most-free nodes it may take hold too few free GPUs together (``_most_free``), a
shortcut that must refuse only what the search would refuse. A shortcut refusing one case the
search places (or the reverse) shows up as a different answer."""

from __future__ import annotations

import random

from sim_helpers import job

from labhive.scheduler.policies.node_pool import Gang, NodePool, PoolNode, gang_of


def _pool(rng: random.Random) -> NodePool:
    nodes = [PoolNode(f"s{i}", None, (0, 1)) for i in range(rng.randint(0, 12))]
    nodes += [PoolNode(f"b{i}", None, tuple(range(8))) for i in range(rng.randint(1, 6))]
    pool = NodePool(nodes, "consolidated")
    for k in range(rng.randint(0, 30)):  # fill it up with small jobs, some ended
        gang = _gang(rng.choice([1, 1, 2, 4]))
        if pool.place(f"f{k}", gang) is not None and rng.random() < 0.3:
            pool.release(f"f{k}")
    return pool


def _gang(gpus: int) -> Gang:
    """A trace job's gang: ``gpus`` one-GPU tasks."""
    return gang_of(job("j", 0, gpus, 1).spec)


def test_wide_gangs_are_placed_as_the_node_by_node_search_places_them() -> None:
    rng = random.Random(34)
    refused = placed = 0
    for _ in range(400):
        pool = _pool(rng)
        gang = _gang(rng.choice([9, 12, 16, 17, 24]))
        need = -(-gang.gpus // pool.max_node_gpus)
        searched = None
        if gang.gpus <= pool.free_gpus:
            searched = pool._pack(gang, pool._descending(), max_nodes=need)
        planned = pool._plan(gang)
        assert planned == searched
        refused += planned is None and gang.gpus <= pool.free_gpus
        placed += planned is not None
    assert refused > 15 and placed > 50  # both answers were exercised


def test_most_free_counts_the_fullest_nodes_first() -> None:
    pool = NodePool([PoolNode(f"b{i}", None, tuple(range(8))) for i in range(3)], "consolidated")
    pool.place("a", _gang(3))  # b0: 5 free
    pool.place("b", _gang(7))  # b1: 1 free
    assert pool._most_free(1) == 8 and pool._most_free(2) == 13 and pool._most_free(3) == 14
    assert pool._most_free(5) == 14
