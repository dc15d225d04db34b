"""Given ``labhive up`` on its embedded defaults and a roster of 2 students who arrive within a
few seconds, expect each to log in with their password, get a server and a kernel, submit a
1-GPU job through ``%submit`` and see it RUNNING; afterwards nothing the class started runs on:
not the hub, its proxy, the service, a notebook server, a kernel or a job
(``benchmarks/bench_classroom.py``, run small)."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from types import ModuleType

import file_modules
import psutil
import pytest
from isolation_util import open_tmp_dir
from test_bench_cleanup import processes_under

from labhive.scheduler.executors.supervise import command as supervise_command

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_classroom.py"


@functools.cache
def bench_classroom() -> ModuleType:
    """The benchmark as a module (registered: its dataclasses look their module up)."""
    return file_modules.load("bench_classroom", BENCH)


def still_running(pid: int, started: float) -> bool:
    """Whether that process (not a later one given its pid) still runs."""
    try:
        proc = psutil.Process(pid)
        return proc.create_time() == started and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="servers and jobs run as the students' uids")
def test_two_students_get_a_kernel_and_a_running_job_and_nothing_is_left() -> None:
    bench = bench_classroom()
    with open_tmp_dir("/var/tmp") as tmp:  # not /tmp: a task's /tmp is its own
        report = bench.run_class(2, arrival_s=4, job_s=3, timeout=150, tmp=tmp)
        assert report["errors"] == {}, report["errors"]
        for student in report["students_detail"]:
            assert student["kernel_ready_at"] is not None, student
            assert student["job_state"] in ("RUNNING", "SUCCEEDED"), student
            assert student["job_started_at"] is not None, student  # the service's own record
        assert report["login_to_kernel_s"]["n"] == 2
        jobs = report["submit_to_running_fit_s"]["n"] + report["submit_to_running_waited_s"]["n"]
        assert jobs == 2
        seen = report["processes_seen"]
        kinds = {"hub", "service", "tasks"}
        assert all(report["cpu_s"][k] > 0 for k in kinds), report["cpu_s"]  # all were sampled
        # the exact count (labhive up's cpuacct group) holds at least what the samples saw
        sampled = sum(report["cpu_s"][k] for k in kinds)
        assert report["cpu_s"]["all_exact"] >= 0.9 * sampled, report["cpu_s"]
        each = report["cpu_per_student_s"]
        assert each["server"] > 0.5 and each["kernel"] > 0.1, each  # told apart by role
        assert [pid for pid, started in seen if still_running(pid, started)] == []
        assert processes_under(tmp) == []


def test_a_job_waited_for_a_gpu_when_the_vcs_gpus_were_taken_at_its_submission() -> None:
    """A VC of 2 GPUs: jobs a and b run from t=0 to 10; c, submitted at 5, found none free;
    d, submitted at 12 after they ended, found one."""
    bench = bench_classroom()

    def job(name: str, submitted: float, started: float, finished: float) -> object:
        student = bench.Student(name)
        student.job_submitted_at, student.job_started_at = submitted, started
        student.job_finished_at = finished
        return student

    a, b = job("a", 0, 0, 10), job("b", 0.1, 0.1, 10)
    c, d = job("c", 5, 10, 15), job("d", 12, 12, 17)
    roll = [a, b, c, d]
    assert [bench.waited_for_gpu(s, roll, 2) for s in roll] == [False, False, True, False]
    assert bench.waited_for_gpu(c, roll, 3) is False


def test_percentiles_of_a_class() -> None:
    stats = bench_classroom()._stats([float(v) for v in range(1, 21)])
    assert stats == {"n": 20, "p50": 10.5, "p95": 19.0, "max": 20.0}
    assert bench_classroom()._stats([])["p95"] is None


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="servers and jobs run as the students' uids")
def test_a_student_who_cannot_get_through_is_a_failure_not_a_hang() -> None:
    """A wrong password is a failed login; a student whose time runs out while their server
    boots has failed, and their server is stopped all the same."""
    bench = bench_classroom()
    with open_tmp_dir("/var/tmp") as tmp:
        with bench.labhive_up(tmp, 2) as room:
            room.passwords["s001"] = "not-s001s-password"
            wrong, late = bench.Student("s001"), bench.Student("s002")
            bench.attend(room, wrong, job_s=1, timeout=60)
            # 0.5 s from the login on: no server boots that fast (its Python imports alone take
            # over a CPU second), so the time runs out while it is asked for or boots, on a slow
            # machine or a fast one (a budget from arrival raced the login on the one and the
            # whole lab on the other: 3 s was enough for the lab once servers booted in ~1.3 s)
            bench.attend(room, late, job_s=1, timeout=60, lab_timeout=0.5)
            assert wrong.error == "login: login refused (403)", wrong
            assert late.logged_in_at is not None, late
            assert late.error is not None and "timed out" in late.error, late
            assert late.job_id is None, late
            assert not [p for p in processes_under(tmp) if "s002" in p], "s002's server still runs"
        assert processes_under(tmp) == []


def test_a_tasks_role_is_read_from_its_command_line() -> None:
    """Given the processes below the service in a class, expect each counted where it belongs:
    the launcher and the server it becomes (and JupyterLab's `yarn config`) as the server."""
    role = bench_classroom().task_role
    venv = "/srv/venv/bin/python"
    assert role([venv, "-I", "-m", "labhive.scheduler.executors.supervise", "/d"]) == "supervisor"
    assert role(supervise_command(Path("/d"))) == "supervisor"  # as the executor starts one
    assert role([venv, "-m", "labhive.hub_extension.launch", "/d/s001.json"]) == "server"
    assert role([venv, "/srv/venv/bin/jupyterhub-singleuser", "--allow-root"]) == "server"
    assert role(["node", "/srv/venv/lib/jupyter_builder/yarn.js", "config"]) == "server"
    assert role(["python", "-m", "ipykernel_launcher", "-f", "/k.json"]) == "kernel"
    assert role(["sleep", "5.0"]) == "job"
