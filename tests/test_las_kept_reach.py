"""Given ``test_las_search_bounds``' crowded workloads (a cluster full of demoted 1-GPU jobs,
some finished, then gangs wider than a node where the free GPUs reach a search's bound, 1-GPU
jobs, finishes, cancels, node faults and ticks), expect LAS's kept bound on the most-free nodes
(``LasPolicy._out_of_reach``: per node count, ``_most_free`` when found less the GPUs stops had
freed then, one integer, kept while no upheaval) to say "out of reach" only where the pool's
most-free nodes, found afresh, hold fewer than the gang's GPUs less the victim's; and the
running buckets below each queue (``_below``, the victims' order) to be ``_running``'s, lowest
first; LAS so asking to decide as LAS searching in full (issue 34: a contended LAS run asks
the bound about three times per job arrived)."""

from __future__ import annotations

from typing import Any

import pytest
import test_las_search_bounds

from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.queued import QueuedJob


class LasCheckingReach(LasPolicy):
    """LAS whose every "out of reach" is held to ``_most_free`` found afresh, and whose every
    first victim is looked for in ``_running``'s own buckets."""

    settled = 0  # "out of reach" answers, over every instance

    def _out_of_reach(self, gpus: int, freed: int) -> bool:
        out = super()._out_of_reach(gpus, freed)
        if out:
            LasCheckingReach.settled += 1
            need = -(-gpus // self.pool.max_node_gpus)
            assert self.pool._most_free(need) < gpus - freed, (gpus, freed)
        return out

    def _first_lower(self, level: int) -> QueuedJob | None:
        lower = [self._running[n] for n in range(len(self._running) - 1, level, -1)]
        assert len(self._below[level]) == len(lower), level
        assert all(a is b for a, b in zip(self._below[level], lower, strict=True)), level
        return super()._first_lower(level)


def test_a_kept_bound_says_out_of_reach_only_where_the_most_free_nodes_fall_short(
    monkeypatch: Any,
) -> None:
    """``test_las_search_bounds``' workloads with LAS checking each answer of its kept bound
    against the most-free nodes found afresh: it decides as LAS searching in full, and the
    bound settled searches."""
    monkeypatch.setattr(test_las_search_bounds, "LasPolicy", LasCheckingReach)
    settled = LasCheckingReach.settled
    test_las_search_bounds.test_a_las_settling_searches_by_a_bound_decides_and_leaves_the_pool_as_one_searching()
    assert LasCheckingReach.settled > settled


@pytest.mark.sources
def test_a_crowded_cluster_settles_by_the_kept_bound() -> None:
    """``crowded`` (eight 8-GPU nodes, five GPUs free on each, 40 freed by finishes): a
    24-GPU gang's victim holds one GPU; the three most-free nodes hold 15, and 15 + 1 < 24:
    out of reach, the bound kept as 15 less the 40 freed. A 23-GPU gang on the same three
    nodes is out of reach by the kept figure alone (no finish since: at most 15 + 1 < 23);
    a 12-GPU gang needs two nodes, not kept yet: found (10), and 10 + 2 reaches 12."""
    policy, _ = test_las_search_bounds.crowded()
    assert policy._out_of_reach(24, 1)
    assert policy._reach == {3: 15 - 40}
    found = policy.pool._most_free
    asked: list[int] = []

    def most_free(need: int) -> int:
        asked.append(need)
        return found(need)

    policy.pool._most_free = most_free  # type: ignore[assignment]
    assert policy._out_of_reach(23, 1) and not asked  # the kept figure answers
    assert not policy._out_of_reach(12, 2) and asked == [2]
    assert policy._reach == {3: 15 - 40, 2: 10 - 40}
