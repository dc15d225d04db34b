"""ETAs and suggestions with GPU shares: given one GPU held by quarter shares that end at
known times, expect a waiting quarter to start now, a whole-GPU job to start when the LAST
share ends (never sooner, even at the soonest ends or after calibration widens its range),
and ``--suggest`` to offer a share to a whole-GPU job that a share would start sooner."""

from __future__ import annotations

from sim_helpers import cluster

from labhive.scheduler.client.eta_words import eta_text
from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Start, Submit
from labhive.scheduler.forecast.eta import RunningJob, WaitingJob, forecast
from labhive.scheduler.forecast.eta_calibration import widen
from labhive.scheduler.forecast.suggest import suggest
from labhive.scheduler.policies import get_policy

NOW = 1000.0


def spec(name: str, gpus: float):
    return parse_job({"name": name, "vc": "default", "gpus": gpus, "command": "python t.py"})


def one_gpu_of_quarters():
    """One GPU; three quarter shares run on it with 100, 200 and 300 s left (at their soonest
    50, 150 and 250 s)."""
    config = cluster([1])
    sched = get_policy("hived", config)
    running = []
    for n, left in enumerate((100.0, 200.0, 300.0)):
        s = spec(f"q{n}", 0.25)
        (start,) = [d for d in sched.handle(Submit(f"q{n}", s, 0.0)) if isinstance(d, Start)]
        running.append(RunningJob(f"q{n}", s, start.tasks, (left, left, left), soonest=left - 50))
    return (lambda: get_policy("hived", config)), running


def test_a_quarter_beside_three_quarters_starts_now():
    make, running = one_gpu_of_quarters()
    waiting = [WaitingJob("mine", spec("mine", 0.25), NOW - 1, (60.0, 60.0, 60.0))]
    e = forecast(make, NOW, running, waiting)["mine"]
    assert (e.eta, e.low, e.high, e.earliest) == (NOW, NOW, NOW, NOW)
    assert eta_text(e.eta, e.low, e.high, NOW) == "starts now"


def test_a_whole_gpu_behind_shares_waits_for_the_last_share_even_at_its_soonest():
    make, running = one_gpu_of_quarters()
    waiting = [WaitingJob("whole", spec("whole", 1), NOW - 1, (60.0, 60.0, 60.0))]
    e = forecast(make, NOW, running, waiting)["whole"]
    assert e.eta == e.low == e.high == NOW + 300
    # the soonest it could start is the LAST share's soonest end (250 s), not the first's (50 s)
    assert e.earliest == NOW + 250
    wide = widen(e, NOW, 3.0, 3.0)  # calibration widens the range: never below that end
    assert wide.low == NOW + 250 and wide.high > e.high


def test_a_whole_gpu_job_behind_shares_is_offered_a_share_that_starts_it_now():
    make, running = one_gpu_of_quarters()
    waiting = [WaitingJob("whole", spec("whole", 1), NOW - 1, (60.0, 60.0, 60.0))]
    tips = suggest(make, NOW, running, waiting, "whole", ["default"])
    # a quarter or an eighth fits beside the three quarters now; a half once the first ends
    assert [(t.flags, t.eta) for t in tips] == [
        ("--gpus 0.5", NOW + 100),
        ("--gpus 0.25", NOW),
        ("--gpus 0.125", NOW),
    ]
    assert all("shares its GPU" in t.risk for t in tips)


def test_a_queue_policy_offers_no_share_it_cannot_place():
    config = cluster([1])
    sched = get_policy("fifo", config)
    s = spec("w", 1)
    (start,) = [d for d in sched.handle(Submit("w", s, 0.0)) if isinstance(d, Start)]
    running = [RunningJob("w", s, start.tasks, (600.0, 600.0, 600.0))]
    waiting = [WaitingJob("whole", spec("whole", 1), NOW - 1, (60.0, 60.0, 60.0))]
    make = lambda: get_policy("fifo", config)  # noqa: E731
    assert suggest(make, NOW, running, waiting, "whole", ["default"]) == []
