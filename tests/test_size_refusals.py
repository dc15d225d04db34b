"""Given random submissions (gangs wider than a node among them), finishes, cancels, requeues,
node faults and ticks on small clusters, expect Capacity and LAS, keeping the gang sizes
placement refuses across passes (``size_refusals.py``), to answer every such question as the
pool's free counts answer it at that moment, and to decide as policies that ask afresh at
every pass. And given eight 8-GPU nodes with one GPU free on each and heads of 2 to 8 GPUs
waiting, expect a pass to ask the pool again only about the sizes a release could have made
room for (issue 34: a contended Capacity pass asked about every head's size at every finish).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_node_pool_wide_gangs import _gang, _pool
from test_pass_skips import LAS, Pair, decide_alike, eight_nodes_of_eight
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Finish, Start, Submit, Tick
from labhive.scheduler.policies.capacity import CapacityPolicy
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.node_pool import NodePool
from labhive.scheduler.policies.queued import from_config
from labhive.scheduler.policies.size_refusals import SizeRefusals


class CheckedRefusals(SizeRefusals):
    """Each answer held to the pool's free counts at the moment it is given."""

    def refused(self, pool: NodePool, gpus: int) -> bool:
        answer = super().refused(pool, gpus)
        assert answer == (not pool.may_fit(gpus)), (gpus, answer, [len(b) for b in pool._buckets])
        return answer


class FreshRefusals(SizeRefusals):
    """Nothing kept: the pool asked at every question (as each pass did before)."""

    def refused(self, pool: NodePool, gpus: int) -> bool:
        return not pool.may_fit(gpus)


class AskedSizes(SizeRefusals):
    """Records the sizes it could not answer from what it keeps."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []

    def refused(self, pool: NodePool, gpus: int) -> bool:
        if not (pool is self._pool and gpus in self._refused and pool.peak < self._low):
            self.asked.append(gpus)
        return super().refused(pool, gpus)


class Checked:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sizes: SizeRefusals = CheckedRefusals()


class Fresh:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sizes: SizeRefusals = FreshRefusals()


class CapacityChecked(Checked, CapacityPolicy):
    pass


class CapacityFresh(Fresh, CapacityPolicy):
    pass


class LasChecked(Checked, LasPolicy):
    pass


class LasFresh(Fresh, LasPolicy):
    pass


PAIRS: list[Pair] = [
    (CapacityChecked, CapacityFresh, {}, {"borrow": True}),
    (CapacityChecked, CapacityFresh, {"backfill": True}, {"borrow": True}),
    (LasChecked, LasFresh, {}, LAS),
    (LasChecked, LasFresh, {"locality": "anywhere"}, LAS),
]


def test_kept_refusals_answer_as_the_pool_does_after_starts_releases_and_faults() -> None:
    """Given random pools of 2- and 8-GPU nodes and random placements, releases, nodes going
    down and coming up, and now and then a new pool (a reconfigured cluster), expect each
    answer about a size, kept or not, to be what ``may_fit`` says at that moment: a size kept
    refused past a release that made room for it (a wake level too high) shows up here."""
    rng = random.Random(34_001)
    sizes = (1, 2, 3, 4, 6, 8, 9, 12, 16, 17, 24)
    kept = woken = 0
    for _ in range(200):
        memo, pool = SizeRefusals(), _pool(rng)
        for step in range(60):
            roll = rng.random()
            if roll < 0.3:
                pool.place(f"p{step}", _gang(rng.choice([1, 1, 2, 4, 8, 9])))
            elif roll < 0.6 and pool._jobs:
                pool.release(rng.choice(sorted(pool._jobs)))
            elif roll < 0.7:
                name = rng.choice(sorted(pool.nodes))
                pool.set_healthy(name, not pool.nodes[name].healthy)
            elif roll < 0.72:
                pool = _pool(rng)
            for gpus in rng.sample(sizes, 4):
                held = pool is memo._pool and gpus in memo._refused
                asleep = held and pool.peak < memo._low
                answer = memo.refused(pool, gpus)
                assert answer == (not pool.may_fit(gpus)), (gpus, [len(b) for b in pool._buckets])
                kept += asleep
                woken += held and not asleep and not answer
    assert kept > 1000 and woken > 100  # both: answered as kept, and made room for since


@pytest.mark.sources
@settings(PROPERTY_SETTINGS)
@given(data=st.data(), pair=st.sampled_from(PAIRS))
def test_refusals_kept_across_passes_answer_as_the_pool_does_now(data: Any, pair: Pair) -> None:
    decide_alike(data, pair)


@pytest.mark.sources
def test_a_pass_asks_again_only_about_sizes_a_release_could_have_made_room_for() -> None:
    """Eight 8-GPU nodes, each running a 6-GPU job; 1-GPU jobs fill n0 to n3 and w2 takes n4's
    two free GPUs, so n5 to n7 have two free each (nothing borrowed: nothing to preempt); one
    line per GPU count, jobs of 3 to 8 GPUs waiting. At a tick w3 and w4 spend the pass's two
    searches, sizes 5 and 6 are asked and refused (7 and 8 are more than the 6 free). At a
    second tick neither is asked again. A 1-GPU job on n0 ends (it has one free): 7 GPUs free,
    so 7 is asked, not 5 or 6. A 6-GPU job on n1 ends: w3 starts there (placed as soon as
    ``may_fit`` lets it through: its refusal is not asked, it would be that no); 6 is asked
    again (a node was left with 6 free, which may make room for it), and 8 (10 free now), but
    not 7, which needs a node left with 7."""

    def run(sizes: SizeRefusals) -> list[list[str]]:
        policy = from_config(CapacityPolicy, eight_nodes_of_eight(), {"backfill": True})
        policy._sizes = sizes
        now = 0.0
        jobs = [(f"big{i}", 6) for i in range(8)] + [(f"one{i}", 1) for i in range(8)]
        for job_id, gpus in [*jobs, *((f"w{g}", g) for g in range(2, 9))]:
            now += 1.0
            spec = parse_job({"name": job_id, "vc": "vc0", "user": job_id, "gpus": gpus})
            policy.check(spec)
            policy.handle(Submit(job_id, spec, now))
        if isinstance(sizes, AskedSizes):
            sizes.asked.clear()
        started = []
        for event in (
            Tick(now + 1),
            Tick(now + 2),
            Finish("one0", now + 3),
            Finish("big1", now + 4),
        ):
            started.append([d.job_id for d in policy.handle(event) if isinstance(d, Start)])
            if isinstance(sizes, AskedSizes):
                asked.append(list(sizes.asked))
                sizes.asked.clear()
        return started

    asked: list[list[int]] = []
    started = run(AskedSizes())
    assert started == [[], [], [], ["w3"]]
    assert asked == [[5, 6], [], [7], [6, 8]], asked
    assert run(FreshRefusals()) == started  # asking afresh decides the same
