"""Given an executor in another process that launched tasks and was killed -9, expect a fresh
executor to re-adopt the running tasks (and see them finish with their real exit codes), settle
the ones that ended meanwhile from their exit records, and report the lost ones as unknown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import pytest
from local_exec_util import processes_of, wait_exits
from waiting import wait_until

from labhive.scheduler.executors.base import TaskHandle, TaskKey
from labhive.scheduler.executors.local import LocalExecutor
from labhive.scheduler.executors.local_procs import _start_ticks

SERVICE = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from labhive.scheduler.executors.base import TaskKey, TaskLaunch
    from labhive.scheduler.executors.local import LocalExecutor

    data = Path(sys.argv[1])
    ex = LocalExecutor(data)
    commands = json.loads(sys.argv[2])
    handles = []
    for job, cmd in commands.items():
        launch = TaskLaunch(TaskKey(job, 0, "main", 0), job, cmd, "node0", ())
        handles += ex.launch([launch])
    rows = [{"job": h.key.job_id, "info": h.info} for h in handles]
    (data / "handles.tmp").write_text(json.dumps(rows))
    (data / "handles.tmp").rename(data / "handles.json")
    time.sleep(600)
    """
)


def no_processes_of(job_id: str) -> bool:
    return processes_of(job_id) == []


@pytest.fixture
def crashed_service(tmp_path: Path):
    """Run an executor in a child process, let it launch, then kill -9 it; yield its handles."""

    def run(commands: dict[str, str], settle: list[str]) -> dict[str, TaskHandle]:
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVICE, str(tmp_path), json.dumps(commands)]
        )
        try:
            wait_until(lambda: (tmp_path / "handles.json").exists(), "the launches")
            handles = {
                row["job"]: TaskHandle(TaskKey(row["job"], 0, "main", 0), row["info"])
                for row in json.loads((tmp_path / "handles.json").read_text())
            }
            for job in settle:
                wait_until(Path(handles[job].info["exit_file"]).exists, f"{job}'s end")
                wait_until(partial(no_processes_of, job), f"{job}'s supervisor to leave")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        launched.extend(commands)
        return handles

    launched: list[str] = []
    yield run
    for job in launched:  # a failed test must not leave its tasks running
        for leftover in processes_of(job):
            leftover.kill()


def test_after_a_kill_9_running_tasks_are_readopted_and_ended_ones_settled(
    crashed_service, tmp_path
):
    go = tmp_path / "go"
    handles = crashed_service(
        {
            "runs": f"while [ ! -e {go} ]; do sleep 0.05; done; echo finished; exit 7",
            "ended": "echo early; exit 5",
            "lost": "sleep 60",
        },
        settle=["ended"],
    )
    # Something takes "lost" down with its supervisor, so nothing records how it ended.
    os.killpg(handles["lost"].info["pgid"], signal.SIGKILL)
    wait_until(lambda: processes_of("lost") == [], "the lost task to die")

    ex = LocalExecutor(tmp_path)
    settled = {e.key.job_id: e for e in ex.adopt(list(handles.values()))}
    assert settled["ended"].exit_code == 5
    assert settled["lost"].exit_code is None and "without recording" in settled["lost"].reason
    assert "runs" not in settled
    # Still running: its supervisor and, once that has forked (slow on a loaded machine), the
    # command. Wait rather than assume the fork already happened.
    wait_until(lambda: len(processes_of("runs")) >= 2, "runs's supervisor and command")

    go.touch()
    (exit,) = wait_exits(ex, 1).values()
    assert (exit.key.job_id, exit.exit_code) == ("runs", 7)
    assert ex.read_log(handles["runs"], "stdout", 0, 100) == b"finished\n"
    assert processes_of("runs") == []


def test_an_adopted_task_can_be_stopped_with_everything_it_forked(crashed_service, tmp_path):
    handles = crashed_service({"stubborn": "trap '' TERM; setsid sleep 60 & sleep 60 & wait"}, [])
    wait_until(lambda: len(processes_of("stubborn")) >= 4, "the stubborn task's processes")
    ex = LocalExecutor(tmp_path)
    assert ex.adopt([handles["stubborn"]]) == []
    ex.stop([handles["stubborn"]], grace_s=0.3)
    assert processes_of("stubborn") == []
    assert ex.poll() == []


def _handle_for(proc: subprocess.Popen, tmp_path: Path, **recorded: Any) -> TaskHandle:
    """A handle as a service would have stored it, for a process of the test's own."""
    workdir = tmp_path / "jobs" / "gone" / "0" / "main-0"
    info = {
        "pid": proc.pid,
        "pgid": proc.pid,
        "create_time": psutil.Process(proc.pid).create_time(),
        "workdir": str(workdir),
        "stdout": str(workdir / "stdout"),
        "stderr": str(workdir / "stderr"),
        "exit_file": str(workdir / "exit.json"),
        "limits": {},
    }
    return TaskHandle(TaskKey("gone", 0, "main", 0), {**info, **recorded})


@pytest.mark.parametrize(
    "recorded",
    [
        {"create_time_shift": -3600},  # a handle from before start ticks were recorded
        {"start_ticks_shift": -100},
    ],
)
def test_a_pid_now_used_by_another_process_is_not_the_task_and_is_left_alone(tmp_path, recorded):
    stranger = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        handle = _handle_for(stranger, tmp_path)
        if "create_time_shift" in recorded:
            handle.info["create_time"] += recorded["create_time_shift"]
        else:
            handle.info["start_ticks"] = _start_ticks(stranger.pid) + recorded["start_ticks_shift"]
        (exit,) = LocalExecutor(tmp_path).adopt([handle])
        assert exit.exit_code is None
        assert stranger.poll() is None  # not signalled: it only happens to have the old pid
    finally:
        stranger.kill()
        stranger.wait()


def test_a_stepped_system_clock_does_not_make_a_running_task_look_gone(tmp_path):
    """psutil's create time follows the wall clock; the start in ticks since boot does not."""
    task = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        handle = _handle_for(task, tmp_path, start_ticks=_start_ticks(task.pid))
        handle.info["create_time"] -= 2.0  # as read before an NTP step of two seconds
        ex = LocalExecutor(tmp_path)
        assert ex.adopt([handle]) == []  # still running: adopted, not settled
        ex.stop([handle], grace_s=1)
        assert task.wait(30) is not None
    finally:
        task.kill()
        task.wait()


def test_a_task_known_only_by_its_key_is_found_from_its_directory(crashed_service, tmp_path):
    # The service died after launching but before storing the handle: it adopts by key alone.
    go = tmp_path / "go"
    crashed_service({"unrecorded": f"while [ ! -e {go} ]; do sleep 0.05; done; exit 3"}, [])
    ex = LocalExecutor(tmp_path)
    key = TaskKey("unrecorded", 0, "main", 0)
    never = TaskKey("never", 0, "main", 0)
    (settled,) = ex.adopt([TaskHandle(key, {}), TaskHandle(never, {})])
    assert (settled.key, settled.exit_code) == (never, None)
    go.touch()
    assert wait_exits(ex, 1)[key].exit_code == 3
    assert ex.read_log(TaskHandle(key, {}), "stderr", 0, 10) == b""
