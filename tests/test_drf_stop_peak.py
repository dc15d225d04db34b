"""Given random submissions by several users (some with time limits, of 1 to 4 GPUs), finishes,
cancels, requeues and node faults on a drawn cluster, and DRF with backfill (a line per user
and GPU count), expect a stop that walks its user's lines only where the user's ``_peak`` is
above its share now (``DrfPolicy._stopped_split``) to decide, touch, keep settled and forget
lines exactly as one that walks them at every stop; and the peak to be at or above the key
of each of the user's lines filed and not waiting to be re-filed (what makes the skip exact)."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_drf_head_index import batches, check_index, ops
from test_properties import PROPERTY_SETTINGS, clusters

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.policies.drf import DrfPolicy
from labhive.scheduler.policies.queued import QueuedJob, from_config


class WalkingDrf(DrfPolicy):
    """DRF whose every stop walks its user's lines (a peak above every share)."""

    def _stopped_split(self, job: QueuedJob) -> None:
        self._peak[job.user] = math.inf
        super()._stopped_split(job)


def settled(drf: DrfPolicy) -> int | None:
    """The wake level a kept asleep pass waits for (None: none kept)."""
    return None if drf._settled is None else drf._settled[1]


def peak_bounds_the_filed_keys(drf: DrfPolicy) -> None:
    index = drf._index
    assert index is not None
    for group, entry in index.filed.items():
        if group not in index.dirty:
            assert entry[0][0] <= drf._peak[group[0]], group  # type: ignore[index]


@settings(PROPERTY_SETTINGS)
@given(data=st.data())
def test_a_stop_walks_its_users_lines_only_above_their_peak_as_at_every_stop(data: Any) -> None:
    config = load_cluster_config(data.draw(clusters()))
    nodes = sorted({n.name for n in config.nodes()})
    peaked = from_config(DrfPolicy, config, {"backfill": True})
    walking = from_config(WalkingDrf, config, {"backfill": True})
    for batch in batches(peaked, nodes, data.draw(ops([1, 1, 2, 3, 4]))):
        assert peaked.handle_batch(batch) == walking.handle_batch(batch), batch
        assert peaked.jobs() == walking.jobs()
        index, walked = peaked._index, walking._index
        assert index is not None and walked is not None
        assert index.dirty == walked.dirty and index.lazy == walked.lazy
        assert settled(peaked) == settled(walking)
        assert peaked._split == walking._split
        peak_bounds_the_filed_keys(peaked)
        check_index(peaked)
