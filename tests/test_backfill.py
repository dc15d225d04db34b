"""EASY backfill with declared limits in the queue policies: given this cluster, these running
jobs and a blocked head, expect a later job to start now only if its limit ends before the
head could start, or it fits beside the head then; without limits, backfill as before."""

from __future__ import annotations

import pytest
from sim_helpers import cluster

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Start, Submit
from labhive.scheduler.policies import get_policy
from labhive.scheduler.policies.backfill import may_jump, shadow


def spec(name: str, gpus: int, limit: float | None = None):
    extra = {} if limit is None else {"time_limit": limit}
    return parse_job({"name": name, "vc": "default", "gpus": gpus, "command": "t", **extra})


def started(
    policy: str, gpus_per_node: list[int], jobs: list[tuple[float, str, int, float | None]]
):
    """Submit (time, name, gpus, limit) in order; the names that started, in order."""
    sched = get_policy(policy, cluster(gpus_per_node), backfill=True)
    out = []
    for t, name, gpus, limit in jobs:
        out += [d.job_id for d in sched.handle(Submit(name, spec(name, gpus, limit), t))
                if isinstance(d, Start)]  # fmt: skip
    return out


@pytest.mark.parametrize("policy", ["fifo", "sjf"])
def test_only_jobs_that_end_before_the_blocked_head_could_start_jump_it(policy):
    """One 4-GPU node: R (3 GPUs) runs to t=100 by its limit; H (4 GPUs) waits for it. At
    t=10 a 1-GPU job that ends by t=60 starts; one that would run to t=210, or one without a
    limit, would delay H: they wait."""
    jobs = [(0, "r", 3, 100), (1, "h", 4, 50), (10, "short", 1, 50), (11, "long", 1, 200),
            (12, "unbounded", 1, None)]  # fmt: skip
    assert started(policy, [4], jobs) == ["r", "short"]


def test_a_job_that_fits_beside_the_head_when_it_starts_may_run_past_it():
    """Two 4-GPU nodes: R1 (4 GPUs, to t=100) and R2 (2 GPUs, no limit) run; H (4 GPUs) waits
    for R1's node. A 2-GPU job without a limit still leaves H its 4 GPUs at t=100: it starts."""
    jobs = [(0, "r1", 4, 100), (0, "r2", 2, None), (1, "h", 4, None), (5, "beside", 2, None)]
    assert started("fifo", [4, 4], jobs) == ["r1", "r2", "beside"]


def test_without_limits_on_the_running_jobs_backfill_is_as_before():
    """Nothing declared says when H starts: the 1-GPU job passes it, limit or not."""
    jobs = [(0, "r", 3, None), (1, "h", 4, None), (10, "small", 1, None)]
    assert started("fifo", [4], jobs) == ["r", "small"]


def test_the_shadow_time_is_when_the_limits_free_enough_gpus():
    running = [(2, 300.0), (1, 100.0), (4, None)]
    assert shadow(3, 1, running) == (300.0, 4)  # 1 free, +1 at t=100, +2 at t=300
    assert shadow(8, 1, running) is None  # only a job without a limit would free enough
    assert shadow(1, 1, running) is None  # free now: not GPUs that block the head
    assert may_jump(0.0, 2, 250.0, 3, 1, running) is True  # ends before t=300
    assert may_jump(0.0, 2, 350.0, 3, 1, running) is False  # 4 free then, 3 for the head
    assert may_jump(0.0, 1, None, 3, 1, running) is True  # the one spare GPU then
    assert may_jump(0.0, 1, None, 2, 1, running) is False  # the head starts at t=100 on 2
