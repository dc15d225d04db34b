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
from typing import Any

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
from labhive.scheduler.policies.preempt_probe import ReleaseProbe, surely_refused
from labhive.scheduler.policies.queued import QueuedJob, QueuedPolicy, from_config


class SearchEveryTime:
    """A policy whose searches all release and claim back, as before the probe."""

    def _fails_on_paper(self, job: QueuedJob, opp: bool) -> bool:
        return False


class LasSearching(SearchEveryTime, LasPolicy):
    pass


class CapacitySearching(SearchEveryTime, CapacityPolicy):
    pass


def _gang(gpus: int) -> Gang:
    """A trace job's gang: ``gpus`` one-GPU tasks (each asking a CPU)."""
    return gang_of(job("j", 0, gpus, 1).spec)


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
