"""Given a task launched with ``observe: strace``, expect its system calls in a log next to its
output, listed as an observation, and its own exit code unchanged."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from local_exec_util import launch_one, processes_of, wait_exits

from labhive.scheduler.executors.base import LaunchError
from labhive.scheduler.executors.local import LocalExecutor

pytestmark = pytest.mark.skipif(
    shutil.which("strace") is None, reason="strace is not installed: run bash .ci/deps.sh"
)


def test_an_straced_task_leaves_a_log_of_its_system_calls_and_keeps_its_exit_code(tmp_path):
    ex = LocalExecutor(tmp_path)
    h = launch_one(
        ex, "traced", "cat /etc/hostname > /dev/null; (exit 3); exit 4", observe="strace"
    )
    assert wait_exits(ex, 1)[h.key].exit_code == 4
    (log,) = ex.observations(h)
    assert Path(log) == Path(h.info["workdir"]) / "strace.log"
    text = Path(log).read_text()
    opens = [line for line in text.splitlines() if "openat(AT_FDCWD<" in line]
    assert any('"/etc/hostname"' in line and "</etc/hostname>" in line for line in opens)  # -f, -y
    assert "+++ exited with 4 +++" in text and "+++ exited with 3 +++" in text
    assert ex.read_log(h, "stdout", 0, 100) == b""  # strace writes to its file, not the output


def test_an_unobserved_task_has_no_observations(tmp_path):
    ex = LocalExecutor(tmp_path)
    h = launch_one(ex, "plain", "true")
    wait_exits(ex, 1)
    assert ex.observations(h) == []


def test_stopping_an_straced_task_stops_the_tracer_and_the_traced(tmp_path):
    ex = LocalExecutor(tmp_path)
    h = launch_one(ex, "traced-stop", "trap '' TERM; sleep 60 & wait", observe="strace")
    ex.stop([h], grace_s=0.5)
    assert processes_of("traced-stop") == []


def test_an_unknown_observation_is_refused_with_the_choices(tmp_path):
    ex = LocalExecutor(tmp_path)
    with pytest.raises(LaunchError, match="the choice is 'strace'"):
        launch_one(ex, "perf", "true", observe="perf")


def test_an_openpai_job_asks_for_strace_through_its_extras():
    from labhive.scheduler.core.jobs import parse_job

    doc = {
        "protocolVersion": 2,
        "name": "traced",
        "taskRoles": {"main": {"instances": 1, "commands": ["true"]}},
        "extras": {"observe": "strace"},
    }
    assert parse_job(doc).observe == "strace"
    assert parse_job({**doc, "extras": {}}).observe is None
