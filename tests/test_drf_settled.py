"""Given a contended cluster where every waiting user's next job is too wide for any node's
free GPUs, expect DRF (without backfill) to make no pass until a release could make room or a
line's head changes (``HeadIndex.asleep``, kept as ``_settled``), and to decide exactly as DRF
that makes every pass (``SKIP_SETTLED_PASSES`` False) on random submissions, finishes, cancels,
requeues and node faults with wide gangs."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_drf_head_index import check_index, decide_alike, eight_busy_nodes, ops
from test_properties import PROPERTY_SETTINGS, clusters

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.model import Finish
from labhive.scheduler.policies.drf import DrfPolicy
from labhive.scheduler.policies.queued import from_config


class EveryPassDrf(DrfPolicy):
    SKIP_SETTLED_PASSES = False


@settings(PROPERTY_SETTINGS)
@given(data=st.data())
def test_drf_skipping_settled_passes_decides_as_drf_making_every_pass(data: Any) -> None:
    config = load_cluster_config(data.draw(clusters()))
    nodes = sorted({n.name for n in config.nodes()})
    skipping = from_config(DrfPolicy, config, {})
    every = from_config(EveryPassDrf, config, {})
    steps = data.draw(ops([1, 2, 4, 4, 8]))
    decide_alike(skipping, every, nodes, steps, check=lambda fast, _: check_index(fast))


@pytest.mark.sources
def test_finishes_that_free_too_little_for_any_waiting_kind_make_no_pass() -> None:
    """Each 1-GPU job that ends leaves its node 1 GPU free, too little for ann's 16 GPUs: after
    the pass that parks her kind, no pass is made (the finishes' users wait for nothing; a
    finish of a user who waits re-ranks her line without a pass). A 7-GPU job's end leaves a
    node empty: a pass is made, and once two are empty her job starts."""
    drf = eight_busy_nodes()
    passes: list[float] = []
    made = drf._indexed_pass

    def counted(*args: Any) -> None:
        passes.append(drf._now)
        made(*args)

    drf._indexed_pass = counted  # type: ignore[method-assign,assignment]

    def finish(job_id: str, now: float) -> list[str]:
        passes.clear()
        return [d.job_id for d in drf.handle(Finish(job_id, now)) if hasattr(d, "tasks")]

    assert finish("one0", 100) == [] and len(passes) == 1  # parks ann's kind
    for i in range(1, 8):
        assert finish(f"one{i}", 100 + i) == [] and passes == [], i
    assert finish("big0", 200) == [] and len(passes) == 1  # a node left empty: a pass
    assert finish("big1", 201) == ["a"] and len(passes) == 1
    check_index(drf)
