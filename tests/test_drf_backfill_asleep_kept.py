"""Given a contended cluster where DRF with backfill's pass ended asleep (every waiting kind
parked, its first parked head blocked: ``_block_asleep``), expect the passes after it to be
skipped whole (``_settled``) until a release reaches the least level parked, a head changes, a
stop re-files a line or re-ranks the blocked head's, and to decide exactly as DRF with backfill
that runs each of those passes (the pass cut short, not kept), with the same blocked head left
for the submissions that follow, on random submissions (some with time limits), finishes,
cancels, requeues and node faults with wide gangs."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_drf_backfill_asleep import four_busy_nodes, same_blocked
from test_drf_head_index import blocked, decide_alike, nodes_of_eight, ops
from test_properties import PROPERTY_SETTINGS, clusters

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Decision, Finish, Start, Submit
from labhive.scheduler.policies.drf import DrfPolicy
from labhive.scheduler.policies.queued import QueuedJob, from_config
from labhive.scheduler.policies.queued_pass import QueuedPass


class PassingDrf(DrfPolicy):
    """DRF with backfill whose asleep pass stops at its blocked head but keeps nothing: the
    next pass is run, whatever changed since."""

    def _block_asleep(self, head: QueuedJob, out: list[Decision]) -> None:
        QueuedPass._block_asleep(self, head, out)


@settings(PROPERTY_SETTINGS)
@given(data=st.data())
def test_drf_with_backfill_skipping_asleep_passes_decides_as_drf_running_them(data: Any) -> None:
    config = load_cluster_config(data.draw(clusters()))
    nodes = sorted({n.name for n in config.nodes()})
    skipping = from_config(DrfPolicy, config, {"backfill": True})
    passing = from_config(PassingDrf, config, {"backfill": True})
    decide_alike(skipping, passing, nodes, data.draw(ops([1, 1, 2, 3, 4])), check=same_blocked)


@pytest.mark.sources
def test_finishes_that_free_too_little_skip_the_pass_until_a_node_empties() -> None:
    """Four 8-GPU nodes each running a 6-GPU and a 1-GPU job; bob waits with 3 GPUs. The
    first 1-GPU job's end runs a pass that tries him and parks his kind; the second's, one
    that blocks him asleep (kept); the next two (each leaving 2 GPUs free on its node, too
    few) run no pass at all; a 6-GPU job's end empties a node: his kind wakes, a pass runs,
    and his job starts."""
    drf = four_busy_nodes()
    passes: list[float] = []
    begin = drf._begin_pass

    def counted() -> None:
        passes.append(drf._now)
        begin()

    drf._begin_pass = counted  # type: ignore[method-assign]

    def finish(job_id: str, now: float) -> list[str]:
        passes.clear()
        return [d.job_id for d in drf.handle(Finish(job_id, now)) if isinstance(d, Start)]

    assert finish("one0", 100) == [] and passes == [100] and blocked(drf) == "bob"
    assert drf._settled is None  # tried: parked
    assert finish("one1", 101) == [] and passes == [101] and blocked(drf) == "bob"
    assert drf._settled is not None  # asleep, kept
    for i in range(2, 4):
        assert finish(f"one{i}", 100 + i) == [] and passes == [] and blocked(drf) == "bob", i
    assert finish("six0", 200) == ["bob"] and passes == [200]


def test_a_new_head_ranked_first_ends_the_sleep() -> None:
    """As above, after bob blocked asleep: ann submits 3 GPUs too. Her job heads a new line,
    so the sleep ends (the next pass must rank her); that pass blocks bob again (both users'
    shares are 0 and he came first), and is kept asleep."""
    drf = four_busy_nodes()
    drf.handle(Finish("one0", 100))
    drf.handle(Finish("one1", 101))
    assert drf._settled is not None and blocked(drf) == "bob"
    spec = parse_job({"name": "ann", "vc": "vc0", "user": "ann", "gpus": 3})
    drf.check(spec)
    drf.handle(Submit("ann", spec, 102))
    assert drf._settled is None  # a new head: the next pass must rank it
    assert not [d for d in drf.handle(Finish("one2", 103)) if isinstance(d, Start)]
    assert blocked(drf) == "bob" and drf._settled is not None


def four_full_nodes(
    waiters: list[tuple[str, str, int]],
) -> tuple[DrfPolicy, list[tuple[str, str, int]]]:
    """DRF with backfill on four 8-GPU nodes, each running a 6-GPU job and two 1-GPU jobs
    (best fit packs them in pairs: ann's a0 and a1, then bob's and cy's, dee's and eve's,
    fay's and gus's); then ``waiters`` (job, user, GPUs) submitted."""
    config = nodes_of_eight(4)
    drf = from_config(DrfPolicy, config, {"backfill": True})
    runners = [(f"six{i}", "six", 6) for i in range(4)]
    runners += [("a0", "ann", 1), ("a1", "ann", 1)]
    runners += [(f"{u[0]}0", u, 1) for u in ["bob", "cy", "dee", "eve", "fay", "gus"]]
    for n, (job_id, user, gpus) in enumerate([*runners, *waiters]):
        spec = parse_job({"name": job_id, "vc": "vc0", "user": user, "gpus": gpus})
        drf.check(spec)
        drf.handle(Submit(job_id, spec, float(n)))
    return drf, runners


def test_a_stop_that_ranks_another_line_first_ends_the_sleep() -> None:
    """Four full 8-GPU nodes, each running a 6-GPU job and two 1-GPU jobs (ann's two on one
    node); ann, then bob, waits with 3 GPUs. Bob's share (one GPU) is below ann's (two), so
    he ranks first. Three 1-GPU ends on three nodes leave 3 GPUs free, one a node: bob is
    tried and blocks, his kind parked; a fourth, beside the third, leaves a node 2 free, too
    few: the pass blocks him asleep, kept. Then one of ann's jobs ends (1 GPU freed): her
    share falls to his, and her job, submitted first, now ranks before his. The pass is run
    (her line was filed too late: ``touch``), and blocks her, not him."""
    drf, runners = four_full_nodes([("ann3", "ann", 3), ("bob3", "bob", 3)])
    nodes = {job_id: drf.pool.placement(job_id)[0].node for job_id, _, _ in runners}
    assert nodes["a0"] == nodes["a1"] and nodes["f0"] == nodes["g0"]  # (best fit packs)
    assert len({nodes["c0"], nodes["e0"], nodes["g0"], nodes["a0"]}) == 4
    for n, job_id in enumerate(["c0", "e0", "g0"]):
        drf.handle(Finish(job_id, 100.0 + n))
    assert blocked(drf) == "bob3" and drf._settled is None  # tried: parked
    drf.handle(Finish("f0", 110))
    assert blocked(drf) == "bob3" and drf._settled is not None  # asleep, kept
    assert not [d for d in drf.handle(Finish("a0", 120)) if isinstance(d, Start)]
    assert blocked(drf) == "ann3"


def test_a_blocked_head_whose_user_started_in_the_pass_is_not_kept() -> None:
    """As above, with bob's 2-GPU job waiting too, before his 3-GPU one. Three 1-GPU ends
    (one a node) park both kinds; fay's end leaves her node 2 free: bob's 2-GPU job starts
    there, and the pass blocks his 3-GPU job asleep, filed at his share before that start.
    Not kept: his share rose (``_risen``), so at the next pass, after dee's end (too few
    freed), his line is re-filed at his new share (3 GPUs), after ann's (2), and she blocks."""
    drf, _ = four_full_nodes([("ann3", "ann", 3), ("bob2", "bob", 2), ("bob3", "bob", 3)])
    for n, job_id in enumerate(["c0", "e0", "g0"]):
        drf.handle(Finish(job_id, 100.0 + n))
    started = [d.job_id for d in drf.handle(Finish("f0", 110)) if isinstance(d, Start)]
    assert started == ["bob2"] and blocked(drf) == "bob3"
    assert not [d for d in drf.handle(Finish("d0", 120)) if isinstance(d, Start)]
    assert blocked(drf) == "ann3"
