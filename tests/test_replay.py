"""Given scenario files, expect the replay to reproduce the lab's outcomes in virtual time,
and the CLI to report them (and every mistake in a file) plainly."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import EXAMPLES, HIVED, LAB

from labhive.scheduler.cli import main
from labhive.scheduler.drivers.replay import replay
from labhive.scheduler.drivers.scenario import ScenarioError, load_scenario

SCENARIOS = sorted(EXAMPLES.glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_shipped_scenarios_meet_their_expectations(path):
    scenario = load_scenario(path)
    assert scenario.expects, "every shipped scenario checks its outcome"
    result = replay(scenario)
    assert result.failures == []


def test_the_lab_five_experiments_are_shipped():
    names = {p.stem for p in SCENARIOS}
    assert {
        "lab6-1-vc-safety",
        "lab6-2-priority",
        "lab6-3-opportunistic",
        "lab6-4-gang",
        "lab6-5-incremental",
        "demo",
    } <= names


def write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_retries_failures_and_cancellation(tmp_path):
    path = write(
        tmp_path,
        """\
events:
  - {at: 0, submit: {name: flaky, vc: vc1, gpus: 4, retries: 1, duration: 100}}
  - {at: 0, submit: {name: once, vc: default, gpus: 4, duration: 100}}
  - {at: 0, submit: {name: later, vc: default, gpus: 4, duration: 10}}
  - {at: 10, fail: flaky}
  - {at: 20, fail: once}
  - {at: 25, cancel: later}
  - {at: 30, fail: flaky}
expect:
  - {at: 10, job: flaky, state: RUNNING, reason: "started"}
  - {at: 20, job: once, state: FAILED, reason: failed}
  - {at: 20, job: later, state: RUNNING}
  - {at: 25, job: later, state: STOPPED, reason: cancelled}
  - {at: 30, job: flaky, state: FAILED, reason: "failed (no retries left)"}
""",
    )
    result = replay(load_scenario(path))
    assert result.failures == []
    step = next(s for s in result.steps if s["t"] == 10)
    flaky = next(j for j in step["jobs"] if j["name"] == "flaky")
    assert flaky["state"] == "RUNNING"  # requeued by its retry and started again at once


def test_nodes_going_down_and_reconfiguration(tmp_path):
    (tmp_path / "two.yaml").write_text((LAB / "hived-config-two-vcs.yaml").read_text())
    (tmp_path / "one.yaml").write_text((LAB / "hived-config-one-vc.yaml").read_text())
    path = write(
        tmp_path,
        """\
cluster: two.yaml
events:
  - {at: 0, submit: {name: a, vc: vc1, priority: prod, cpu: 2, memory_mb: 4096, duration: 100}}
  - {at: 5, node_down: hostname-dan, reason: maintenance}
  - {at: 8, node_up: hostname-dan}
  - {at: 10, reconfigure: {cluster: one.yaml}}
  - at: 20
    submit: {name: b, vc: default, priority: prod, cpu: 2, memory_mb: 4096, tasks: 2}
expect:
  - {at: 5, job: a, state: WAITING, reason: "stopped: node hostname-dan went down (maintenance)"}
  - {at: 8, job: a, state: RUNNING, nodes: [hostname-dan]}
  - {at: 10, job: a, state: WAITING, reason: "VC vc1 no longer exists"}
  - {at: 20, job: b, state: RUNNING, nodes: [hostname-carol, hostname-dan]}
""",
    )
    result = replay(load_scenario(path))
    assert result.failures == []


def test_an_expectation_between_events_sees_the_state_of_that_time(tmp_path):
    path = write(
        tmp_path,
        """\
events:
  - {at: 0, submit: {name: a, vc: vc1, gpus: 4, duration: 50}}
  - {at: 100, submit: {name: b, vc: vc1, gpus: 4, duration: 5}}
expect:
  - {at: 49, job: a, state: RUNNING, queue_position: null}
  - {at: 75, job: a, state: SUCCEEDED}
  - {at: 75, job: b, state: RUNNING}
""",
    )
    failures = replay(load_scenario(path)).failures
    assert failures == ["at 75, b: state: RUNNING (line 7): the job was not submitted by then"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("events: []\n", "line 1: events: a non-empty list is required"),
        (
            "cluster: nope.yaml\nevents: [{at: 0, finish: a}]\n",
            "line 1: cluster: no cluster config at",
        ),
        (
            "events:\n  - {at: 0, submit: {name: a}, finish: a}\n",
            "line 2: events[0]: needs exactly one of",
        ),
        (
            "events:\n  - {at: -1, finish: a}\n",
            "line 2: events[0].at: must be a time in seconds >= 0",
        ),
        ("events:\n  - {at: 0, finish: a}\n", "line 2: finish: no job named 'a'"),
        (
            "events:\n  - {at: 0, node_down: n9}\n",
            "line 2: node_down: unknown node 'n9'; nodes: vnode-0, vnode-1",
        ),
        (
            "events:\n  - {at: 0, submit: {name: a}}\n  - {at: 1, submit: {name: a}}\n",
            "line 3: submit: job name a is used twice",
        ),
        ("events:\n  - {at: 0, submit: {name: a, gpu: 1}}\n", "line 2: gpu: unknown key"),
        (
            "events:\n  - {at: 0, submit: {name: a}}\n"
            "expect:\n  - {at: 0, job: a, status: RUNNING}\n",
            "line 4: expect[0].status: unknown key",
        ),
        (
            "events:\n  - {at: 0, submit: {name: a}}\nexpect:\n  - {at: 0, job: b}\n",
            "line 4: expect[0].job: no job named 'b' is submitted",
        ),
        ("events:\n  - {at: 0, submit: {name: a}}\nevent: 1\n", "line 3: event: unknown key"),
    ],
)
def test_bad_scenarios_are_refused_with_the_line(tmp_path, text, message):
    with pytest.raises(ScenarioError) as err:
        load_scenario(write(tmp_path, text))
    assert message in str(err.value)


def test_cli_replay_prints_the_timeline_and_checks_expectations(capsys):
    assert main(["replay", "demo"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cluster: VIRTUAL (GPU slots, no real GPUs)\nt=0  submit train-a")
    assert "all 11 expectations hold" in out


def test_cli_replay_json_document(capsys):
    assert main(["replay", str(EXAMPLES / "lab6-2-priority.yaml"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    step = doc["steps"][1]
    assert step["t"] == 10 and step["event"] == "submit job-config-2"
    vc1 = step["vcs"]["vc1"]
    assert (vc1["guaranteed_gpus"], vc1["used_gpus"], vc1["opportunistic_gpus"]) == (1, 1, 0)
    assert vc1["bound"] == [
        {
            "chain": "GPU-D-NODE-POOL",
            "level": "GPU-D-NODE-POOL.GPU-D-NODE",
            "virtual": "vc1/GPU-D-NODE-POOL.GPU-D-NODE/0",
            "physical": "1/hostname-dan",
            "nodes": ["hostname-dan"],
            "pinned": False,
            "used": 1,
        }
    ]
    assert vc1["free_cells"] == {"GPU-D-NODE-POOL.GPU-D-NODE": 0}
    assert step["vcs"]["default"]["free_cells"] == {"GPU-C-NODE-POOL.GPU-C-NODE": 1}
    assert step["free_list"] == {"GPU-C-NODE-POOL": {"GPU-C-NODE-POOL": 1}, "GPU-D-NODE-POOL": {}}
    assert step["preempted"] == [{"job": "job-config-1", "by": "job-config-2"}]
    assert step["downgraded"] == []
    first, second = step["jobs"]
    assert (first["preemptions"], first["preempted_by"]) == (1, "job-config-2")
    assert first["state"] == "WAITING" and first["reason"].startswith("preempted by job-config-2")
    assert first["queue_position"] == 1
    assert second["tasks"] == [
        {"role": "train", "index": 0, "node": "hostname-dan", "gpus": [0], "state": "RUNNING"}
    ]
    assert doc["failures"] == [] and doc["virtual"] is False


def test_cli_replay_exits_1_naming_the_failed_expectation(tmp_path, capsys):
    path = write(
        tmp_path,
        "events:\n  - {at: 0, submit: {name: a, vc: vc1, gpus: 4}}\n"
        "expect:\n  - {at: 0, job: a, state: WAITING}\n",
    )
    assert main(["replay", str(path)]) == 1
    err = capsys.readouterr().err
    assert "expectation failed: at 0, a: state: WAITING (line 4): state is 'RUNNING'" in err


@pytest.mark.parametrize(
    ("path", "summary"),
    [
        (LAB / "hived-config-two-vcs.yaml", "cluster config OK: 2 nodes, 2 GPUs, VCs default, vc1"),
        (LAB / "job-config-6.yaml", "job OK: job-config-6 in VC default, priority 100, 2 tasks"),
        (EXAMPLES / "demo.yaml", "scenario OK: 5 events, 11 expectations"),
    ],
)
def test_cli_validate_accepts_good_files(path, summary, capsys):
    assert main(["validate", str(path)]) == 0
    assert summary in capsys.readouterr().out


def test_cli_validate_refuses_bad_files_with_exit_2_and_no_traceback(tmp_path):
    bad_job = write(tmp_path, "name: a\npriority: urgent\n", "job.yaml")
    for path, message in [
        (HIVED / "invalid-overcommitted-vcs.yaml", "chain CT1-NODE"),
        (bad_job, "line 2: priority: unknown priority 'urgent'"),
        (tmp_path / "missing.yaml", "cannot read"),
    ]:
        proc = subprocess.run(
            [sys.executable, "-m", "labhive.scheduler.cli", "validate", str(path)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 2
        assert message in proc.stderr and "Traceback" not in proc.stderr


def test_cli_validate_checks_several_files_each_on_its_own(tmp_path, capsys):
    bad_job = write(tmp_path, "name: a\npriority: urgent\n", "job.yaml")
    good = [EXAMPLES / "lab6" / "hived-config-two-vcs.yaml", EXAMPLES / "demo.yaml"]
    assert main(["validate", *map(str, good)]) == 0
    assert capsys.readouterr().out.count(" OK: ") == 2
    assert main(["validate", str(good[0]), str(bad_job), str(good[1])]) == 2
    out, err = capsys.readouterr()
    assert out.count(" OK: ") == 2, "the files after a wrong one are still checked"
    assert "line 2: priority: unknown priority 'urgent'" in err
    assert "1 of 3 files have errors" in err
