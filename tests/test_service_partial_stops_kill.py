"""Given the real service as a subprocess with ``--stops tasks``, an incremental job whose
tasks ignore SIGTERM and a prod job that preempts one of them, kill -9 the service twice: while
the task is being stopped (inside its grace period) and while the preemptor runs. Expect no GPU
ever held twice, the surviving tasks adopted (same processes), exactly one task stopped and run
again as its next generation, and both jobs succeeding."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from service_process import spawn_service
from sqlalchemy import select
from waiting import wait_until

from labhive.scheduler.executors.env import free_port
from labhive.scheduler.service.store import Store, allocations, database_url, tasks

GRACE_S = 3.0
#: Ignores SIGTERM once it said "ready", so only the SIGKILL after the grace period ends it;
#: about 20 s: long enough to outlive two restarts.
STUBBORN = "trap '' TERM; echo ready; for i in $(seq 100); do sleep 0.2; done"


class Service:
    """``labhive serve`` in its own session; ``kill()`` is a kill -9, tasks left running."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()
        token = (data / "admin.token").read_text().strip()
        self.http = httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}/api/v1",
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        self.store = Store(database_url(None, data))

    def start(self) -> None:
        self.proc = spawn_service(self.data, self.port, GRACE_S, "--stops", "tasks")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def submit(self, doc: dict[str, Any]) -> int:
        r = self.http.post("/jobs", json=doc)
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def state(self, job_id: int) -> str:
        return str(self.http.get(f"/jobs/{job_id}").json()["state"])

    def tasks(self, job_id: int) -> list[dict[str, Any]]:
        with self.store.read() as conn:
            query = select(tasks).where(tasks.c.job_id == job_id).order_by(tasks.c.id)
            return [dict(r) for r in conn.execute(query).mappings()]

    def held(self) -> list[tuple[str, int]]:
        with self.store.read() as conn:
            return [(a.node, a.gpu) for a in conn.execute(select(allocations))]


def _ready(row: dict[str, Any]) -> bool:
    out = Path(row["handle"]["stdout"]) if row["handle"] else None
    return out is not None and out.exists() and "ready" in out.read_text()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_kill_9_during_a_partial_stop_and_after_it_loses_nothing(tmp_path: Path) -> None:
    svc = Service(tmp_path / "data")
    twice: list[list[tuple[str, int]]] = []
    done = threading.Event()

    def watch() -> None:  # the store never shows a GPU held twice, whoever writes it
        while not done.is_set():
            held = svc.held()
            if len(held) != len(set(held)):
                twice.append(held)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        inc = svc.submit({"name": "inc", "vc": "vc1", "tasks": 4, "gpus": 1, "gang": False,
                          "command": STUBBORN})  # fmt: skip

        def all_ready() -> list[dict[str, Any]] | None:
            rows = [r for r in svc.tasks(inc) if _ready(r)]
            return rows if len(rows) == 4 else None

        first = wait_until(all_ready, "inc's four tasks ignoring SIGTERM")
        pids = {(r["role"], r["idx"]): r["handle"]["pid"] for r in first}
        boss = svc.submit({"name": "boss", "vc": "vc1", "priority": "prod", "gpus": 1,
                           "command": "sleep 4"})  # fmt: skip
        time.sleep(GRACE_S / 3)  # the pass has sent SIGTERM; the task ignores it
        assert svc.state(boss) == "WAITING"
        assert all(_alive(pid) for pid in pids.values())
        svc.kill()  # 1: inside the grace period of a partial stop

        svc.start()
        wait_until(lambda: svc.state(boss) == "RUNNING", "the preemptor running", timeout=60)
        (stopped,) = [r for r in svc.tasks(inc) if r["state"] == "STOPPED"]
        gone = (stopped["role"], stopped["idx"])
        assert not _alive(pids[gone])
        survivors = {at: pid for at, pid in pids.items() if at != gone}
        assert all(_alive(pid) for pid in survivors.values())
        assert svc.state(inc) == "RUNNING"
        svc.kill()  # 2: one task stopped, the preemptor running

        svc.start()
        wait_until(lambda: svc.state(boss) == "SUCCEEDED", "the preemptor done", timeout=60)
        again = wait_until(
            lambda: [r for r in svc.tasks(inc) if r["generation"] == 2 and r["handle"]],
            "the stopped task running again",
            timeout=60,
        )
        assert [(r["role"], r["idx"]) for r in again] == [gone]
        first_generation = {
            (r["role"], r["idx"]): r["handle"]["pid"]
            for r in svc.tasks(inc)
            if r["generation"] == 1 and r["state"] != "STOPPED"
        }
        assert first_generation == survivors  # adopted twice, never started again
        wait_until(lambda: svc.state(inc) == "SUCCEEDED", "inc done", timeout=90)
        assert [r["state"] for r in svc.tasks(inc)].count("STOPPED") == 1
        assert svc.held() == []
        assert not any(_alive(pid) for pid in pids.values())
    finally:
        done.set()
        watcher.join(timeout=5)
        if svc.proc is not None:
            os.killpg(svc.proc.pid, signal.SIGTERM)
            svc.proc.wait(timeout=30)
        svc.store.dispose()
    assert twice == [], f"a GPU held twice: {twice[:3]}"


@pytest.mark.slow
def test_kill_9_while_a_failed_gang_s_last_task_is_stopped_then_settled_at_restart(
    tmp_path: Path,
) -> None:
    """A gang of two: main-1 fails, so the attempt is decided and main-0 (ignoring SIGTERM) is
    being stopped when the service is killed. Expect the restarted service to settle the
    attempt at once (FAILED, main-0's process gone), not when main-0 happens to exit (it
    lives ~60 s: before, the job stayed RUNNING that long, holding its GPUs)."""
    go = tmp_path / "go"
    svc = Service(tmp_path / "data")
    try:
        long = STUBBORN.replace("seq 100", "seq 300")  # about 60 s
        script = f"if [ $PAI_TASK_INDEX = 1 ]; then while [ ! -e {go} ]; do sleep 0.05; done; exit 1; fi; {long}"  # noqa: E501
        pair = svc.submit({"name": "pair", "vc": "vc1", "tasks": 2, "gpus": 1, "command": script})
        (stubborn,) = wait_until(
            lambda: [r for r in svc.tasks(pair) if r["idx"] == 0 and _ready(r)], "main-0 ready"
        )
        go.touch()
        wait_until(
            lambda: any(r["idx"] == 1 and r["state"] == "ENDED" for r in svc.tasks(pair)),
            "main-1 failed",
        )
        time.sleep(GRACE_S / 3)  # main-0 got SIGTERM and ignores it
        assert _alive(stubborn["handle"]["pid"])
        svc.kill()
        svc.start()
        wait_until(lambda: svc.state(pair) == "FAILED", "the attempt settled", timeout=40)
        assert not _alive(stubborn["handle"]["pid"])
        assert svc.held() == []
    finally:
        if svc.proc is not None:
            os.killpg(svc.proc.pid, signal.SIGTERM)
            svc.proc.wait(timeout=30)
        svc.store.dispose()
