"""Given ``test_las_search_bounds``' crowded workloads (a cluster full of 1-GPU jobs demoted at
100 s, some finished, then gangs wider than a node, 1-GPU jobs, finishes, cancels, node faults
and ticks that demote), expect LAS's test of a kept quiet pass (``_still_quiet``), where a
search's free GPUs reach its bound, to ask only the first victim (``_first_lower``, no walk)
and answer as the walk of ``_lower_than`` to the bound; and a demotion made in one move
(``_demote``), as starts and stops, to leave each queue's bucket holding its running jobs, the
GPUs counted per queue (``_level_gpus``) their sum (issue 34: a contended LAS run demotes,
starts, stops and tests a kept pass about once per job arrived)."""

from __future__ import annotations

from typing import Any

import test_las_search_bounds
from test_las_quiet_passes import LasEveryPass
from test_las_search_bounds import each, full_then_freed, submit
from test_pass_skips import LAS, eight_nodes_of_eight
from test_preempt_probe import pool_state

from labhive.scheduler.core.model import Decision, Event, Tick
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.node_pool import NodePool
from labhive.scheduler.policies.queued import from_config


def walked(policy: LasPolicy, log: list[Any]) -> bool:
    """``_still_quiet``'s test of the kept searches, each walked to its bound (the plain
    computation), on a pool with no start or stop since the pass."""
    free, held = policy.pool.free_gpus, policy._level_gpus
    extra = 2 * policy.pool.max_node_gpus
    for level, gpus, asked in log:
        if asked is False:
            if free + sum(held[level + 1 :]) >= gpus:
                return False
            continue
        freed, met = free, []
        for victim in policy._lower_than(level):
            met.append(victim.job_id)
            freed += victim.gpus
            if freed >= gpus + extra:
                break
        if tuple(met) != asked:
            return False
    return True


class LasCheckingQuiet(LasPolicy):
    """LAS whose quiet passes' tests are held to the walk, and whose running buckets, GPU
    counts and (same-queue order only) queue entries are checked after every event."""

    asked = 0  # tests of a kept pass with no start since, over every instance

    def _still_quiet(self, pool: NodePool, runs: int, stopped: int, log: list[Any]) -> bool:
        quiet = super()._still_quiet(pool, runs, stopped, log)
        if pool is self.pool and runs == self._runs and not self._limited:
            heads_same = quiet or not self._touched  # (else a head, not a search, said no)
            if heads_same:
                LasCheckingQuiet.asked += 1
                assert quiet == walked(self, log), log
        return quiet

    def handle(self, event: Event) -> list[Decision]:
        out = super().handle(event)
        for level, bucket in enumerate(self._running):
            assert all(job.level == level and job.running for job in bucket.values())
            assert self._level_gpus[level] == sum(job.gpus for job in bucket.values())
        running = {job_id for bucket in self._running for job_id in bucket}
        assert running == {job_id for job_id, job in self._jobs.items() if job.running}
        assert set(self._entry) <= set(self._jobs) and set(self._entered_at) <= set(self._jobs)
        assert self.same_queue or not (self._entry or self._entered_at)
        return out


def test_a_kept_pass_asks_the_first_victim_and_demotions_keep_the_queues(
    monkeypatch: Any,
) -> None:
    """``test_las_search_bounds``' workloads with LAS checking each test of a kept quiet pass
    against the walk, and its queues after every event: it decides as LAS searching (and
    passing) in full, and kept passes were tested."""
    monkeypatch.setattr(test_las_search_bounds, "LasPolicy", LasCheckingQuiet)
    asked = LasCheckingQuiet.asked
    test_las_search_bounds.test_a_las_settling_searches_by_a_bound_decides_and_leaves_the_pool_as_one_searching()
    assert LasCheckingQuiet.asked > asked


def test_a_tick_that_demotes_a_mature_job_under_a_kept_pass_runs_the_pass() -> None:
    """Eight 8-GPU nodes full of 1-GPU jobs, demoted at 100 s, five on each node finished at
    110 s; a 1-GPU job starts at 111 s (in the top queue); a 24-GPU gang at 120 s waits, its
    search (one victim, the last demoted) settled, and a tick's pass at 121 s is kept. At
    171 s a tick demotes the 111 s job, mature then, to the end of the lower queue: the first
    victim a search meets is now that job, so the kept pass is not quiet; the pass runs, and
    its search moves that job as LAS running every pass does."""
    policies = [
        from_config(cls, eight_nodes_of_eight(), {}, **{**LAS, "thresholds": (60.0,)})
        for cls in (LasCheckingQuiet, LasEveryPass)
    ]
    checked, every = policies
    full_then_freed(policies)
    assert submit(policies, "late", 111.0, 1)[0][0].job_id == "late"
    assert submit(policies, "wide", 120.0, 1, tasks=24) == [[], []]
    assert each(policies, Tick(121.0)) == [[], []]  # a full pass: kept quiet
    assert checked._quiet is not None
    asked = LasCheckingQuiet.asked
    assert each(policies, Tick(171.0)) == [[], []]
    assert checked._jobs["late"].level == 1 and LasCheckingQuiet.asked == asked + 1
    assert checked._last_walk == ("late",)
    assert pool_state(checked.pool) == pool_state(every.pool)
