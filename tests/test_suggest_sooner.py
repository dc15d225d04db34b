"""A suggestion is a promise to start the job sooner: given this cluster and this queue, expect
only the changes that start the job sooner than it starts unchanged (by a margin), and none
when nothing does."""

from __future__ import annotations

from sim_helpers import cluster

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Start, Submit
from labhive.scheduler.forecast.eta import Estimate, RunningJob, WaitingJob, forecast
from labhive.scheduler.forecast.suggest import sooner, suggest
from labhive.scheduler.policies import get_policy

NOW = 1000.0


def spec(name: str, gpus: int, vc: str = "vc1"):
    return parse_job({"name": name, "vc": vc, "gpus": gpus, "command": "python train.py"})


def scene():
    """Two 4-GPU nodes, VCs vc1 and vc2 a node each. In vc1 a 4-GPU job runs 10 more min;
    a 2-GPU job waits there. In vc2 a 4-GPU job runs 20 more min (vc2 is full too)."""
    config = cluster([4, 4], {"vc1": 1, "vc2": 1})
    sched = get_policy("hived", config)
    out = []
    for job_id, vc, left in (("hog1", "vc1", 600.0), ("hog2", "vc2", 1200.0)):
        s = spec(job_id, 4, vc)
        (start,) = [d for d in sched.handle(Submit(job_id, s, 0.0)) if isinstance(d, Start)]
        out.append(RunningJob(job_id, s, start.tasks, (left, left, left)))
    waiting = [WaitingJob("mine", spec("mine", 2), NOW - 5, (300.0, 300.0, 300.0))]
    return (lambda: get_policy("hived", config)), out, waiting


def test_fewer_gpus_or_another_full_vc_that_start_it_no_sooner_are_not_offered():
    """Unchanged, the job starts when hog1 ends (10 min). 1 GPU instead of 2 waits for the
    same end; vc2 frees later (20 min). Only running it opportunistically is no sooner either:
    every GPU is taken. Nothing is offered."""
    make, running, waiting = scene()
    assert forecast(make, NOW, running, waiting)["mine"].eta == NOW + 600
    tips = suggest(make, NOW, running, waiting, "mine", ["vc1", "vc2"])
    assert [t.flags for t in tips] == []


def test_a_change_that_starts_it_sooner_is_offered_and_one_that_does_not_is_left_out():
    """The same, with hog2 ending in 1 min: moving to vc2, or running opportunistically on
    its freed GPUs, starts the job 9 min sooner and is offered; halving its GPUs still waits
    for hog1 and is not."""
    make, running, waiting = scene()
    running[1] = RunningJob("hog2", running[1].spec, running[1].tasks, (60.0, 60.0, 60.0))
    tips = suggest(make, NOW, running, waiting, "mine", ["vc1", "vc2"])
    assert [(t.flags, t.eta, t.soon) for t in tips] == [
        ("--vc vc2", NOW + 60, True),
        ("--priority oppo", NOW + 60, True),
    ]


def test_sooner_means_by_a_minute_or_a_tenth_of_the_wait():
    own = Estimate(NOW + 3600, NOW + 3000, NOW + 4000)
    assert not sooner(Estimate(NOW + 3600, NOW, NOW + 4000), own, NOW)  # the same start
    assert not sooner(Estimate(NOW + 3300, NOW, NOW + 4000), own, NOW)  # 5 min of 60: < 10%
    assert sooner(Estimate(NOW + 3240, NOW, NOW + 4000), own, NOW)  # 6 min: 10%
    short = Estimate(NOW + 100, NOW + 100, NOW + 100)
    assert not sooner(Estimate(NOW + 50, NOW, NOW), short, NOW)  # under a minute sooner
    assert sooner(Estimate(NOW + 40, NOW, NOW), short, NOW)
    assert sooner(Estimate(NOW + 40, NOW, NOW), None, NOW)  # no estimate of its own


def test_the_cli_says_when_nothing_starts_it_sooner_and_else_the_soonest_change(capsys):
    from labhive.scheduler.cli.client_commands import _print_suggestions

    _print_suggestions([])
    assert capsys.readouterr().out == (
        "to start it sooner: nothing LabHive can change starts it sooner\n"
    )
    late = {"change": "submit to VC vc2", "flags": "--vc vc2", "risk": "", "soon": False}
    import time

    now = time.time()
    _print_suggestions([
        {**late, "eta": now + 3600, "eta_low": now + 3600, "eta_high": now + 3600},
        {**late, "change": "run 1 task", "flags": "--tasks 1", "eta": now + 1800,
         "eta_low": now + 1800, "eta_high": now + 1800},
    ])  # fmt: skip
    out = capsys.readouterr().out
    assert out.startswith("to start it sooner: run 1 task (--tasks 1), starts in ~30 min"), out
