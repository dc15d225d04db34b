"""Honest waits: given this cluster, these running jobs and this queue, expect an ETA only
where the forecast has grounds, what a job waits for where it has none, and never "~0 s" for a
job behind a running blocker."""

from __future__ import annotations

from sim_helpers import cluster

from labhive.scheduler.client.eta_words import eta_text, no_estimate_text
from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Start, Submit
from labhive.scheduler.forecast.eta import (
    DurationModel,
    Past,
    RunningJob,
    WaitingJob,
    blocked_text,
    forecast,
    outlook,
)
from labhive.scheduler.forecast.eta_calibration import widen
from labhive.scheduler.policies import get_policy

NOW = 5000.0
#: The command line the hub's spawner submits for a notebook server.
SERVER = "exec /usr/bin/python3 -m labhive.hub_extension.launch /srv/labhive-servers/alice.json"


def spec(name: str, gpus: int, command: str = "python train.py", **kw):
    return parse_job({"name": name, "vc": "default", "gpus": gpus, "command": command, **kw})


def running(config, job_id: str, s, model: DurationModel, user: str, elapsed: float):
    """``s`` running for ``elapsed`` s where a fresh policy places it, as the service sees it."""
    (start,) = [
        d
        for d in get_policy("hived", config).handle(Submit(job_id, s, 0.0))
        if isinstance(d, Start)
    ]
    left, soonest = model.predict(s, user, elapsed), model.soonest(s, user, elapsed)
    return RunningJob(
        job_id, s, start.tasks, left, grounded=model.grounded(s, user), soonest=soonest
    )


def queued(job_id: str, s, model: DurationModel, user: str) -> WaitingJob:
    return WaitingJob(job_id, s, NOW - 1, model.predict(s, user), model.grounded(s, user))


#: Three training runs of 1 GPU ended, 20-40 min: history, but none of a notebook server.
TRAINING = DurationModel.learn(
    Past("ann", "default", 1, "train.py", s) for s in (1200.0, 1800.0, 2400.0)
)


def test_a_queue_behind_a_running_server_says_no_estimate_and_names_what_it_waits_for():
    """One 4-GPU node: alice's 2-GPU notebook server runs (no limit; no server ever ended);
    bob's 4-GPU job waits for the whole node, so only the server stopping starts it. Before,
    the cluster's durations of all jobs made that "~30 min"."""
    config = cluster([4])
    server = spec("alice-server", 2, command=SERVER)
    run = [running(config, "srv", server, TRAINING, "alice", elapsed=600.0)]
    assert TRAINING.predict(server, "alice")[1] == 1800.0  # the old guess: all jobs' median
    wait = [queued("big", spec("big", 4), TRAINING, "bob")]
    make = lambda: get_policy("hived", config)  # noqa: E731

    found = outlook(make, NOW, run, wait)

    assert found.estimates == {}
    assert found.blocked["big"].waits_for == ("srv",)
    words = no_estimate_text(blocked_text([server]))
    assert words == "waits for a notebook server in VC default to stop; no estimate"


def test_a_job_that_fits_beside_the_server_still_gets_its_estimate():
    """The same node with bob's 2-GPU job (20-40 min): it starts now, beside the server; ann's
    1-GPU job behind it starts when bob's ends, on grounds: ~30 min (20-40)."""
    config = cluster([4])
    run = [running(config, "srv", spec("s", 2, command=SERVER), TRAINING, "alice", 600.0)]
    wait = [
        WaitingJob("bob", spec("bob", 2), NOW - 2, (1200.0, 1800.0, 2400.0)),
        queued("ann", spec("ann", 1), TRAINING, "ann"),
    ]
    found = outlook(lambda: get_policy("hived", config), NOW, run, wait)
    assert found.estimates["bob"].eta == NOW
    ann = found.estimates["ann"]
    assert (ann.low, ann.eta, ann.high) == (NOW + 1200, NOW + 1800, NOW + 2400)
    assert found.blocked == {}


def test_a_job_with_no_limit_and_no_history_is_no_ground_either():
    """Nothing has ended yet: the running job's "1 h" is a guess (NO_HISTORY), so the job
    behind it gets no estimate, and the words say why."""
    config = cluster([4])
    empty = DurationModel()
    first = spec("first", 4, command="python new_model.py")
    run = [running(config, "first", first, empty, "ann", elapsed=60.0)]
    found = outlook(
        lambda: get_policy("hived", config), NOW, run, [queued("b", spec("b", 4), empty, "bob")]
    )
    assert found.estimates == {} and found.blocked["b"].waits_for == ("first",)
    assert blocked_text([first]) == (
        "a job in VC default with no time limit and no history of jobs like it to end"
    )
    limited = spec("first", 4, command="python new_model.py", time_limit="30m")
    run = [running(config, "first", limited, empty, "ann", elapsed=60.0)]
    assert "b" in forecast(
        lambda: get_policy("hived", config), NOW, run, [queued("b", spec("b", 4), empty, "bob")]
    )


#: Runs of this 4-GPU job lasted 30 to 45 s.
SHORT = DurationModel.learn(
    Past("ann", "default", 4, "step.py", s) for s in (30.0, 33.0, 36.0, 39.0, 42.0, 45.0)
)


def behind_blocker(elapsed: float):
    config = cluster([4])
    blocker = spec("blocker", 4, command="python step.py")
    run = [running(config, "blocker", blocker, SHORT, "ann", elapsed)]
    wait = [WaitingJob("mine", spec("mine", 4), NOW - 1, (30.0, 36.0, 45.0))]
    return forecast(lambda: get_policy("hived", config), NOW, run, wait)["mine"]


def test_a_job_behind_a_30_to_45_s_blocker_that_ran_10_s_starts_20_s_from_now_at_the_soonest():
    e = behind_blocker(elapsed=10.0)
    assert e.low - NOW >= 20.0 and e.earliest == NOW + 20.0  # its shortest run, 30 s, less 10
    assert eta_text(e.eta, e.low, e.high, NOW) == "starts in ~28 s (22-34)"
    # a range widened by calibration stops at the blocker's soonest end, never "now"
    wide = widen(e, NOW, 3.0, 3.0)
    assert wide.low == e.earliest and wide.high > e.high


def test_a_blocker_past_its_median_still_has_time_left():
    """40 s in, past every run but two: what is left comes from the runs that lasted longer
    (too few: as long again), not zero."""
    e = behind_blocker(elapsed=40.0)
    assert e.low - NOW >= 4.0 and e.eta - NOW == 40.0
    assert not eta_text(e.eta, e.low, e.high, NOW).startswith("starts in ~0")


def test_an_estimate_read_after_its_low_end_passed_says_what_is_left_not_zero():
    """Forecast at NOW: ~28 s (22-34); read 25 s later (the next forecast not yet made), or
    30 s later, when even its middle passed."""
    e = behind_blocker(elapsed=10.0)
    assert eta_text(e.eta, e.low, e.high, NOW + 25) == "starts in ~2 s (up to 8)"
    assert eta_text(e.eta, e.low, e.high, NOW + 30) == "starts within ~4 s"
    assert eta_text(e.eta, e.low, e.high, NOW + 40) == "starts now"


def test_what_the_words_call_a_notebook_server():
    from labhive.scheduler.forecast.eta import is_server

    assert is_server(spec("s", 0, command=SERVER))
    launcher = "exec /usr/bin/python3 /opt/labhive/hub_extension/launch.py /srv/x.json"
    assert is_server(spec("s", 0, command=launcher))
    assert not is_server(spec("j", 0, command="jupyter nbconvert --execute lab.ipynb"))
