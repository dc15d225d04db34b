"""Given the service benchmark's service (``benchmarks/bench_service.py``) with a full cluster
and jobs waiting, expect nothing of it running once the benchmark is done with it: no service,
no job supervisor, no task. It used to leave its ``sleep 3600`` tasks behind (as the tasks' uid)
after every run, their work directories already deleted."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import ModuleType

import file_modules
import psutil
import pytest
from waiting import wait_until

from labhive.scheduler.client import Client

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_service.py"


def bench_service() -> ModuleType:
    return file_modules.load("bench_service", BENCH)


def processes_under(tmp: Path) -> list[str]:
    """What still runs with its working directory or a command-line argument under ``tmp``."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "cwd"]):
        cwd, cmdline = p.info.get("cwd") or "", p.info.get("cmdline") or []
        if cwd.startswith(str(tmp)) or any(str(tmp) in a for a in cmdline):
            out.append(f"{p.pid} {' '.join(cmdline)}")
    return out


def test_the_service_benchmark_leaves_no_job_running(tmp_path: Path) -> None:
    bench = bench_service()
    with bench.service(tmp_path, None) as (port, token, pid):
        client = Client(f"http://127.0.0.1:{port}/api/v1", token)
        for _ in range(6):  # VC default's 4 GPUs run 4; 2 wait, to start when one ends
            client.submit(name="bench", vc="default", gpus=1, command="sleep 3600")
        wait_until(  # each running job: its supervisor and its sleep
            lambda: len(client.jobs(state="RUNNING")) == 4 and len(processes_under(tmp_path)) >= 8,
            "4 jobs running",
            60,
            0.2,
        )
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert processes_under(tmp_path) == []


def test_a_leftover_fails_the_run_and_is_killed(tmp_path: Path) -> None:
    bench = bench_service()
    stray = subprocess.Popen(["sleep", "3600"], cwd=tmp_path)
    try:
        with pytest.raises(RuntimeError, match=r"left 1 processes running \(killed\)"):
            bench._no_leftovers(tmp_path, None)
        stray.wait(timeout=10)  # reaped (by psutil, its status lost to Popen): it ended
        assert processes_under(tmp_path) == []
    finally:
        if stray.poll() is None:
            stray.kill()
