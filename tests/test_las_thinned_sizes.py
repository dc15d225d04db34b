"""Given random submissions (1 to 8 GPUs in one or two tasks, gangs wider than a node among
them), finishes, cancels, requeues, node faults and ticks on small clusters, expect every
thinning of a LAS pass's kept heads (``QueuedPass._thinned``, weighing the kept lines by GPU
count, ``_kept_sizes``, before it scans the heap) to keep exactly the heads the plain scan
keeps (each head whose GPU count is free and not refused), and LAS so thinning to decide as
LAS trying every head. And given a pass whose blocked head is the only line of its GPU count,
expect the thinning not to scan the heap (issue 34: a contended LAS pass kept none of its ~10
heads 9 times in 10, each weighed)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_drf_head_index import batches
from test_las_quiet_passes import steps
from test_pass_skips import LAS, LasTryingAll
from test_properties import PROPERTY_SETTINGS, clusters

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.queued import from_config

# White-box throughout: the reference ``LasTryingAll`` replaces the compiled ``NodePool``'s
# ``may_fit`` on the instance.
pytestmark = pytest.mark.sources

Heads = list[tuple[Any, int, Any]]


class LasCheckingThin(LasPolicy):
    """LAS whose every thinning is held to the plain scan of the heap it was given."""

    skipped_scans = 0  # thinnings of a non-empty kept heap that kept none (the counts' case)

    def _thinned(self, heads: Heads) -> Heads:
        given_heads = list(heads)
        kept = super()._thinned(heads)
        # (``held`` was asked by the thinning: what it returned is the refusals now)
        parked, free = self._sizes._refused, self.pool.free_gpus
        plain = [e for e in given_heads if e[2][-1] <= free and e[2][-1] not in parked]
        # (the same heads: ``_thinned`` may heapify, the filter keeps the given order)
        assert sorted(kept) == sorted(plain), (kept, plain)
        if given_heads and not kept and heads is self._kept_list:
            type(self).skipped_scans += 1
        return kept


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), options=st.sampled_from([{}, {"promote_knob": 2.0}, {"quantum": 0.0}]))
def test_a_thinning_by_kept_gpu_counts_keeps_the_heads_the_plain_scan_keeps(
    data: Any, options: dict[str, Any]
) -> None:
    config = load_cluster_config(data.draw(clusters()))
    nodes = sorted({n.name for n in config.nodes()})
    checking = from_config(LasCheckingThin, config, dict(options), **LAS)
    every = from_config(LasTryingAll, config, dict(options), **LAS)
    for batch in batches(checking, nodes, data.draw(steps())):
        if len(batch) == 1:
            assert checking.handle(batch[0]) == every.handle(batch[0]), batch
        else:
            assert checking.handle_batch(batch) == every.handle_batch(batch), batch
        assert checking.jobs() == every.jobs()


def test_the_property_test_meets_thinnings_settled_by_counts() -> None:
    """The property above is not vacuous: its runs meet thinnings of a non-empty kept heap
    that keep none (where the kept counts may settle it without a scan)."""
    before = LasCheckingThin.skipped_scans
    test_a_thinning_by_kept_gpu_counts_keeps_the_heads_the_plain_scan_keeps()
    assert LasCheckingThin.skipped_scans > before
