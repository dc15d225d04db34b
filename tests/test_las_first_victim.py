"""Given random submissions (1 to 8 GPUs in one or two tasks, gangs wider than a node among
them), finishes, cancels, requeues, node faults and many ticks (demotions, runs' quanta ending)
on small clusters, expect LAS's first victim found in one loop (``LasPolicy._first_lower``,
asked by the bound on a search, ``_fails_by_bound``, and by ``_replays``) to be, at every ask,
the first that ``_lower_than`` yields, and LAS so asking to decide as LAS trying every head
And given ``test_las_search_bounds``' crowded workloads (many victims to a queue, the bound
asked), the same (issue 34: a contended LAS run asks for it about three times per job
arrived)."""

from __future__ import annotations

from typing import Any

import test_las_search_bounds
from hypothesis import given, settings
from hypothesis import strategies as st
from test_drf_head_index import batches
from test_las_quiet_passes import OPTIONS, steps
from test_pass_skips import LAS, LasTryingAll
from test_properties import PROPERTY_SETTINGS, clusters

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.queued import QueuedJob, from_config


class LasCheckingFirst(LasPolicy):
    """LAS whose every first victim is held to ``_lower_than``'s first."""

    asked = 0  # first victims found in one loop, over every instance

    def _first_lower(self, level: int) -> QueuedJob | None:
        found = super()._first_lower(level)
        LasCheckingFirst.asked += 1
        assert found is next(self._lower_than(level), None), level
        return found


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), options=st.sampled_from([*OPTIONS, {"same_queue": True}]))
def test_the_first_victim_in_one_loop_is_the_first_lower_than_yields(
    data: Any, options: dict[str, Any]
) -> None:
    config = load_cluster_config(data.draw(clusters()))
    nodes = sorted({n.name for n in config.nodes()})
    checking = from_config(LasCheckingFirst, config, dict(options), **LAS)
    every = from_config(LasTryingAll, config, dict(options), **LAS)
    for batch in batches(checking, nodes, data.draw(steps())):
        if len(batch) == 1:
            assert checking.handle(batch[0]) == every.handle(batch[0]), batch
        else:
            assert checking.handle_batch(batch) == every.handle_batch(batch), batch
        assert checking.jobs() == every.jobs()


def test_the_first_victims_of_searches_a_bound_settles_are_lower_than_s_first(
    monkeypatch: Any,
) -> None:
    """``test_las_search_bounds``' workloads (a cluster full of demoted 1-GPU jobs, many
    victims to a queue, and gangs wider than a node where the free GPUs reach the bound),
    with LAS checking each first victim: it decides as LAS searching in full, and the bound
    asked for first victims."""
    monkeypatch.setattr(test_las_search_bounds, "LasPolicy", LasCheckingFirst)
    asked = LasCheckingFirst.asked
    test_las_search_bounds.test_a_las_settling_searches_by_a_bound_decides_and_leaves_the_pool_as_one_searching()
    assert LasCheckingFirst.asked > asked
