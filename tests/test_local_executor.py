"""Given real shell commands launched by the local executor, expect real processes to behave:
gangs start together and see their rendezvous, exit codes come back, stop leaves nothing
behind, logs read from any offset."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from local_exec_util import processes_of, task, wait_exits

from labhive.scheduler.executors.base import LaunchError
from labhive.scheduler.executors.local import LocalExecutor


@pytest.fixture
def ex(tmp_path: Path) -> LocalExecutor:
    return LocalExecutor(tmp_path, grace_s=2.0)


def test_a_gang_of_two_starts_together_sees_its_rendezvous_and_exits_0(ex, tmp_path):
    # Each task waits for the other's marker, so the gang succeeds only if both run at once.
    meet = tmp_path / "meet"
    meet.mkdir()
    cmd = (
        f"touch {meet}/$RANK; for i in $(seq 400); do [ -e {meet}/$(( 1 - RANK )) ] && break;"
        " sleep 0.05; done; [ -e " + f"{meet}" + "/$(( 1 - RANK )) ] || exit 9;"
        " echo $PAI_JOB_NAME $PAI_CURRENT_TASK_ROLE_NAME $PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"
        " $RANK/$WORLD_SIZE $LOCAL_RANK $MASTER_ADDR:$MASTER_PORT gpus=$CUDA_VISIBLE_DEVICES;"
        " echo to-stderr >&2"
    )
    handles = ex.launch([task("gang", cmd, 0), task("gang", cmd, 1)])
    exits = wait_exits(ex, 2)
    assert [exits[h.key].exit_code for h in handles] == [0, 0]
    lines = [ex.read_log(h, "stdout", 0, 4096).decode().split() for h in handles]
    assert [line[:3] for line in lines] == [["gang", "worker", "0"], ["gang", "worker", "1"]]
    assert [line[3:5] for line in lines] == [["0/2", "0"], ["1/2", "1"]]
    addr, port = lines[0][5].split(":")
    assert addr == "127.0.0.1" and 1024 < int(port) < 65536 and lines[1][5] == lines[0][5]
    assert [line[6] for line in lines] == ["gpus=0", "gpus=1"]
    assert ex.read_log(handles[1], "stderr", 0, 100) == b"to-stderr\n"
    workdir = Path(handles[1].info["workdir"])
    assert workdir == tmp_path / "jobs" / "gang" / "0" / "worker-1"
    assert Path(os.getcwd()) != workdir  # the executor did not chdir itself


def test_launch_env_overrides_and_job_env_reach_the_task(ex):
    (h,) = ex.launch([task("envy", "echo $MY_VAR $HOME", env={"MY_VAR": "from-job"})])
    wait_exits(ex, 1)
    assert ex.read_log(h, "stdout", 0, 100).decode().split() == ["from-job", os.environ["HOME"]]


def test_python_in_a_task_is_the_python_labhive_runs_in(ex):
    """Not whatever PATH names first (pyenv's shims under /root: 'not found' for a user's uid)."""
    (h,) = ex.launch([task("py", "command -v python")])
    wait_exits(ex, 1)
    found = ex.read_log(h, "stdout", 0, 500).decode().strip()
    assert found == str(Path(sys.executable).parent / "python")


def test_a_failing_task_reports_its_exit_code_and_a_signalled_one_its_signal(ex):
    ex.launch([task("fail", "echo oops >&2; exit 3"), task("sig", "kill -9 $$")])
    exits = {k.job_id: e for k, e in wait_exits(ex, 2).items()}
    assert (exits["fail"].exit_code, exits["fail"].reason) == (3, "exit code 3")
    assert (exits["sig"].exit_code, exits["sig"].reason) == (137, "killed by SIGKILL")


def test_a_gang_that_cannot_start_whole_starts_not_at_all(ex):
    good = task("half", "sleep 30", 0)
    bad = task("half", "sleep 30", 1, env={"BROKEN": "nul\0byte"})
    with pytest.raises(LaunchError, match="worker-1 could not start"):
        ex.launch([good, bad])
    assert processes_of("half") == []
    assert ex.poll() == []


def test_stop_leaves_nothing_behind_even_children_that_trap_term_and_leave_the_group(ex):
    cmd = (
        "trap '' TERM; (trap '' TERM; sleep 60) & setsid sh -c 'trap \"\" TERM; sleep 60' &"
        " sh -c 'sleep 60 & wait' & echo started; wait"
    )
    (h,) = ex.launch([task("stubborn", cmd)])
    deadline = time.monotonic() + 30
    while len(processes_of("stubborn")) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(processes_of("stubborn")) >= 6  # supervisor, shell, subshells, sleeps
    t0 = time.monotonic()
    ex.stop([h], grace_s=0.5)
    took = time.monotonic() - t0
    assert processes_of("stubborn") == []
    with pytest.raises(ProcessLookupError):
        os.killpg(h.info["pgid"], 0)
    assert took >= 0.5  # the grace period was given; that nothing survived it is shown above
    assert ex.poll() == []  # the service that stopped it knows why; poll does not report it


def test_a_task_that_honours_term_stops_well_within_the_grace_period(ex):
    (h,) = ex.launch([task("polite", "sleep 600")])
    time.sleep(0.3)
    t0 = time.monotonic()
    ex.stop([h], grace_s=120)
    assert time.monotonic() - t0 < 60  # far short of the grace period: TERM was enough
    assert processes_of("polite") == []


def test_when_the_command_ends_what_it_left_running_is_killed(ex):
    (h,) = ex.launch([task("leaver", "setsid sleep 60 & sleep 60 & echo bye")])
    exits = wait_exits(ex, 1)
    assert exits[h.key].exit_code == 0
    assert processes_of("leaver") == []


def test_read_log_returns_the_bytes_between_offset_and_limit(ex):
    (h,) = ex.launch([task("log", "printf 0123456789; printf abc >&2")])
    wait_exits(ex, 1)
    assert ex.read_log(h, "stdout", 0, 4) == b"0123"
    assert ex.read_log(h, "stdout", 4, 100) == b"456789"
    assert ex.read_log(h, "stdout", 10, 100) == b""
    assert ex.read_log(h, "stderr", 1, 1) == b"b"
    with pytest.raises(ValueError, match="stdout or stderr"):
        ex.read_log(h, "both", 0, 1)  # type: ignore[arg-type]


def test_a_relaunch_of_an_unrecorded_attempt_kills_the_orphan_and_keeps_its_files(tmp_path):
    # The service died after launching but before recording it: the next launch of the same
    # attempt must not run beside the orphan (it would hold the same GPUs).
    first = LocalExecutor(tmp_path)
    first.launch([task("twice", "sleep 60")])
    second = LocalExecutor(tmp_path)
    (h,) = second.launch([task("twice", "echo second")])
    assert wait_exits(second, 1)[h.key].exit_code == 0
    assert processes_of("twice") == []
    assert (tmp_path / "jobs" / "twice" / "0" / "worker-0.stale-1" / "launch.json").exists()


def test_a_task_key_that_would_name_a_path_elsewhere_is_refused(ex, tmp_path):
    with pytest.raises(LaunchError, match="cannot name a directory"):
        ex.launch([task("escape", "true", role="../../x")])
    assert not (tmp_path / "x-0").exists()


def test_a_relative_data_dir_works_from_the_tasks_own_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ex = LocalExecutor(Path("data"))
    (h,) = ex.launch([task("rel", "pwd")])
    assert wait_exits(ex, 1)[h.key].exit_code == 0
    out = ex.read_log(h, "stdout", 0, 4096).decode().strip()
    assert out == str(tmp_path / "data" / "jobs" / "rel" / "0" / "worker-0" / "work")


def test_a_task_starts_from_the_allow_list_not_the_services_environment(ex, monkeypatch):
    """The service's credentials and whatever else it was started with stay with it; the
    task keeps PATH (the venv first), the locale and its own variables."""
    for name, value in {
        "LABHIVE_TOKEN": "admin-tok", "JUPYTERHUB_API_TOKEN": "hub-tok",
        "PGPASSWORD": "pg-pass", "SOMETHING_ELSE": "admin-exported", "LANG": "C.UTF-8",
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    (h,) = ex.launch([task("creds", "env -0")])
    wait_exits(ex, 1)
    out = ex.read_log(h, "stdout", 0, 1 << 20).decode()
    seen = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
    gone = {"LABHIVE_TOKEN", "JUPYTERHUB_API_TOKEN", "PGPASSWORD", "SOMETHING_ELSE"}
    assert not gone & set(seen)
    assert seen["LANG"] == "C.UTF-8" and seen["LABHIVE_JOB_ID"] == "creds"
    assert seen["PATH"].split(":")[0] == str(Path(sys.executable).parent)


def test_a_tasks_supervisor_starts_without_site_psutil_or_the_job_model(ex):
    """Given a task, expect its supervisor (the command's parent, one Python process per task: a
    class of 50 starts a server and a job per student on two cores, docs/hub.md) to run
    ``python -I -S`` and to have loaded neither psutil nor ``yaml`` (the job model's import;
    ~0.09 CPU s per task together before): its memory map, read by the command, says which
    libraries it loaded (``_ctypes``, which it uses, shows the map is the supervisor's)."""
    probe = (
        "tr '\\0' ' ' < /proc/$PPID/cmdline; echo; "
        "for lib in _ctypes _psutil_linux '_yaml\\.'; do grep -c \"$lib\" /proc/$PPID/maps; done;"
        " true"
    )
    (h,) = ex.launch([task("light", probe)])
    assert wait_exits(ex, 1)[h.key].exit_code == 0
    cmdline, ctypes_maps, psutil_maps, yaml_maps = (
        ex.read_log(h, "stdout", 0, 4096).decode().splitlines()
    )
    assert cmdline.split()[1:3] == ["-I", "-S"], cmdline
    assert int(ctypes_maps) > 0, "the map shows no _ctypes: the probe reads the wrong process"
    assert int(psutil_maps) == 0, "the supervisor imported psutil"
    assert int(yaml_maps) == 0, "the supervisor imported yaml (the job model)"
