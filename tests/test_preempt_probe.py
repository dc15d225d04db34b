"""Given a contended cluster where a wide gang waits and the jobs it may preempt are spread one
GPU per node, expect its preemption search to fail on paper: nothing released, nothing claimed
back, yet the pool left exactly as the old search left it (its nodes moved to the ends of
their free-count buckets, which later placements read). And given random submissions (gangs
wider than a node among them), finishes, cancels, requeues, node faults and ticks on small
clusters, expect LAS (consolidated, ``anywhere``, Tiresias' same-queue order) and Capacity to
decide exactly as a policy that makes every search, with the same pool after every event, the
order of its buckets, nodes' ``used`` and jobs included (issue 34: a failed search released
and claimed back its victims, most of a contended LAS run)."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_helpers import job
from test_pass_skips import LAS, decide_alike, eight_nodes_of_eight
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Finish, Submit, Tick
from labhive.scheduler.policies.capacity import CapacityPolicy
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.node_pool import Gang, NodePool, PoolNode, gang_of
from labhive.scheduler.policies.preempt_probe import (
    ReleaseProbe,
    fails_on_paper,
    surely_refused,
    undo_order,
)
from labhive.scheduler.policies.queued import QueuedJob, QueuedPolicy, from_config


class SearchEveryTime:
    """A policy whose searches all release and claim back, as before the probe (and, for
    LAS, running every full pass: its quiet passes are kept from what its probe met)."""

    def _fails_on_paper(self, job: QueuedJob, opp: bool) -> bool:
        return False

    def _may_keep(self, pool: NodePool) -> bool:
        return False


class LasSearching(SearchEveryTime, LasPolicy):
    pass


class CapacitySearching(SearchEveryTime, CapacityPolicy):
    pass


def _gang(gpus: int, cpu: float = 1.0) -> Gang:
    """A trace job's gang: ``gpus`` one-GPU tasks (each asking ``cpu`` CPUs)."""
    spec = job("j", 0, gpus, 1).spec
    return gang_of(replace(spec, roles=tuple(replace(r, cpu=cpu) for r in spec.roles)))


def pool_state(pool: NodePool) -> Any:
    """Everything of the pool a later decision may read, in order."""
    return (
        [list(bucket) for bucket in pool._buckets],
        [  # a job's spans name their nodes (the pools' node objects differ)
            (job_id, tasks, [(n.name, gpus, cpus, mems) for n, gpus, cpus, mems in spans])
            for job_id, (tasks, spans) in pool._jobs.items()
        ],
        [
            (n.name, n.free, list(n.used.items()), n.cpu_free, n.memory_free, n.healthy)
            for n in pool.nodes.values()
        ],
        pool.free_gpus,
    )


Pair = tuple[type[QueuedPolicy], type[QueuedPolicy], dict[str, Any], dict[str, Any]]
PAIRS: list[Pair] = [  # (probing, searching every time, options, defaults)
    (LasPolicy, LasSearching, {}, LAS),
    (LasPolicy, LasSearching, {"locality": "anywhere"}, LAS),
    (LasPolicy, LasSearching, {"backfill": False}, {**LAS, "quantum": 0.0, "same_queue": True}),
    (CapacityPolicy, CapacitySearching, {"backfill": True}, {"borrow": True}),
]


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), pair=st.sampled_from(PAIRS))
def test_a_search_that_fails_on_paper_decides_and_leaves_the_pool_as_a_real_one(
    data: Any, pair: Pair
) -> None:
    def same_pool(probing: QueuedPolicy, searching: QueuedPolicy) -> None:
        assert pool_state(probing.pool) == pool_state(searching.pool)

    decide_alike(data, pair, also=same_pool)


def contended(cls: type[QueuedPolicy]) -> tuple[QueuedPolicy, list[str]]:
    """Eight 8-GPU nodes, each running a 1-GPU job since 0 s, demoted at 60 s, and a 7-GPU
    job started at 50 s (still inside its 60 s quantum: not to be preempted). At 100 s a gang
    of sixteen 1-GPU tasks arrives (two whole nodes, in a consolidated pool); returned with
    the pool's ``release`` and ``claim`` calls counted from then on."""
    policy = from_config(cls, eight_nodes_of_eight(), {}, **{**LAS, "thresholds": (60.0,)})

    def submit(job_id: str, at: float, gpus: int, tasks: int = 1) -> list[Any]:
        spec = parse_job({"name": job_id, "vc": "vc0", "gpus": gpus, "tasks": tasks})
        policy.check(spec)
        return policy.handle(Submit(job_id, spec, at))

    for i in range(8):
        assert [d.job_id for d in submit(f"big{i}", 0.0, 7)] == [f"big{i}"]
    for i in range(8):  # one per node, in each node's last GPU
        assert [d.job_id for d in submit(f"one{i}", 0.0, 1)] == [f"one{i}"]
    for i in range(8):
        policy.handle(Finish(f"big{i}", 50.0))
        assert [d.job_id for d in submit(f"new{i}", 50.0, 7)] == [f"new{i}"]
    assert policy.handle(Tick(100.0)) == []  # the 1-GPU jobs go down a queue
    calls: list[str] = []
    pool = policy.pool
    for name in ("release", "claim"):
        real = getattr(pool, name)

        def counted(*args: Any, _real: Any = real, _name: str = name) -> Any:
            calls.append(_name)
            return _real(*args)

        setattr(pool, name, counted)
    assert submit("wide", 100.0, 1, tasks=16) == []
    return policy, calls


@pytest.mark.sources
def test_a_wide_gang_that_preemption_cannot_place_releases_nothing() -> None:
    """The gang needs two whole nodes; preempting every 1-GPU job (the only victims) frees one
    GPU on each node, never a whole node: the search fails. Before, it released each victim
    and claimed it back (8 releases, 8 claims, at every pass); now it releases nothing, and the
    pool's buckets end in the order the old search left them."""
    probing, calls = contended(LasPolicy)
    searching, old_calls = contended(LasSearching)
    assert calls == []
    assert old_calls == ["release"] * 8 + ["claim"] * 8
    assert pool_state(probing.pool) == pool_state(searching.pool)
    before = [f"n{i}" for i in range(8)]
    assert list(probing.pool._buckets[0]) != before  # the undone search moved them


def test_what_the_probe_refuses_placement_refuses() -> None:
    """Given pools of 2- and 8-GPU nodes in random states of use (some with CPU limits), and
    gangs of 1 to 24 GPUs: where ``surely_refused`` says placement would refuse, ``place``
    refuses; where a ``ReleaseProbe`` of some running jobs says the gang may not fit,
    releasing those jobs for real leaves ``place`` refusing it too. A probe refusing one
    gang that placement places shows up here (both answers are exercised)."""
    rng = random.Random(34)
    refused = may = 0
    for _ in range(400):
        nodes = [PoolNode(f"s{i}", None, (0, 1)) for i in range(rng.randint(0, 8))]
        cpu = rng.choice([math.inf, 16.0])
        nodes += [PoolNode(f"b{i}", None, tuple(range(8)), cpu) for i in range(rng.randint(1, 5))]
        pool = NodePool(nodes, rng.choice(["consolidated", "consolidated", "anywhere"]))
        running = []
        for k in range(rng.randint(0, 30)):
            if pool.place(f"f{k}", _gang(rng.choice([1, 1, 2, 4, 9]))) is not None:
                running.append(f"f{k}")
        gang = _gang(rng.choice([1, 2, 3, 4, 6, 8, 9, 12, 16, 24]))
        if surely_refused(pool, gang):
            refused += 1
            assert pool.place("x", gang) is None
        probe = ReleaseProbe(pool, gang)
        victims = rng.sample(running, rng.randint(0, len(running)))
        for victim in victims:
            probe.release(victim)
        for victim in victims:
            pool.release(victim)
        if probe.may_fit():
            may += 1
        else:
            assert pool.place("x", gang) is None, (gang.gpus, victims)
    assert refused > 30 and may > 30


class Victim:
    """What a search reads of a victim: its id and GPUs."""

    def __init__(self, job_id: str, gpus: int) -> None:
        self.job_id, self.gpus = job_id, gpus


def search_by_probe(pool: NodePool, gang: Gang, victims: list[Any], limit: int) -> bool:
    """The search on paper as ``QueuedPass._fails_on_paper`` makes it (no VC quota): a
    ``ReleaseProbe`` walked victim by victim, then ``undo_order`` of those met."""
    probe = ReleaseProbe(pool, gang)
    released: list[str] = []
    freed = pool.free_gpus
    for victim in victims:
        released.append(victim.job_id)
        probe.release(victim.job_id)
        freed += victim.gpus
        if freed >= gang.gpus:
            if probe.may_fit():
                return False
            if freed >= limit:
                break
    undo_order(pool, released)
    return True


def test_the_one_loop_search_answers_and_leaves_the_pool_as_probe_and_undo() -> None:
    """Given two copies of pools of 2- and 8-GPU nodes in random states of use (some with CPU
    limits, some nodes down) and a gang of 1 to 24 GPUs with random victims: expect
    ``fails_on_paper`` (LAS's search on paper in one loop) to answer as the probe and
    ``undo_order`` do, the pool then in the same state, bucket order included. Where it says
    the search may succeed, it has moved the victims it met already: releasing those (as the
    real search does) and claiming them back must leave the two pools alike too. (Held so
    on purpose-broken copies: skipping the bucket moves of nodes with free GPUs, the pool's
    jobs left in place, the CPU counters restored per victim, a bound one GPU off: each
    fails here.)"""
    rng = random.Random(3434)
    fails = maybes = moved = rounded = 0
    for _ in range(500):
        seed = rng.random()
        pools = []
        for _copy in range(2):
            r = random.Random(seed)
            nodes = [PoolNode(f"s{i}", None, (0, 1)) for i in range(r.randint(0, 6))]
            cpu = r.choice([math.inf, 16.0])
            nodes += [PoolNode(f"b{i}", None, tuple(range(8)), cpu) for i in range(r.randint(1, 6))]
            pool = NodePool(nodes, r.choice(["consolidated", "consolidated", "anywhere"]))
            running = []
            for k in range(r.randint(0, 40)):
                # (odd CPU sizes: limited nodes' float counters round, in the order summed)
                gang = _gang(r.choice([1, 1, 1, 2, 3, 4, 9]), r.choice([1.0, 0.37, 1.13, 0.29]))
                if pool.place(f"f{k}", gang) is not None:
                    running.append((f"f{k}", gang))
            for _ in range(r.randint(0, len(running) // 3)):  # finishes free GPUs here and there
                pool.release(running.pop(r.randrange(len(running)))[0])
            if r.random() < 0.2 and nodes:
                pool.set_healthy(r.choice(nodes).name, False)
            gang = _gang(r.choice([1, 2, 3, 4, 6, 8, 9, 12, 16, 24]))
            victims = [Victim(j, g.gpus) for j, g in r.sample(running, r.randint(0, len(running)))]
            pools.append((pool, gang, victims, running))
        (mine, gang, victims, running), (theirs, _, _, _) = pools
        limit = gang.gpus + 2 * mine.max_node_gpus
        answer = fails_on_paper(mine, gang, iter(victims), mine.free_gpus, limit)
        assert answer == search_by_probe(theirs, gang, victims, limit)
        if answer:
            fails += 1
            spans = [s for v in victims for s in mine._jobs[v.job_id][1]]
            moved += any(n.free for n, *_ in spans)
            rounded += sum(bool(cpus) for _, _, cpus, _ in spans) > 1
        else:  # the real search releases at least the victims met: release all, claim back
            maybes += 1
            placed = {v.job_id: theirs.placement(v.job_id) for v in victims}
            for victim in victims:
                mine.release(victim.job_id)
                theirs.release(victim.job_id)
            assert pool_state(mine) == pool_state(theirs)
            held = dict(running)
            for victim in victims:  # (a node down refuses the claim: in both)
                args = (victim.job_id, placed[victim.job_id], held[victim.job_id])
                assert mine.claim(*args) == theirs.claim(*args)
        assert pool_state(mine) == pool_state(theirs)
    assert fails > 100 and maybes > 100 and moved > 30 and rounded > 20, (
        fails,
        maybes,
        moved,
        rounded,
    )
