"""Given a crowded cluster (eight 8-GPU nodes full of demoted 1-GPU jobs, five GPUs free on
each) and a gang of 24 GPUs waiting, its searches settled by the bound, expect LAS to move the
victim a settled search meets again after any start or stop since the last search (the start
or stop moved nodes in the buckets or jobs in the pool: the victim's are no longer at their
ends), and not after a tick that changed nothing, deciding and leaving the pool as LAS making
every search on paper (``LasPolicy._last_walk``, forgotten where a start, stop or upheaval
happens rather than compared with counts at each search: issue 34, 2.6 searches per job
arrived on the contended replay)."""

from __future__ import annotations

from test_las_search_bounds import crowded, each, submit
from test_preempt_probe import pool_state

from labhive.scheduler.core.model import Finish, Tick


def test_a_start_or_a_stop_between_settled_searches_moves_the_victim_again() -> None:
    """``crowded``; a 24-GPU gang waits (its search settled, the victim moved). A tick's pass
    searches again, meets the same victim and moves nothing. A 1-GPU job then starts (the job
    goes to the pool's end, its node to its bucket's end): the next tick's search moves the
    victim again; so after a 1-GPU job finishes. Each time as LAS searching on paper."""
    bounded, every = policies = crowded()
    assert submit(policies, "wide", 120.0, 1, tasks=24) == [[], []]
    walk = bounded._last_walk
    assert len(walk) == 1
    each(policies, Tick(121.0))
    assert bounded._last_walk == walk
    assert pool_state(bounded.pool) == pool_state(every.pool)
    assert [d.job_id for d in submit(policies, "small", 122.0, 1)[0]] == ["small"]
    assert bounded._last_walk == ()  # forgotten at the start
    each(policies, Tick(123.0))
    assert bounded._last_walk == walk
    assert pool_state(bounded.pool) == pool_state(every.pool)
    each(policies, Finish("small", 124.0))
    assert pool_state(bounded.pool) == pool_state(every.pool)
    each(policies, Tick(125.0))
    assert pool_state(bounded.pool) == pool_state(every.pool)
