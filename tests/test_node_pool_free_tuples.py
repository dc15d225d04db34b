"""Given pools of 2-, 4- and 8-GPU nodes (some with CPU and memory limits, some going down and
up), and jobs placed, released, released and claimed back, and adopted with their GPUs listed
out of order, expect the pool's fast paths to leave it as the plain computation does: a job
placed as the general path places it (its gang marked unordered: no one-node path, no kept
placements) and freed task by task (``test_node_pool_spans``' reference), the same buckets in
the same order, free GPUs, ``used`` order, CPU and memory sums, ``peak`` and jobs; and every
node's free GPUs its unused ones, ascending.

What this holds (issue 34, eighteenth session): ``PoolNode.free`` is a tuple, so a take is a
slice (a best fit mostly takes all of a node's free GPUs: the same tuple) and a release onto a
full node makes the span's GPUs the node's free GPUs as they are, without a sort. That is
exact only if every span's GPUs ascend; ``_spans`` starts a new span where they fall (a
two-role gang's tasks in (role, index) order, or an adopted task listing its GPUs out of
order). And ``place`` finds a gang within a node its node directly (``_fitting``), without
``_plan``'s one-entry plan, and takes its GPUs by hand (``_take``'s lines, without the call):
the general path here, taking through ``_take``, is what it is held to."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st
from test_node_pool_spans import _release_task_by_task, _state
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.core.job_spec import RoleSpec
from labhive.scheduler.core.model import TaskPlacement
from labhive.scheduler.policies.node_pool import Gang, NodePool, PoolNode, _gang_of_roles


def _pool(sizes: list[int], limited: bool, locality: str) -> NodePool:
    nodes = [
        PoolNode(
            f"n{i}",
            None,
            tuple(range(g)),
            cpu=2.5 if limited and i % 2 == 0 else float("inf"),
            memory_mb=9000.0 if limited and i % 3 == 0 else float("inf"),
        )
        for i, g in enumerate(sizes)
    ]
    return NodePool(nodes, locality)  # type: ignore[arg-type]


def _gangs() -> list[Gang]:
    """A trace's one-role gangs within and wider than a node, and two roles whose larger
    tasks are packed first (so in (role, index) order their GPUs fall on a node)."""
    one = [
        _gang_of_roles((RoleSpec("w", instances=n, gpu=g, cpu=0.3, memory_mb=500),))
        for n, g in ((1, 1), (2, 1), (1, 4), (4, 1), (8, 1), (1, 8), (12, 1), (3, 2))
    ]
    two = _gang_of_roles(
        (
            RoleSpec("a", instances=2, gpu=1, cpu=0.1, memory_mb=300),
            RoleSpec("b", instances=1, gpu=2, cpu=0.7, memory_mb=700),
        )
    )
    return [*one, two]


def _free_is_unused_ascending(pool: NodePool) -> None:
    for node in pool.nodes.values():
        assert isinstance(node.free, tuple)
        assert node.free == tuple(sorted(set(node.gpus) - set(node.used))), node


def _adopt(pools: list[NodePool], job_id: str, pick: int, take: int) -> Gang | None:
    """A job adopted on both pools with its one task's GPUs listed highest first (as a
    driver may give them back): ``take`` of a healthy node's free GPUs, the node by ``pick``."""
    nodes = [n for n in pools[0].nodes.values() if n.healthy and len(n.free) >= 2]
    if not nodes:
        return None
    node = nodes[pick % len(nodes)]
    k = max(2, min(take, len(node.free)))
    gpus = tuple(reversed(node.free[:k]))
    gang = _gang_of_roles((RoleSpec("r", instances=1, gpu=k, cpu=0.2, memory_mb=100),))
    task = TaskPlacement("r", 0, node.name, gpus)
    for pool in pools:
        assert pool.claim(job_id, (task,), gang)
    return gang


@PROPERTY_SETTINGS
@given(
    sizes=st.lists(st.sampled_from([2, 4, 8]), min_size=1, max_size=6),
    limited=st.booleans(),
    locality=st.sampled_from(["consolidated", "consolidated", "anywhere"]),
    steps=st.lists(
        st.tuples(st.sampled_from("ppppprrcad"), st.integers(0, 63), st.integers(0, 8)),
        min_size=1,
        max_size=40,
    ),
)
def test_the_fast_paths_leave_the_pool_as_the_plain_computation(
    sizes: list[int], limited: bool, locality: str, steps: list[tuple[str, int, int]]
) -> None:
    fast, plain = _pool(sizes, limited, locality), _pool(sizes, limited, locality)
    gangs = _gangs()
    running: dict[str, Gang] = {}
    for k, (op, pick, take) in enumerate(steps):
        job_id = f"j{k}"
        if op == "p":  # a submission placed (or refused alike)
            gang = gangs[pick % len(gangs)]
            got = fast.place(job_id, gang)
            assert got == plain.place(job_id, dataclasses.replace(gang, ordered=False))
            if got is not None:
                running[job_id] = gang
        elif op in "rc" and running:  # a finish, or a tentative release claimed back
            gone = sorted(running)[pick % len(running)]
            if op == "c" and all(fast.nodes[t.node].healthy for t in fast.placement(gone)):
                for pool in (fast, plain):
                    held = pool.placement(gone)
                    pool.release(gone)
                    assert pool.claim(gone, held, running[gone])
            else:
                fast.release(gone)
                _release_task_by_task(plain, gone, running.pop(gone))
        elif op == "a":  # an adopted job, its GPUs out of order
            gang_or_none = _adopt([fast, plain], job_id, pick, take)
            if gang_or_none is not None:
                running[job_id] = gang_or_none
        elif op == "d":  # a node down, or back up (its jobs keep running, as the pool has it)
            name = f"n{pick % len(sizes)}"
            up = not fast.nodes[name].healthy
            assert fast.set_healthy(name, up) == plain.set_healthy(name, up)
        assert _state(fast) == _state(plain)
        _free_is_unused_ascending(fast)


def test_a_job_adopted_on_a_full_node_with_its_gpus_out_of_order_frees_them_in_order() -> None:
    """One 4-GPU node, all of it adopted by a job listing GPUs 3, 1, 2, 0: once it ends the
    node's free GPUs are 0-3 ascending (a span per ascending run, not the listed order), and a
    one-GPU job then takes GPU 0."""
    pool = _pool([4], False, "consolidated")
    gang = _gang_of_roles((RoleSpec("r", instances=1, gpu=4, cpu=0.0, memory_mb=0),))
    assert pool.claim("a", (TaskPlacement("r", 0, "n0", (3, 1, 2, 0)),), gang)
    assert [span[1] for span in pool._jobs["a"][1]] == [(3,), (1, 2), (0,)]
    assert list(pool.nodes["n0"].used) == [3, 1, 2, 0]  # claim's order, as before
    assert pool.release("a") == 4
    assert pool.nodes["n0"].free == (0, 1, 2, 3)
    assert pool._buckets[4] == {"n0": pool.nodes["n0"]} and pool.top_free == 4
    one = _gang_of_roles((RoleSpec("w", instances=1, gpu=1, cpu=0.0, memory_mb=0),))
    tasks = pool.place("b", one)
    assert tasks is not None and tasks[0].gpus == (0,)
