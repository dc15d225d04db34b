"""Given pools whose nodes have CPU and memory limits and gangs of two roles spread over nodes,
expect ``NodePool.release``, which frees a job a node at a time (its spans), to leave the pool
exactly as freeing it task by task in placement order did: the same buckets in the same order
(a later placement reads them in order), the same ``used`` order, the same float CPU and memory
sums, the same ``peak``. A span that merged a node met again after another node would refile
it once, earlier, and show up here as a different bucket order.

And given a queue policy that keeps the gangs ``check`` found fitting by their roles tuple,
expect a reconfigured, smaller cluster to refuse a size the bigger one took."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from sim_helpers import cluster, job

from labhive.scheduler.core.job_spec import RoleSpec
from labhive.scheduler.core.model import Reconfigure, SpecRejected
from labhive.scheduler.policies import get_policy
from labhive.scheduler.policies.node_pool import Gang, NodePool, PoolNode, _gang_of_roles


def _release_task_by_task(pool: NodePool, job_id: str, gang: Gang) -> None:
    """The release before spans: each task in placement order, a node unfiled where a row of
    its tasks begins and refiled where the row ends, CPU and memory added task by task."""
    tasks, _ = pool._jobs.pop(job_id)
    need = {(d.role, d.index): d for d in gang.tasks}
    touched: list[PoolNode] = []
    for t in tasks:
        node = pool.nodes[t.node]
        if not touched or touched[-1] is not node:
            if touched:
                _refile(pool, touched[-1])
            pool._unfile(node)
            touched.append(node)
        node.free += t.gpus  # (a tuple: ``PoolNode.free``)
        d = need[(t.role, t.index)]
        node.cpu_free += d.cpu
        node.memory_free += d.memory_mb
        for g in t.gpus:
            node.used.pop(g, None)
    if touched:
        _refile(pool, touched[-1])


def _refile(pool: NodePool, node: PoolNode) -> None:
    node.free = tuple(sorted(node.free))
    pool._file(node)
    pool.peak = max(pool.peak, len(node.free))


def _state(pool: NodePool) -> Any:
    return (
        [list(bucket) for bucket in pool._buckets],
        [
            (n.name, n.free, list(n.used.items()), n.cpu_free, n.memory_free)
            for n in pool.nodes.values()
        ],
        pool.free_gpus,
        pool.peak,
        list(pool._jobs),
    )


def _gang(rng: random.Random) -> Gang:
    """Two roles: "a" of one-GPU tasks, "b" of two-GPU ones, CPU in tenths (float sums whose
    order shows). Placement packs "b" first, so in (role, index) order the nodes recur."""
    return _gang_of_roles(
        (
            RoleSpec("a", instances=rng.randint(0, 4), gpu=1, cpu=0.1, memory_mb=300),
            RoleSpec("b", instances=rng.randint(1, 3), gpu=2, cpu=0.7, memory_mb=700),
        )
    )


def _revisits(tasks: tuple[Any, ...]) -> bool:
    """Whether a node comes back after another node in the tasks' order."""
    seen: list[str] = []
    for t in tasks:
        if seen and seen[-1] == t.node:
            continue
        if t.node in seen:
            return True
        seen.append(t.node)
    return False


@pytest.mark.sources
@pytest.mark.parametrize("locality", ["anywhere", "consolidated"])
def test_freeing_a_node_at_a_time_leaves_the_pool_as_freeing_task_by_task(locality: str) -> None:
    rng = random.Random(34)
    revisited = released = 0
    for _ in range(60):
        nodes = [
            PoolNode(f"n{i}", None, tuple(range(rng.choice([2, 4, 8]))), cpu=3.0, memory_mb=5000.0)
            for i in range(rng.randint(2, 6))
        ]
        pool = NodePool(nodes, locality)  # type: ignore[arg-type]
        gangs: dict[str, Gang] = {}
        for k in range(40):
            gang = _gang(rng)
            tasks = pool.place(f"j{k}", gang)
            if tasks is not None:
                gangs[f"j{k}"] = gang
                revisited += _revisits(tasks)
            if gangs and rng.random() < 0.5:
                job_id = rng.choice(sorted(gangs))
                if rng.random() < 0.3:  # a tentative release, undone: claim's spans
                    held = pool.placement(job_id)
                    pool.release(job_id)
                    assert pool.claim(job_id, held, gangs[job_id])
                before = copy.deepcopy(pool)
                _release_task_by_task(before, job_id, gangs.pop(job_id))
                pool.release(job_id)
                assert _state(pool) == _state(before)
                released += 1
    assert released > 500
    if locality == "anywhere":
        assert revisited > 20  # the case a merged span would get wrong was exercised


def test_a_size_that_fit_is_refused_once_the_cluster_shrinks() -> None:
    """Given FIFO on two 8-GPU nodes, an 8-GPU trace job passes (and a second of its size, with
    the same roles tuple, from the kept gang); after a reconfigure to two 2-GPU nodes, expect
    the same size refused: what was kept as fitting was of the old cluster."""
    sched = get_policy("fifo", cluster([8, 8]))
    first, second = job("a", 0, 8, 1).spec, job("b", 0, 8, 1).spec
    assert first.roles is second.roles  # a trace's jobs of one size share their roles
    sched.check(first)
    sched.check(second)
    sched.handle(Reconfigure(cluster([2, 2])))
    with pytest.raises(SpecRejected, match="this cluster has 4 GPUs"):
        sched.check(job("c", 0, 8, 1).spec)
    with pytest.raises(SpecRejected, match="this cluster has 4 GPUs"):
        sched.check(second)
