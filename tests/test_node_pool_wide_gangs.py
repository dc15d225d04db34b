"""Given pools of 2- and 8-GPU nodes in random states of use, expect a gang wider than a node to
be placed exactly as the node-by-node search places it: ``NodePool._plan`` now refuses at once
where the most-free nodes it may take hold too few free GPUs together (``_most_free_reaches``), a
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


def test_may_fit_refuses_only_what_placement_refuses() -> None:
    """Given pools of 2- and 8-GPU nodes in random states of use and gangs of 0 to 24 GPUs,
    expect ``may_fit`` (the test a queue pass asks before trying a head) to say no only where
    ``place`` then refuses, and to say no often (a bound that always said yes would let every
    refused head be tried, as before)."""
    rng = random.Random(3434)
    refused = 0
    for _ in range(600):
        pool = _pool(rng)
        gang = _gang(rng.choice([1, 2, 3, 4, 6, 8, 9, 12, 16, 17, 24]))
        if not pool.may_fit(gang.gpus):
            refused += 1
            assert pool.place("x", gang) is None, (gang.gpus, pool._buckets)
    assert refused > 100


def test_may_fit_wants_a_node_with_that_many_free() -> None:
    """Two 8-GPU nodes with 5 and 2 free: 7 free, but no 6-GPU gang fits on one node, and a
    9-GPU gang needs more; with none free, a job of no GPUs does not fit either (``place``
    puts it on a node with a free GPU)."""
    pool = NodePool([PoolNode(f"b{i}", None, tuple(range(8))) for i in range(2)], "consolidated")
    pool.place("a", _gang(3))
    pool.place("b", _gang(6))
    assert pool.free_gpus == 7
    assert pool.may_fit(5) and not pool.may_fit(6) and not pool.may_fit(9)
    assert pool.place("c", _gang(6)) is None
    pool.place("d", _gang(5))
    pool.place("e", _gang(2))
    assert pool.free_gpus == 0
    assert not pool.may_fit(0) and not pool.may_fit(1)
    anywhere = NodePool([PoolNode(f"b{i}", None, tuple(range(8))) for i in range(2)], "anywhere")
    anywhere.place("a", _gang(3))
    assert anywhere.may_fit(13) and not anywhere.may_fit(14)


def test_the_early_stopping_walk_answers_as_the_full_one() -> None:
    """Given random pools, expect ``_most_free_reaches`` (which stops once the nodes left
    cannot make up the rest) to answer every question as the full walk ``_most_free`` does."""
    rng = random.Random(343)
    seen = set()
    for _ in range(300):
        pool = _pool(rng)
        for nodes in range(1, 5):
            for gpus in range(1, 33):
                full = pool._most_free(nodes) >= gpus
                assert pool._most_free_reaches(nodes, gpus) == full, (nodes, gpus)
                seen.add(full)
    assert seen == {True, False}


def test_a_size_refused_fits_again_only_once_a_release_reaches_its_wake_level() -> None:
    """Given random pools and, for each size ``may_fit`` refuses, random releases (and nodes
    coming up) after ``peak`` was set to 0, expect the size to fit again only where ``peak``
    reached ``wake_level``: DRF's index parks such a size until then, so a release that made
    room below that level would leave a head waiting that now fits."""
    rng = random.Random(34_000)
    woke = stayed = 0
    for _ in range(300):
        pool = _pool(rng)
        down = rng.sample(sorted(pool.nodes), k=min(2, len(pool.nodes)))
        for name in down:
            pool.set_healthy(name, False)
        refused = [g for g in (1, 2, 3, 4, 6, 8, 9, 12, 16, 17, 24) if not pool.may_fit(g)]
        pool.peak = 0
        for _ in range(rng.randint(1, 4)):
            if pool._jobs and rng.random() < 0.8:
                pool.release(rng.choice(sorted(pool._jobs)))
            else:
                pool.set_healthy(rng.choice(down), True)
            for g in refused:
                if pool.may_fit(g):
                    assert pool.peak >= pool.wake_level(g), (g, pool.peak)
                    woke += 1
                else:
                    stayed += pool.peak >= pool.wake_level(g)
    assert woke > 50 and stayed > 50  # both: woken and fitting, woken in vain
