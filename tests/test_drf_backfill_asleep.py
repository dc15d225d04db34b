"""Given a contended cluster where DRF with backfill finds every waiting kind parked (too wide
for any node's free GPUs), expect its pass to block the first parked head without asking
placement and to stop there (``QueuedPass._block_asleep``), and to decide exactly as DRF with
backfill that tries that head and looks on (``SKIP_SETTLED_PASSES`` False), with the same
blocked head left for the submissions that follow, on random submissions (some with time
limits), finishes, cancels, requeues and node faults with wide gangs."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_drf_head_index import (
    asking_may_fit,
    blocked,
    check_index,
    decide_alike,
    nodes_of_eight,
    ops,
)
from test_properties import PROPERTY_SETTINGS, clusters

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Submit
from labhive.scheduler.policies.drf import DrfPolicy
from labhive.scheduler.policies.head_index import PARK, START
from labhive.scheduler.policies.queued import from_config


class LookingOnDrf(DrfPolicy):
    SKIP_SETTLED_PASSES = False


@settings(PROPERTY_SETTINGS)
@given(data=st.data())
def test_drf_with_backfill_stopping_at_an_asleep_head_decides_as_drf_looking_on(
    data: Any,
) -> None:
    config = load_cluster_config(data.draw(clusters()))
    nodes = sorted({n.name for n in config.nodes()})
    stopping = from_config(DrfPolicy, config, {"backfill": True})
    looking = from_config(LookingOnDrf, config, {"backfill": True})
    decide_alike(stopping, looking, nodes, data.draw(ops([1, 1, 2, 3, 4])), check=same_blocked)


def same_blocked(fast: DrfPolicy, plain: DrfPolicy) -> None:
    """The same blocked head left (what the next submissions jump), and ``fast``'s index
    sound."""
    assert blocked(fast) == blocked(plain)
    check_index(fast)


def four_busy_nodes() -> DrfPolicy:
    """DRF with backfill on four 8-GPU nodes, each running a 6-GPU job and a 1-GPU job (one
    GPU free on each); bob waits with 3 GPUs on one node."""
    config = nodes_of_eight(4)
    drf = from_config(DrfPolicy, config, {"backfill": True})
    jobs = [(f"six{i}", 6) for i in range(4)] + [(f"one{i}", 1) for i in range(4)]
    for n, (job_id, gpus) in enumerate([*jobs, ("bob", 3)]):
        spec = parse_job({"name": job_id, "vc": "vc0", "user": job_id[:3], "gpus": gpus})
        drf.check(spec)
        drf.handle(Submit(job_id, spec, float(n)))
    return drf


@pytest.mark.sources
def test_a_finish_that_frees_too_little_blocks_the_parked_head_without_placement() -> None:
    """Each 1-GPU job that ends leaves its node 2 GPUs free, too few for bob's 3 (though 5 to
    8 are free in all): after the pass that parks his kind, each pass blocks him without
    asking ``may_fit`` and looks no further. A 6-GPU job's end leaves a node empty: his kind
    wakes, and his job starts."""
    drf = four_busy_nodes()
    asked, finish = asking_may_fit(drf)

    assert finish("one0", 100) == [] and asked == [3, 3] and blocked(drf) == "bob"  # tried, parked
    for i in range(1, 4):
        assert finish(f"one{i}", 100 + i) == [] and asked == [] and blocked(drf) == "bob", i
    assert finish("six0", 200) == ["bob"]


def test_before_a_head_blocks_every_kind_may_start() -> None:
    """Given DRF with backfill whose pass has no blocked head yet, expect its ``_may_start``
    to let any kind be tried (the first head tried blocks or starts), bob's 3 GPUs with no
    node left room for them included, and once bob blocks, to park that kind."""
    drf = four_busy_nodes()
    drf._blocked = None
    kind = (drf._jobs["bob"].gang.shape, None)
    assert drf._may_start()(kind, 3, (0.0, 0)) == START
    drf._blocked = drf._jobs["bob"]
    assert drf._may_start()(kind, 3, (1.0, 99)) >= PARK
