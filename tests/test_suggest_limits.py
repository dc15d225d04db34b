"""A shorter time limit as a suggestion: given a queue policy with EASY backfill, a job stuck
behind a blocked head starts now if it declares a limit that ends before the head could start;
the suggestion says so, and the suggested job, submitted, does start."""

from __future__ import annotations

import dataclasses

from sim_helpers import cluster

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Adopt, Cancel, Start, Submit
from labhive.scheduler.forecast.eta import RunningJob, WaitingJob
from labhive.scheduler.forecast.suggest import shorter_limits, suggest
from labhive.scheduler.policies import get_policy

NOW = 1000.0


def spec(name: str, gpus: int, **kw):
    return parse_job({"name": name, "vc": "default", "gpus": gpus, "command": "x", **kw})


def scene(policy: str):
    """One 4-GPU node. A (2 GPUs, limit 50 min) runs; B (4 GPUs) heads the line, blocked until
    A ends; C (2 GPUs, no limit, ~20 min) waits behind B although 2 GPUs are idle."""
    config = cluster([4])
    a = spec("a", 2, time_limit=3000)
    (start,) = [
        d for d in get_policy(policy, config).handle(Submit("a", a, 0.0)) if isinstance(d, Start)
    ]
    running = [RunningJob("a", a, start.tasks, (2000.0, 2500.0, 3000.0))]
    waiting = [
        WaitingJob("b", spec("b", 4), NOW - 20, (600.0, 600.0, 600.0)),
        WaitingJob("c", spec("c", 2), NOW - 10, (1200.0, 1200.0, 1200.0)),
    ]
    return config, running, waiting


def test_with_backfill_a_short_enough_limit_starts_the_job_now():
    config, running, waiting = scene("fifo")
    make = lambda: get_policy("fifo", config, backfill=True)  # noqa: E731
    found = [s for s in suggest(make, NOW, running, waiting, "c", []) if "--time" in s.flags]
    assert [(s.change, s.flags, s.soon) for s in found] == [
        ("declare a time limit of 30 min", "--time 30m", True)
    ]
    assert found[0].eta == NOW and "stopped when it reaches the limit" in found[0].risk


def test_the_suggested_variant_does_start_when_submitted():
    config, running, waiting = scene("fifo")
    sched = get_policy("fifo", config, backfill=True)
    (a,) = running
    sched.handle(Adopt("a", a.spec, a.tasks, False, NOW))
    sched.handle(Submit("b", waiting[0].spec, NOW))
    plain = sched.handle(Submit("c", waiting[1].spec, NOW))
    assert not [d for d in plain if isinstance(d, Start)]  # without a limit it waits
    sched.handle(Cancel("c", NOW))
    sched.handle(Submit("c30", dataclasses.replace(waiting[1].spec, time_limit=1800.0), NOW))
    assert "c30" in {v.job_id for v in sched.jobs() if v.state == "RUNNING"}


def test_without_backfill_no_limit_is_offered():
    config, running, waiting = scene("fifo")
    make = lambda: get_policy("fifo", config, backfill=False)  # noqa: E731
    out = suggest(make, NOW, running, waiting, "c", [])
    assert not [s for s in out if "--time" in s.flags]


def test_limits_tried_are_shorter_than_the_one_declared():
    tried = [flags for _, flags, _, _ in shorter_limits(spec("d", 1, time_limit=3600))]
    assert tried == ["--time 30m", "--time 10m"]
    assert next(f for _, f, _, _ in shorter_limits(spec("e", 1))) == "--time 2h"
