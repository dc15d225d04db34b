"""Given pools of 2-, 4- and 8-GPU nodes (some with CPU limits) in random states of use, and
trace gangs wider than a node (one run of one-GPU or two-GPU tasks, in order), expect
``NodePool.place`` to place each exactly as its general path does (each task's placement,
sorted by role and index, and the spans ``_spans`` builds from them): the same tasks on the
same GPUs, the same spans for ``release``, and the pool left alike. ``_place_in_order`` skips
that sort and ``_spans``' walk, since ``_pack`` gives each node the next tasks of the run. The
reference is the same gang marked unordered, which takes the general path."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.core.job_spec import RoleSpec
from labhive.scheduler.policies.node_pool import Gang, NodePool, PoolNode, _gang_of_roles


def _pool(sizes: list[int], limited: bool, locality: str) -> NodePool:
    nodes = [
        PoolNode(f"n{i}", None, tuple(range(g)), cpu=6.0 if limited and i % 2 else 1e9)
        for i, g in enumerate(sizes)
    ]
    return NodePool(nodes, locality)  # type: ignore[arg-type]


def _gang(tasks: int, gpu: int) -> Gang:
    """One role of ``tasks`` tasks of ``gpu`` GPUs and a CPU each."""
    return _gang_of_roles((RoleSpec("worker", instances=tasks, gpu=gpu, cpu=1.0),))


def _state(pool: NodePool) -> Any:
    return (
        [
            [(n.name, list(n.free), n.cpu_free, dict(n.used)) for n in b.values()]
            for b in pool._buckets
        ],
        pool.free_gpus,
        pool.top_free,
        [(j, t, [(s[0].name, *s[1:]) for s in spans]) for j, (t, spans) in pool._jobs.items()],
    )


@PROPERTY_SETTINGS
@given(
    sizes=st.lists(st.sampled_from([2, 4, 8]), min_size=2, max_size=8),
    limited=st.booleans(),
    locality=st.sampled_from(["consolidated", "anywhere"]),
    fill=st.lists(st.integers(1, 4), max_size=10),
    wide=st.lists(st.tuples(st.integers(2, 24), st.sampled_from([1, 2])), min_size=1, max_size=4),
)
def test_a_wide_gang_in_order_is_placed_as_the_general_path_places_it(
    sizes: list[int], limited: bool, locality: str, fill: list[int], wide: list[tuple[int, int]]
) -> None:
    pools = [_pool(sizes, limited, locality) for _ in range(2)]
    for k, gpus in enumerate(fill):  # some nodes in use
        for pool in pools:
            pool.place(f"f{k}", _gang(gpus, 1))
    placed = 0
    for k, (tasks, gpu) in enumerate(wide):
        gang = _gang(tasks, gpu)
        assert gang.ordered and len(gang.runs) == 1
        general = dataclasses.replace(gang, ordered=False)
        got = pools[0].place(f"w{k}", gang)
        assert got == pools[1].place(f"w{k}", general)
        placed += got is not None
        assert _state(pools[0]) == _state(pools[1])
        if k % 2:  # and released alike
            for pool in pools:
                pool.release("f0")
            assert _state(pools[0]) == _state(pools[1])


def test_eighteen_one_gpu_tasks_take_the_three_most_free_nodes_in_order() -> None:
    """Three 8-GPU nodes, 5 GPUs taken on the first: a 20-task gang is refused (19 free on
    the 3 nodes it may take); an 18-task gang takes the two empty nodes' 8 GPUs (tasks 0-7,
    then 8-15) and 2 of the first's 3 free (tasks 16-17), one span on each node."""
    pool = _pool([8, 8, 8], False, "consolidated")
    pool.place("a", _gang(5, 1))
    assert pool.place("w20", _gang(20, 1)) is None
    tasks = pool.place("w18", _gang(18, 1))
    assert tasks is not None
    assert [(t.index, t.node, t.gpus) for t in tasks] == [
        *[(i, "n1", (i,)) for i in range(8)],
        *[(8 + i, "n2", (i,)) for i in range(8)],
        (16, "n0", (5,)),
        (17, "n0", (6,)),
    ]
    assert [(s[0].name, s[1]) for s in pool._jobs["w18"][1]] == [
        ("n1", tuple(range(8))),
        ("n2", tuple(range(8))),
        ("n0", (5, 6)),
    ]
