"""Given random clusters of two to four VCs (and, as the contended one, fragmented 8-GPU
nodes with wide borrowers refused by free counts) and random submissions, endings, requeues,
node faults and a new cluster config, expect Capacity's test for a dry pass
(``CapacityPass._dry_pass``), which weighs whole collections (the inert heads' refused counts
all held, the inert borrowers kept sorted by rank and cut at the first head not inert, the
kept counts neither refused nor more than are free), to answer at every full pass as the walk
over every inert line and every kept count did, and its sorted borrowers to be those of the
inert lines. A borrower left unsorted or stale after its line changed, or a count not asked
that the walk asked, shows up as a different answer, and then as a different start."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_capacity_pass import CapacityRankingAfresh, _node_gpus, batches, squeezed, steps
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.model import Reconfigure
from labhive.scheduler.policies.capacity import CapacityPolicy
from labhive.scheduler.policies.queued import from_config


def walked_dry(policy: CapacityPolicy) -> bool:
    """``_dry_pass`` as it was: every inert line and every kept count walked in turn (its
    refusals asked of a copy, so the policy's own are left as they were)."""
    sizes = copy.copy(policy._sizes)
    sizes._refused = parked = dict(policy._parked)
    peak, pool = policy.pool.peak, policy.pool
    inert, kept, live = policy._inert, policy._line_heads, policy._live
    assert kept is not None
    try:
        if not live:  # (every kept head inert: dry where each refused count is held still)
            return all(refused in parked for refused in inert.values() if refused)
        first = min(map(kept.__getitem__, live))
        free, blocked, spent = pool.free_gpus, False, 0
        for group, refused in inert.items():
            if not refused:
                continue
            if refused not in parked:
                return False
            if kept[group] < first:
                blocked = True
                spent += free >= refused
        if not blocked or spent < policy.SEARCHES_PER_PASS:  # (the pass's, not yet reset)
            return False
        for gpus in policy._kept_counts:
            if gpus <= free and gpus not in parked and not sizes.refused(pool, gpus):
                return False
        return True
    finally:
        pool.peak = peak


class CapacityCheckingDry(CapacityPolicy):
    """Capacity that checks, at each full pass it weighs as dry or not, the answer against the
    walk's, and its sorted borrowers against the inert lines."""

    dry = wet = 0

    def _dry_pass(self) -> bool:
        kept = self._line_heads
        assert kept is not None
        assert self._inert_ranked == sorted((kept[g], n) for g, n in self._inert.items() if n)
        # (the map ``_dry_pass`` takes: asked again there, the same, ``peak`` being 0 now)
        self._parked = self._sizes.held(self.pool)
        walked = walked_dry(self)
        answer = super()._dry_pass()
        assert answer == walked
        if answer:
            self.dry += 1
        else:
            self.wet += 1
        return answer


def replay(
    config: Any, drawn: Any, borrow: bool, other: Any, searches: int = 2
) -> CapacityCheckingDry:
    nodes = sorted({n.name for n in config.nodes()})
    checking = from_config(CapacityCheckingDry, config, {}, borrow=borrow)
    afresh = from_config(CapacityRankingAfresh, config, {}, borrow=borrow)
    checking.SEARCHES_PER_PASS = afresh.SEARCHES_PER_PASS = searches
    for batch in batches(checking, nodes, drawn, other):
        assert checking.handle_batch(batch) == afresh.handle_batch(batch), batch
        assert checking.jobs() == afresh.jobs()
        if isinstance(batch[0], Reconfigure):
            nodes = sorted({n.name for n in batch[0].config.nodes()})
    return checking


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), borrow=st.booleans())
def test_a_dry_pass_is_told_as_the_walk_over_every_line_told_it(data: Any, borrow: bool) -> None:
    configs = [load_cluster_config(data.draw(squeezed())) for _ in range(2)]
    drawn = data.draw(steps(len(configs[0].vcs), max(len(n.gpus) for n in configs[0].nodes())))

    def another_config() -> Any:
        configs.reverse()
        return configs[0]

    replay(configs[0], drawn, borrow, another_config)


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), searches=st.sampled_from([1, 2]))
def test_fragmented_8_gpu_nodes_tell_dry_passes_as_the_walk(data: Any, searches: int) -> None:
    """The contended cluster's shape: jobs of 3 to 7 GPUs on a node or two, wide borrowers
    refused by free counts, where most passes after a finish are dry."""
    config = load_cluster_config(data.draw(squeezed().filter(lambda c: _node_gpus(c) == 8)))
    drawn = data.draw(steps(len(config.vcs), 8, [1, 3, 5, 6, 7, 8], most=150))
    replay(config, drawn, True, lambda: config, searches)


def test_the_fragmented_replays_meet_dry_passes_and_others() -> None:
    """(The property above is not vacuous: a fixed draw of it meets both answers.)"""
    raw = squeezed().filter(lambda c: _node_gpus(c) == 8)
    seen = [0, 0]

    @settings(max_examples=60, deadline=None, derandomize=True)
    @given(data=st.data())
    def run(data: Any) -> None:
        config = load_cluster_config(data.draw(raw))
        drawn = data.draw(steps(len(config.vcs), 8, [1, 3, 5, 6, 7, 8], most=150))
        policy = replay(config, drawn, True, lambda: config, 1)
        seen[0] += policy.dry
        seen[1] += policy.wet

    run()
    assert seen[0] > 0 and seen[1] > 0
