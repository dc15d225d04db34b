"""ETAs: given this cluster, these running jobs and this queue, expect these estimated starts
(exact in virtual time where durations are known), and durations learnt from history."""

from __future__ import annotations

import dataclasses

import pytest
from sim_helpers import cluster

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Start, Submit
from labhive.scheduler.forecast.eta import (
    NO_HISTORY,
    DurationModel,
    Past,
    RunningJob,
    WaitingJob,
    command_name,
    forecast,
)
from labhive.scheduler.policies import get_policy


def spec(name: str, gpus: int, vc: str = "default", command: str = "python train.py", **kw):
    return parse_job({"name": name, "vc": vc, "gpus": gpus, "command": command, **kw})


def placed(config, policy: str, job_id: str, s):
    """Where the live policy would put ``s`` on an empty cluster: the running job's tasks."""
    sched = get_policy(policy, config)
    (start,) = [d for d in sched.handle(Submit(job_id, s, 0.0)) if isinstance(d, Start)]
    return start.tasks


@pytest.mark.parametrize("policy", ["hived", "fifo"])
def test_a_queue_behind_one_running_job_starts_as_each_ends(policy):
    """One 4-GPU node; A (4 GPUs) runs 100 s more; B and C (4 GPUs) wait, 50 s each."""
    config = cluster([4])
    a = spec("a", 4)
    running = [RunningJob("a", a, placed(config, policy, "a", a), (100.0, 100.0, 100.0))]
    waiting = [
        WaitingJob("b", spec("b", 4), 1000.0, (50.0, 50.0, 50.0)),
        WaitingJob("c", spec("c", 4), 1001.0, (50.0, 50.0, 50.0)),
    ]
    out = forecast(lambda: get_policy(policy, config), 1010.0, running, waiting)
    assert (out["b"].eta, out["b"].low, out["b"].high) == (1110.0, 1110.0, 1110.0)
    assert (out["c"].eta, out["c"].low, out["c"].high) == (1160.0, 1160.0, 1160.0)


def test_a_small_job_that_fits_beside_the_running_one_starts_now_and_ranges_follow_quantiles():
    config = cluster([4])
    a = spec("a", 2)
    running = [RunningJob("a", a, placed(config, "fifo", "a", a), (10.0, 60.0, 300.0))]
    waiting = [
        WaitingJob("big", spec("big", 4), 0.0, (50.0, 50.0, 50.0)),
        WaitingJob("small", spec("small", 1), 0.0, (5.0, 5.0, 5.0)),
    ]
    out = forecast(lambda: get_policy("hived", config), 0.0, running, waiting)
    assert (out["big"].low, out["big"].eta, out["big"].high) == (10.0, 60.0, 300.0)
    assert out["small"].eta == 0.0


def test_a_job_that_cannot_start_while_its_node_is_down_gets_no_estimate():
    config = cluster([4])
    waiting = [WaitingJob("x", spec("x", 4), 0.0, (1.0, 1.0, 1.0))]
    make = lambda: get_policy("hived", config)  # noqa: E731
    assert forecast(make, 0.0, [], waiting, down={"n0": "broken"}) == {}
    assert forecast(make, 0.0, [], waiting)["x"].eta == 0.0


def test_durations_come_from_the_users_then_the_vcs_then_the_clusters_history():
    history = [Past("ann", "vc1", 1, "train.py", s) for s in (100, 200, 300)]
    history += [Past("bob", "vc1", 1, "train.py", s) for s in (1000, 1000, 1000, 1000)]
    history += [Past("cy", "vc2", 2, "eval.py", s) for s in (7, 7, 7)]
    model = DurationModel.learn(history)
    job = spec("t", 1, vc="vc1")
    assert model.predict(job, "ann") == (120.0, 200.0, 280.0)
    assert model.predict(job, "dan")[1] == 1000.0  # the VC's: ann's and bob's
    assert model.predict(spec("e", 2, vc="vc9", command="python eval.py"), "x") == (7.0, 7.0, 7.0)
    limited = dataclasses.replace(job, time_limit=150.0)
    # no history of limits: a tenth to all of it, evenly (p10, p50, p90 of 15, 30, ..., 150)
    assert model.predict(limited, "ann") == pytest.approx((28.5, 82.5, 136.5))
    assert DurationModel().predict(job, "ann") == NO_HISTORY


def test_a_declared_limit_is_scaled_by_the_share_of_their_limits_users_ran():
    history = [Past("ann", "vc1", 1, "a", s, limit=100.0) for s in (50, 50, 50, 50)]
    history += [Past("bob", "vc1", 1, "b", s, limit=10.0) for s in (10, 10, 10)]
    model = DurationModel.learn(history)
    job = dataclasses.replace(spec("t", 1, vc="vc1"), time_limit=600.0)
    assert model.predict(job, "ann") == (300.0, 300.0, 300.0)  # ann asks for twice her need
    assert model.predict(job, "bob") == (600.0, 600.0, 600.0)
    assert model.predict(job, "cy")[0] == 300.0  # the VC's habits: 4 halves and 3 wholes


def test_command_names_skip_runners_flags_and_assignments():
    assert command_name(spec("a", 1, command="python -u /x/train.py --lr 1")) == "train.py"
    assert command_name(spec("a", 1, command="CUDA=1 ./run.sh")) == "run.sh"
    assert command_name(spec("a", 1, command="sleep 600")) == "sleep"


def test_a_run_in_progress_is_predicted_from_the_runs_that_lasted_longer():
    model = DurationModel.learn(Past("ann", "vc1", 1, "train.py", s) for s in (10, 100, 200, 300))
    job = spec("t", 1, vc="vc1")
    assert model.predict(job, "ann", elapsed=50.0) == (70.0, 150.0, 230.0)
    assert model.predict(job, "ann", elapsed=400.0) == (40.0, 400.0, 1200.0)  # outlived all
    limited = dataclasses.replace(job, time_limit=1000.0)
    # no history of limits, 600 s in: the shares past 0.6 are left, 100-400 s
    assert model.predict(limited, "ann", elapsed=600.0) == pytest.approx((130.0, 250.0, 370.0))


def test_eta_text_says_when_in_the_estimates_unit():
    from labhive.scheduler.client.eta_words import eta_text

    assert eta_text(1500, 600, 3000, 0) == "starts in ~25 min (10-50)"
    assert eta_text(130, 130, 130, 100) == "starts in ~30 s"
    assert eta_text(3 * 3600, 2 * 3600, 5 * 3600, 0) == "starts in ~3 h (2-5)"
    assert eta_text(10, 10, 10, 20) == "starts now"


def test_replaying_a_trace_scores_the_etas_given_at_submit():
    """Eight 4-GPU jobs of 100 s on one 4-GPU node, each declaring its 100 s: j1-j3 arrive
    before anything ended, when a limit says only "up to 100 s" (a tenth to all of it); j4-j7
    arrive at 350-353, after three runs used all of their limits, and are estimated exactly."""
    from sim_helpers import job

    from labhive.scheduler.forecast.eta import Estimate
    from labhive.scheduler.forecast.eta_replay import replay_etas

    submits = [0.0, 1.0, 2.0, 3.0, 350.0, 351.0, 352.0, 353.0]
    jobs = [job(f"j{k}", t, 4, 100.0) for k, t in enumerate(submits)]
    for j in jobs:
        j.spec = dataclasses.replace(j.spec, time_limit=100.0)
    score, pairs = replay_etas("fifo", cluster([4]), jobs)
    assert pairs["j1"] == (Estimate(55.0, 19.0, 91.0), 100.0)  # j0, 1 s in: 9-99 s left
    for k in range(4, 8):
        assert pairs[f"j{k}"] == (Estimate(100.0 * k, 100.0 * k, 100.0 * k), 100.0 * k)
    assert (score.jobs, score.median_abs_error_s, score.coverage) == (7, 0.0, 4 / 7)


def test_without_limits_the_history_learnt_so_far_gives_the_estimate():
    """The same jobs, no limits: j1-j3 arrive before anything ended, when j0's duration has
    no grounds (no limit, no history): no estimate, they wait for j0 (before, the no-history
    guess, 1 h (10 min-4 h), was shown as a forecast); j4-j7 arrive at 350-353, after three
    100 s runs ended, and are estimated exactly."""
    from sim_helpers import job

    from labhive.scheduler.forecast.eta import Estimate
    from labhive.scheduler.forecast.eta_replay import replay_etas

    submits = [0.0, 1.0, 2.0, 3.0, 350.0, 351.0, 352.0, 353.0]
    jobs = [job(f"j{k}", t, 4, 100.0) for k, t in enumerate(submits)]
    score, pairs = replay_etas("fifo", cluster([4]), jobs)
    assert (score.jobs, score.blocked) == (4, 3)
    assert "j1" not in pairs
    for k in range(4, 8):
        assert pairs[f"j{k}"] == (Estimate(100.0 * k, 100.0 * k, 100.0 * k), 100.0 * k)
