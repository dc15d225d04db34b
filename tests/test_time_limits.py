"""Time limits: given a job that declares one, expect the service to stop its real processes at
the limit (with the grace period) and the job to end FAILED, "time limit of 2 s reached"; a job
that ends in time succeeds. And the forms users write limits in."""

from __future__ import annotations

from pathlib import Path

import pytest
from local_exec_util import processes_under
from waiting import wait_until

from labhive.scheduler.core.jobs import SpecError, parse_job
from labhive.scheduler.core.time_limits import limit_reached, parse_time_limit, show_duration

pytest_plugins = ["service_fixtures"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [(90, 90.0), (2.5, 2.5), ("45", 45.0), ("90s", 90.0), ("30m", 1800.0), ("2h", 7200.0),
     ("1h30m", 5400.0), ("1h 30m", 5400.0), ("10min", 600.0), ("1d", 86400.0)],
)  # fmt: skip
def test_time_limits_are_seconds_or_durations(text, seconds):
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize("bad", ["", "soon", "2x", "-5", 0, -1, True, "5 30", [1], "400d"])
def test_a_bad_time_limit_says_which_forms_work(bad):
    with pytest.raises(ValueError, match=r"30m|at most"):
        parse_time_limit(bad)


def test_the_reason_reads_naturally():
    assert limit_reached(7200) == "time limit of 2 h reached"
    assert limit_reached(2) == "time limit of 2 s reached"
    assert show_duration(5400) == "1 h 30 min"
    assert show_duration(1800) == "30 min"


def test_the_short_form_and_openpai_declare_a_limit():
    short = parse_job({"name": "a", "command": "true", "time_limit": "2h"})
    assert short.time_limit == 7200.0
    openpai = parse_job(
        {
            "protocolVersion": 2,
            "name": "b",
            "taskRoles": {"main": {"commands": ["true"]}},
            "extras": {"labhive": {"timeLimit": "30m"}},
        }
    )
    assert openpai.time_limit == 1800.0
    assert parse_job({"name": "c", "command": "true"}).time_limit is None


def test_a_bad_limit_in_a_spec_names_the_key():
    with pytest.raises(SpecError, match=r"time_limit: must be seconds or a duration"):
        parse_job({"name": "a", "command": "true", "time_limit": "later"})
    with pytest.raises(SpecError, match=r"extras.labhive.timeLimit"):
        parse_job(
            {
                "protocolVersion": 2,
                "name": "b",
                "taskRoles": {"main": {"commands": ["true"]}},
                "extras": {"labhive": {"timeLimit": "x"}},
            }
        )


@pytest.fixture
def service(tmp_path: Path):
    from service_fixtures import live_service

    with live_service(tmp_path / "data", grace_s=1.0) as live:
        yield live


def test_a_job_past_its_limit_is_stopped_and_fails_with_the_reason(service):
    c = service.client()
    job = c.submit(command="sleep 600", vc="vc1", gpus=1, name="long", time_limit=2)
    done = job.wait(60, 0.1)
    assert done.state == "FAILED"
    assert done.reason == "time limit of 2 s reached"
    assert processes_under(service.data_dir / "jobs" / str(job.id)) == []
    assert done.retries_used == 0
    moves = [(e["from_state"], e["to_state"], e["reason"]) for e in job.events()]
    assert ("RUNNING", "RUNNING", "stopping") in moves


def test_a_job_that_ends_in_time_succeeds(service):
    c = service.client()
    job = c.submit(command="sleep 0.2; echo done", vc="vc1", gpus=1, time_limit="1m")
    assert job.wait(60, 0.1).state == "SUCCEEDED"


def test_a_waiting_job_starts_its_clock_only_when_it_runs(service):
    c = service.client()
    first = c.submit(command="sleep 3", vc="vc1", gpus=4, name="first")
    second = c.submit(command="sleep 0.5", vc="vc1", gpus=4, name="second", time_limit=2)
    wait_until(lambda: first.refresh().state == "RUNNING", what="the first job to run")
    assert first.wait(60, 0.1).state == "SUCCEEDED"
    assert second.wait(60, 0.1).state == "SUCCEEDED"


def test_labhive_submit_time_sets_the_limit(service, capsys):
    from labhive.scheduler.cli import main

    argv = ["submit", "--url", service.url, "--token", service.admin, "--vc", "vc1",
            "--time", "2s", "--wait", "--", "sleep 600"]  # fmt: skip
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 1
    assert "FAILED" in out and "time limit of 2 s reached" in out


def test_labhive_submit_with_a_bad_time_says_how_to_write_one(service, capsys):
    from labhive.scheduler.cli import main

    argv = ["submit", "--url", service.url, "--token", service.admin, "--time", "soon",
            "--", "true"]  # fmt: skip
    assert main(argv) == 2
    assert '"30m"' in capsys.readouterr().err


def test_percent_submit_time_goes_into_the_short_form():
    from IPython.core.magic_arguments import parse_argstring

    from labhive.kernel_ext.magics import LabHiveMagics

    args = parse_argstring(LabHiveMagics.submit, "--gpus 1 --time 30m -- sleep 600")
    assert LabHiveMagics._short_form(args)["time_limit"] == "30m"
    assert parse_job({"name": "n", "command": "x", **LabHiveMagics._short_form(args)}).time_limit


def test_the_simulator_cuts_a_run_at_its_limit_and_the_queue_moves_up():
    """Given one 4-GPU node, a job of 100 s with a 30 s limit and a job queued behind it,
    expect the first to fail at 30 and the second to start then."""
    import dataclasses

    from sim_helpers import cluster, job, simulate

    long, after = job("long", 0, 4, 100), job("after", 1, 4, 10)
    long.spec = dataclasses.replace(long.spec, time_limit=30.0)
    out = simulate("fifo", cluster([4]), [long, after])
    assert (out["long"].state, out["long"].end) == ("FAILED", 30.0)
    assert (out["after"].first_start, out["after"].state) == (30.0, "SUCCEEDED")


def vc_with(limit: dict[str, object]):
    from labhive.scheduler.core.config import load_cluster_config
    from labhive.scheduler.sim.machines import Machine, cluster_dict

    raw = cluster_dict([Machine("n0", 4)])
    raw["virtualClusters"]["default"]["timeLimit"] = limit
    return load_cluster_config(raw).vcs["default"]


def test_a_vc_gives_a_default_limit_and_caps_what_jobs_ask_for():
    from labhive.scheduler.core.jobs import with_vc_limits

    vc = vc_with({"default": "2s", "max": "1h"})
    assert (vc.time_limit_default, vc.time_limit_max) == (2.0, 3600.0)
    plain = parse_job({"name": "a", "command": "sleep 600"})
    assert with_vc_limits(plain, vc, strict=True).time_limit == 2.0
    asks = parse_job({"name": "a", "command": "sleep 600", "time_limit": "30m"})
    assert with_vc_limits(asks, vc, strict=True).time_limit == 1800.0
    greedy = parse_job({"name": "a", "command": "sleep 600", "time_limit": "2h"})
    with pytest.raises(ValueError, match=r"2 h is over the 1 h maximum of VC default; ask for"):
        with_vc_limits(greedy, vc, strict=True)
    assert with_vc_limits(greedy, vc, strict=False).time_limit == 3600.0  # stored before
    only_max = vc_with({"max": "1h"})
    assert with_vc_limits(plain, only_max, strict=True).time_limit == 3600.0


@pytest.mark.parametrize(
    ("limit", "message"),
    [("2h", "must be a mapping"), ({"dflt": "1h"}, "dflt"), ({"max": "soon"}, "max"),
     ({"default": "2h", "max": "1h"}, "default must not be longer than max")],
)  # fmt: skip
def test_a_bad_vc_time_limit_names_the_key(limit, message):
    from labhive.scheduler.core.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        vc_with(limit)
