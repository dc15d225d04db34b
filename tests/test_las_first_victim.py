"""Given ``test_las_search_bounds``' crowded workloads (a cluster full of demoted 1-GPU jobs,
many victims to a queue, some finished; then gangs wider than a node where the free GPUs reach
a search's bound, 1-GPU jobs, finishes, cancels, node faults and ticks), expect LAS's first
victim found in one loop (``LasPolicy._first_lower``, asked by the bound on a search,
``_fails_by_bound``, and by ``_replays``) to be, at every ask, the first that ``_lower_than``
yields, and LAS so asking to decide as LAS searching in full (issue 34: a contended LAS run
asks for it about three times per job arrived)."""

from __future__ import annotations

from typing import Any

import test_las_search_bounds

from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.queued import QueuedJob


class LasCheckingFirst(LasPolicy):
    """LAS whose every first victim is held to ``_lower_than``'s first."""

    asked = 0  # first victims found in one loop, over every instance

    def _first_lower(self, level: int) -> QueuedJob | None:
        found = super()._first_lower(level)
        LasCheckingFirst.asked += 1
        assert found is next(self._lower_than(level), None), level
        return found


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
