"""Given random submissions (1 to 8 GPUs in one or two tasks), finishes, cancels, requeues,
node faults and ticks on small clusters, expect LAS, Capacity and DRF (with and without
backfill) to decide exactly as they do when every waiting line's head is tried at every pass:
a pass may skip a head only where trying it would fail and change nothing (``_hopeless``: it
needs more GPUs than are free, no preemption search may run for it, and the pass's blocked
head is found). And given one free GPU and lines of 2 to 8 GPUs waiting with nothing to
preempt, expect a pass to try one head, not seven (issue 34: a contended LAS pass tried 7
heads, nearly all refused). And given eight GPUs free, one on each node, and heads of 2 to 8
GPUs ranked before a 1-GPU one, expect a DRF pass to try only the 1-GPU head (it tried all
eight: a contended DRF pass tried about six heads per start, issue 34)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_drf_head_index import batches, ops
from test_properties import PROPERTY_SETTINGS, clusters

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Finish, Start, Submit, Tick
from labhive.scheduler.policies.capacity import CapacityPolicy
from labhive.scheduler.policies.drf import DrfPolicy
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.node_pool import Gang, NodePool
from labhive.scheduler.policies.preempt_probe import surely_refused
from labhive.scheduler.policies.queued import QueuedJob, QueuedPolicy, from_config

# White-box throughout: the reference policies (``TryEveryHead``) replace the compiled
# ``NodePool``'s ``may_fit`` on the instance.
pytestmark = pytest.mark.sources

# LAS with levels that change within a run (its options are known to ``from_config`` as its
# defaults: the ones ``las.create`` gives)
LAS = {"thresholds": (120.0, 600.0), "promote_knob": 0.0, "quantum": 60.0, "same_queue": False}


class TryEveryHead:
    """A policy whose pass tries every head it ranks, as before the skips: every head not
    needing more GPUs than are free (DRF's index asks ``may_fit`` no more than that), every
    line's head fetched anew at each pass (not kept between passes: ``_kept_heads``), none
    thinned out once the searches are spent, and placement's refusals by free counts asked
    afresh at each try (not kept until a release: ``_refused``)."""

    pool: NodePool
    _line_heads: dict[Hashable, tuple[Any, int, Hashable]] | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        pool = self.pool
        pool.may_fit = lambda gpus: gpus <= pool.free_gpus  # type: ignore[method-assign]
        self._line_heads = None  # every line's head fetched anew at each pass

    def _hopeless(self, head: QueuedJob) -> bool:
        return False

    def _thinned(self, heads: list[Any]) -> list[Any]:
        return heads  # every head ranked at the pass's start is popped and tried

    def _refused(self, gang: Gang) -> bool:
        return surely_refused(self.pool, gang)  # asked afresh at every try, never kept


class LasTryingAll(TryEveryHead, LasPolicy):
    pass


class CapacityTryingAll(TryEveryHead, CapacityPolicy):
    pass


class DrfTryingAll(TryEveryHead, DrfPolicy):
    pass


Pair = tuple[type[QueuedPolicy], type[QueuedPolicy], dict[str, Any], dict[str, Any]]
PAIRS: list[Pair] = [  # (skipping, trying all, options, defaults)
    (LasPolicy, LasTryingAll, {}, LAS),
    (LasPolicy, LasTryingAll, {"backfill": False}, LAS),
    (LasPolicy, LasTryingAll, {"promote_knob": 2.0}, LAS),  # waiting jobs change lines
    (CapacityPolicy, CapacityTryingAll, {"backfill": True}, {"borrow": True}),
    (DrfPolicy, DrfTryingAll, {}, {}),
    (DrfPolicy, DrfTryingAll, {"backfill": True}, {}),
]


def decide_alike(
    data: Any, pair: Pair, also: Callable[[QueuedPolicy, QueuedPolicy], object] | None = None
) -> None:
    """Given a drawn cluster and drawn events, expect the two policies of ``pair`` (two
    classes, their options and defaults) to answer every event, or batch of events, alike and
    to hold the same jobs after it; ``also`` asserts more of the pair after each."""
    first_cls, second_cls, options, defaults = pair
    config = load_cluster_config(data.draw(clusters()))
    nodes = sorted({n.name for n in config.nodes()})
    first = from_config(first_cls, config, dict(options), **defaults)
    second = from_config(second_cls, config, dict(options), **defaults)
    for batch in batches(first, nodes, data.draw(ops(gpus=[1, 1, 2, 3, 4, 6, 8]))):
        if len(batch) == 1:
            assert first.handle(batch[0]) == second.handle(batch[0]), batch
        else:
            assert first.handle_batch(batch) == second.handle_batch(batch), batch
        if also is not None:
            also(first, second)
        assert first.jobs() == second.jobs()


def tries_of(policy: QueuedPolicy) -> list[str]:
    """The heads ``policy``'s passes try (``_try``) from now on, in order."""
    tried: list[str] = []
    real_try = policy._try

    def counted(job: QueuedJob, out: Any, fits: bool = False) -> bool:
        tried.append(job.job_id)
        return bool(real_try(job, out, fits))

    policy._try = counted  # type: ignore[method-assign]
    return tried


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), pair=st.sampled_from(PAIRS))
def test_a_pass_that_skips_hopeless_heads_decides_as_one_trying_every_head(
    data: Any, pair: Pair
) -> None:
    decide_alike(data, pair)


def eight_nodes_of_eight() -> Any:
    node = {"childCellType": "GPU", "childCellNumber": 8, "isNodeLevel": True}
    return load_cluster_config(
        {
            "physicalCluster": {
                "cellTypes": {"NODE": node},
                "physicalCells": [{"cellType": "NODE", "cellAddress": f"n{i}"} for i in range(8)],
            },
            "virtualClusters": {"vc0": {"virtualCells": [{"cellType": "NODE", "cellNumber": 8}]}},
        }
    )


def tries_in_a_pass(
    cls: type[QueuedPolicy], options: dict[str, Any], defaults: dict[str, Any]
) -> int:
    """Eight 8-GPU nodes, each running a 7-GPU and a 1-GPU job (all young: nothing may be
    preempted); jobs of 2 to 8 GPUs waiting, one line each. One 1-GPU job ends: how many
    heads does the pass try (``_try``)?"""
    policy = from_config(cls, eight_nodes_of_eight(), dict(options), **defaults)
    now = 0.0

    def submit(job_id: str, gpus: int) -> None:
        nonlocal now
        now += 1.0
        spec = parse_job({"name": job_id, "vc": "vc0", "user": job_id, "gpus": gpus})
        policy.check(spec)
        policy.handle(Submit(job_id, spec, now))

    for i in range(8):
        submit(f"big{i}", 7)
        submit(f"one{i}", 1)
    for gpus in range(2, 9):
        submit(f"w{gpus}", gpus)
    waiting = [v.job_id for v in policy.jobs() if v.state == "WAITING"]
    assert waiting == [f"w{g}" for g in range(2, 9)]
    tried = tries_of(policy)
    assert policy.handle(Finish("one0", now + 1.0)) == []  # 1 GPU free: none fits
    return len(tried)


def test_a_preemptive_pass_tries_only_the_head_that_blocks_when_none_may_start() -> None:
    """LAS and Capacity (with backfill: a line per GPU count) try the first head (it blocks:
    2 GPUs needed, 1 free, nothing to preempt) and skip the six others, each needing more GPUs
    than are free with no victims; trying every head, as before, tried all seven."""
    cases: list[Pair] = [
        (LasPolicy, LasTryingAll, {}, LAS),
        (CapacityPolicy, CapacityTryingAll, {"backfill": True}, {"borrow": True}),
    ]
    for skipping, trying, options, defaults in cases:
        assert tries_in_a_pass(skipping, options, defaults) == 1, skipping.name
        assert tries_in_a_pass(trying, options, defaults) == 7, skipping.name


def test_a_drf_pass_tries_no_head_that_no_node_has_room_for() -> None:
    """Eight 8-GPU nodes, each running a 7-GPU and a 1-GPU job; users w2 to w8 wait with jobs
    of 2 to 8 GPUs, then x1 with one of 1 GPU (all of no share: ranked by submission). The
    eight 1-GPU jobs end at once: 8 GPUs free, one per node, enough by count for every head
    but placeable only for x1. DRF tries x1 alone (with backfill, w2 first: the head that
    blocks, whose start the others must not delay, is found by trying it); trying every head
    that fits by count, as before, tried all eight."""
    everyone = [*(f"w{g}" for g in range(2, 9)), "x1"]
    for options, skipping in (({}, ["x1"]), ({"backfill": True}, ["w2", "x1"])):
        for cls, tries in ((DrfPolicy, skipping), (DrfTryingAll, everyone)):
            policy = from_config(cls, eight_nodes_of_eight(), dict(options))
            for n, (job_id, gpus) in enumerate(
                [*((f"big{i}", 7) for i in range(8)), *((f"one{i}", 1) for i in range(8))]
                + [(f"w{g}", g) for g in range(2, 9)]
                + [("x1", 1)]
            ):
                spec = parse_job({"name": job_id, "vc": "vc0", "user": job_id, "gpus": gpus})
                policy.check(spec)
                policy.handle(Submit(job_id, spec, float(n)))
            tried = tries_of(policy)
            ends = [Finish(f"one{i}", 100.0) for i in range(8)]
            started = [d.job_id for d in policy.handle_batch(ends) if isinstance(d, Start)]
            assert started == ["x1"], (cls.__name__, options)
            assert tried == tries, (cls.__name__, options)


def test_a_preemptive_pass_skips_heads_that_fit_by_count_but_find_no_node() -> None:
    """Eight 8-GPU nodes, each running a 7-GPU job (1 GPU free on each: 8 free, all young);
    jobs of 2 to 8 GPUs waiting, one line each. At a tick every head fits by GPU count and
    none finds a node. The first two heads are tried (each spends one of the
    pass's two searches, with nothing to preempt), the five others skipped: placement
    surely refuses them and no search may run. Trying every head tried all seven (issue 34:
    most of a contended LAS pass's failed tries were such heads)."""
    for cls, expected in ((LasPolicy, 2), (LasTryingAll, 7)):
        policy = from_config(cls, eight_nodes_of_eight(), {}, **LAS)
        now = 0.0
        jobs = [(f"big{i}", 7) for i in range(8)] + [(f"w{g}", g) for g in range(2, 9)]
        for job_id, gpus in jobs:
            now += 0.01
            spec = parse_job({"name": job_id, "vc": "vc0", "user": job_id, "gpus": gpus})
            policy.check(spec)
            policy.handle(Submit(job_id, spec, now))
        waiting = [v.job_id for v in policy.jobs() if v.state == "WAITING"]
        assert waiting == [f"w{g}" for g in range(2, 9)]
        tried = tries_of(policy)
        assert policy.handle(Tick(now + 1.0)) == []
        assert len(tried) == expected, (cls.__name__, tried)
