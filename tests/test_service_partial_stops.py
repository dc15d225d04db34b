"""Given the live scheduler loop with the local executor (real processes; SQLite and
PostgreSQL) and per-task stops turned on, an incremental job (``gang: false``) of four 1-GPU
tasks filling vc1's node, then a higher-priority 1-GPU job: expect exactly one task's process
to end (the other three keep their pids), the preemptor to run, and the stopped task to run
again, as the next generation with a new pid, once the preemptor is done; the job then
SUCCEEDED."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from loop_helpers import job_state as _state
from loop_helpers import submit_by_hand as _submit
from sqlalchemy import select
from waiting import wait_until

from labhive.scheduler.cli import build_parser
from labhive.scheduler.service.commands import _options
from labhive.scheduler.service.loop import SchedulerLoop
from labhive.scheduler.service.server import ServeOptions, build
from labhive.scheduler.service.store import events, tasks

pytest_plugins = ["service_fixtures"]


def _started(data_dir: Path, db: str | None = None, cluster: Path | None = None) -> SchedulerLoop:
    where = str(cluster) if cluster else None
    opts = ServeOptions(data_dir=data_dir, grace_s=1, db=db, cluster=where, partial_stops=True)
    running = build(opts)
    running.service.intake.close()  # this test submits by hand
    loop = running.service.loop
    loop.start()  # rebuilds from the store, re-adopting what runs
    return loop


@pytest.fixture
def loop(tmp_path: Path, db_url: str) -> Iterator[SchedulerLoop]:
    loop = _started(tmp_path / "data", db_url)
    yield loop
    loop.stop(stop_tasks=True)
    loop.store.dispose()


def _tasks(loop: SchedulerLoop, job_id: int) -> list[dict[str, Any]]:
    with loop.store.read() as conn:
        query = select(tasks).where(tasks.c.job_id == job_id).order_by(tasks.c.id)
        return [dict(r) for r in conn.execute(query).mappings()]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_preemptor_stops_one_task_which_runs_again_as_its_next_generation(
    loop: SchedulerLoop,
) -> None:
    inc = _submit(loop, {"name": "inc", "vc": "vc1", "tasks": 4, "gpus": 1, "gang": False,
                         "command": "sleep 8"})  # fmt: skip

    def with_pids() -> list[dict[str, Any]] | None:
        rows = _tasks(loop, inc)
        return rows if rows and all(r["handle"] for r in rows) else None

    first = wait_until(with_pids, "the four tasks running with their pids")
    assert len(first) == 4
    pids = {(r["role"], r["idx"]): r["handle"]["pid"] for r in first}
    boss = _submit(loop, {"name": "boss", "vc": "vc1", "priority": "prod", "gpus": 1,
                          "command": "sleep 1"})  # fmt: skip
    stopped = wait_until(
        lambda: [r for r in _tasks(loop, inc) if r["state"] == "STOPPED"], "a task stopped"
    )
    assert len(stopped) == 1 and _state(loop, inc) == "RUNNING"
    gone = (stopped[0]["role"], stopped[0]["idx"])
    assert not _alive(pids[gone])
    assert all(_alive(pid) for at, pid in pids.items() if at != gone)
    wait_until(lambda: _state(loop, boss) == "SUCCEEDED", "the preemptor done", timeout=60)
    again = wait_until(
        lambda: [r for r in _tasks(loop, inc) if r["generation"] == 2 and r["handle"]],
        "the stopped task running again",
        timeout=60,
    )
    assert [(r["role"], r["idx"], r["attempt"]) for r in again] == [(*gone, 1)]
    assert again[0]["handle"]["pid"] != pids[gone]
    wait_until(lambda: _state(loop, inc) == "SUCCEEDED", "the job done", timeout=60)
    with loop.store.read() as conn:
        whys = [
            r.why
            for r in conn.execute(
                select(events.c.why).where(
                    events.c.job_id == inc, events.c.reason == "tasks stopped"
                )
            )
        ]
    assert len(whys) == 1 and f"preempted by job {boss}" in whys[0]


def test_a_restart_while_a_task_is_stopped_adopts_the_others_and_runs_it_again(
    tmp_path: Path,
) -> None:
    """The service goes away (its tasks left running) while one task is stopped and its
    preemptor runs; the next start adopts the three survivors and the preemptor, keeps the
    stopped task waiting, and runs it again (generation 2) once the preemptor is done."""
    loop = _started(tmp_path / "data")
    inc = _submit(loop, {"name": "inc", "vc": "vc1", "tasks": 4, "gpus": 1, "gang": False,
                         "command": "sleep 12"})  # fmt: skip
    wait_until(lambda: len([r for r in _tasks(loop, inc) if r["handle"]]) == 4, "four tasks")
    pids = {(r["role"], r["idx"]): r["handle"]["pid"] for r in _tasks(loop, inc)}
    boss = _submit(loop, {"name": "boss", "vc": "vc1", "priority": "prod", "gpus": 1,
                          "command": "sleep 4"})  # fmt: skip
    wait_until(lambda: _state(loop, boss) == "RUNNING", "the preemptor running")
    (stopped,) = [r for r in _tasks(loop, inc) if r["state"] == "STOPPED"]
    gone = (stopped["role"], stopped["idx"])
    loop.stop(stop_tasks=False)  # what a kill leaves: the store, and the processes running
    loop.store.dispose()
    loop = _started(tmp_path / "data")
    try:
        assert _state(loop, inc) == "RUNNING"
        assert all(_alive(pid) for at, pid in pids.items() if at != gone)
        wait_until(lambda: _state(loop, boss) == "SUCCEEDED", "the preemptor done", timeout=60)
        again = wait_until(
            lambda: [r for r in _tasks(loop, inc) if r["generation"] == 2 and r["handle"]],
            "the stopped task running again",
            timeout=60,
        )
        assert [(r["role"], r["idx"]) for r in again] == [gone]
        survivors = [
            r for r in _tasks(loop, inc) if r["generation"] == 1 and r["state"] != "STOPPED"
        ]
        assert {(r["role"], r["idx"]): r["handle"]["pid"] for r in survivors} == {
            at: pid for at, pid in pids.items() if at != gone
        }
        wait_until(lambda: _state(loop, inc) == "SUCCEEDED", "the job done", timeout=60)
    finally:
        loop.stop(stop_tasks=True)
        loop.store.dispose()


THREE_NODES = """\
physicalCluster:
  cellTypes:
    VNODE: {childCellType: VGPU, childCellNumber: 4, isNodeLevel: true}
    POOL: {childCellType: VNODE, childCellNumber: 3}
  physicalCells:
    - cellType: POOL
      cellChildren: [{cellAddress: vnode-0}, {cellAddress: vnode-1}, {cellAddress: vnode-2}]
virtualClusters:
  vc1: {virtualCells: [{cellType: POOL.VNODE, cellNumber: 2}]}
"""


def test_a_restart_keeps_a_task_downgraded_alone_opportunistic(tmp_path: Path) -> None:
    """Given vc1 with two node cells on three nodes, an incremental job with lazy preemption
    on two of them, then a prod job: one task of the first is downgraded (its cell becomes
    the prod job's VC binding elsewhere) and the store says which. After a restart both are
    adopted as they run, the prod job is not sent back to the queue, and the task is still
    the opportunistic one (the scheduler's why-text says so: it is preempted first)."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(THREE_NODES)
    loop = _started(tmp_path / "data", cluster=cluster)
    inc = _submit(loop, {"name": "inc", "vc": "vc1", "tasks": 2, "gpus": 4, "gang": False,
                         "lazy_preemption": True, "command": "sleep 60"})  # fmt: skip
    wait_until(lambda: len([r for r in _tasks(loop, inc) if r["handle"]]) == 2, "inc running")
    boss = _submit(loop, {"name": "boss", "vc": "vc1", "priority": "prod", "gpus": 4,
                          "command": "sleep 60"})  # fmt: skip
    (boss_task,) = wait_until(
        lambda: [r for r in _tasks(loop, boss) if r["handle"]], "the prod job running"
    )
    marked = [(r["role"], r["idx"], r["downgraded_by"]) for r in _tasks(loop, inc)]
    assert sorted(marked) == [("main", 0, str(boss)), ("main", 1, None)]
    loop.stop(stop_tasks=False)  # what a kill leaves: the store, and the processes running
    loop.store.dispose()
    loop = _started(tmp_path / "data", cluster=cluster)
    try:
        view = wait_until(lambda: loop.view(inc), "inc adopted by the restarted loop")
        wait_until(lambda: loop.passes > 0, "the first pass after the restart")
        assert (_state(loop, inc), _state(loop, boss)) == ("RUNNING", "RUNNING")
        assert _alive(boss_task["handle"]["pid"])
        with loop.store.read() as conn:
            reasons = [r.reason for r in conn.execute(
                select(events.c.reason).where(events.c.job_id == boss))]  # fmt: skip
        assert "requeued" not in reasons, reasons
        assert view.why is not None
        assert view.why.startswith("task main-0 downgraded to opportunistic by boss"), view.why
    finally:
        loop.stop(stop_tasks=True)
        loop.store.dispose()


def test_a_restart_keeps_a_downgraded_task_that_ended_outside_its_vc(tmp_path: Path) -> None:
    """As above, but the downgraded task then ends by itself while the other runs on: the
    policy holds an ended task's cells until its job ends, so the restart adopts that task
    where it ran, outside vc1's cells too. (Adopted as guaranteed, it took vc1's last cell
    and the prod job's adoption was refused: "could not keep its cells after a restart".)"""
    go = tmp_path / "go"
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(THREE_NODES)
    loop = _started(tmp_path / "data", cluster=cluster)
    script = (f"if [ $PAI_TASK_INDEX = 0 ]; then while [ ! -e {go} ]; do sleep 0.05; done; "
              f"exit 0; fi; sleep 60")  # fmt: skip
    inc = _submit(loop, {"name": "inc", "vc": "vc1", "tasks": 2, "gpus": 4, "gang": False,
                         "lazy_preemption": True, "command": script})  # fmt: skip
    wait_until(lambda: len([r for r in _tasks(loop, inc) if r["handle"]]) == 2, "inc running")
    boss = _submit(loop, {"name": "boss", "vc": "vc1", "priority": "prod", "gpus": 4,
                          "command": "sleep 60"})  # fmt: skip
    wait_until(lambda: [r for r in _tasks(loop, boss) if r["handle"]], "the prod job running")
    go.touch()
    ended = wait_until(
        lambda: [r for r in _tasks(loop, inc) if r["state"] == "ENDED"], "main-0 ended"
    )
    assert [(r["idx"], r["downgraded_by"]) for r in ended] == [(0, str(boss))]
    loop.stop(stop_tasks=False)  # what a kill leaves: the store, and the processes running
    loop.store.dispose()
    loop = _started(tmp_path / "data", cluster=cluster)
    try:
        wait_until(lambda: loop.view(inc) and loop.passes > 0, "the first pass after it")
        assert (_state(loop, inc), _state(loop, boss)) == ("RUNNING", "RUNNING")
        with loop.store.read() as conn:
            reasons = [r.reason for r in conn.execute(select(events.c.reason))]
        assert "requeued" not in reasons, reasons
    finally:
        loop.stop(stop_tasks=True)
        loop.store.dispose()


CLUSTER_2X4 = Path(__file__).with_name("data") / "cluster-2x4.yaml"


def test_a_start_held_for_a_job_still_stopping_is_dropped_when_its_attempt_ends(
    tmp_path: Path,
) -> None:
    """Given two 4-GPU nodes, an opportunistic incremental job of two 1-GPU tasks on vnode-0
    (main-0 ignores SIGTERM) and a prod job of default on 3 GPUs of vnode-1: main-1 fails, so
    the attempt ends and main-0 is being stopped (a grace period). Meanwhile a prod job of vc1
    takes 3 GPUs of vnode-0: the policy, which still counts the job running, stops main-0
    alone and places it again on vnode-1's last GPU, a start held back while the job drains.
    Expect the next attempt to hold each task once, in its first generation: the held start
    of the attempt that ended is dropped (it was recorded onto the next attempt, beside the
    policy's new placement, one GPU taken twice: found by the chaos test)."""
    go = tmp_path / "go"
    loop = _started(tmp_path / "data", cluster=CLUSTER_2X4)
    try:
        script = (f"trap '' TERM; if [ $PAI_TASK_INDEX = 1 ] && [ $LABHIVE_ATTEMPT = 1 ]; then "
                  f"while [ ! -e {go} ]; do sleep 0.05; done; exit 1; fi; sleep 60")  # fmt: skip
        doc = {"name": "inc", "vc": "vc1", "priority": "oppo", "tasks": 2, "gpus": 1,
               "gang": False, "retries": 1, "command": script}  # fmt: skip
        inc = _submit(loop, doc)
        wait_until(lambda: len([r for r in _tasks(loop, inc) if r["handle"]]) == 2, "inc runs")
        _submit(loop, {"name": "f", "vc": "default", "priority": "prod", "gpus": 3,
                       "command": "sleep 60"})  # fmt: skip
        wait_until(lambda: loop.passes and _state(loop, inc + 1) == "RUNNING", "f runs")
        go.touch()  # main-1 fails: the attempt ends, main-0 takes its grace period to go
        wait_until(lambda: inc in loop.runs.reserved.draining, "the attempt stopping")
        _submit(loop, {"name": "g", "vc": "vc1", "priority": "prod", "gpus": 3,
                       "command": "sleep 60"})  # fmt: skip
        wait_until(lambda: any(h.job_id == inc for h in loop.runs.reserved.held), "a held start")
        wait_until(
            lambda: [r for r in _tasks(loop, inc) if r["attempt"] == 2 and r["handle"]],
            "the second attempt running",
            timeout=30,
        )
        time.sleep(0.5)  # (a stale start was recorded in the new attempt's first pass)
        rows = [r for r in _tasks(loop, inc) if r["attempt"] == 2]
        assert sorted((r["role"], r["idx"], r["generation"]) for r in rows) == [
            ("main", 0, 1),
            ("main", 1, 1),
        ], rows
        with loop.store.read() as conn:
            reasons = [r.reason for r in conn.execute(
                select(events.c.reason).where(events.c.job_id == inc))]  # fmt: skip
        assert "unstorable" not in reasons, reasons
    finally:
        loop.stop(stop_tasks=True)
        loop.store.dispose()


def test_an_executor_that_cannot_stop_tasks_alone_keeps_whole_job_stops(tmp_path: Path) -> None:
    """On by default where the executor can stop tasks alone (local); Kubernetes and Slurm
    cannot (their names carry no task generation); ``--stops jobs`` turns it off. The ETA
    forecast gets its policy from the loop, so it stops what the loop stops."""
    from labhive.scheduler.executors.kubernetes import KubernetesExecutor
    from labhive.scheduler.executors.slurm import SlurmExecutor

    assert getattr(build(ServeOptions(data_dir=tmp_path / "on")).service.loop.scheduler,
                   "partial_stops", None) is True  # fmt: skip
    loop = build(ServeOptions(data_dir=tmp_path / "data", partial_stops=True)).service.loop
    try:
        assert getattr(loop.new_policy(), "partial_stops", None) is True  # the local executor
        assert getattr(loop.scheduler, "partial_stops", None) is True
        assert loop.eta is not None and loop.eta.make_scheduler == loop.new_policy
        assert KubernetesExecutor.partial_stops is False and SlurmExecutor.partial_stops is False
        executor = loop.executor
        loop.executor = KubernetesExecutor.__new__(KubernetesExecutor)
        assert getattr(loop.new_policy(), "partial_stops", None) is False
        loop.executor = executor
        loop.partial_stops = False
        assert getattr(loop.new_policy(), "partial_stops", None) is False
    finally:
        loop.store.dispose()
    parse = build_parser().parse_args
    assert _options(parse(["serve"])).partial_stops is True
    assert _options(parse(["serve", "--stops", "jobs"])).partial_stops is False


def test_a_restart_takes_each_task_in_its_latest_generation_and_ended_ones_as_done(
    tmp_path: Path,
) -> None:
    """Given an attempt's rows as a store may hold them: main-0 ended by itself in generation
    1 just before the policy stopped it and ran it again (stores written before
    ``TasksEnded``), now running as generation 2; main-1 ended; main-2 stopped alone. Expect
    the restored attempt to adopt main-0's generation 2 only (both were adopted, one GPU
    beside the other), main-1 as done, main-2 waiting to be placed again."""
    from labhive.scheduler.core.jobs import parse_job
    from labhive.scheduler.service.runtime.recovery import restore
    from labhive.scheduler.service.store.queries import JobRow, TaskRow

    loop = build(ServeOptions(data_dir=tmp_path / "data")).service.loop
    try:
        doc = {"name": "inc", "vc": "vc1", "tasks": 3, "gpus": 1, "gang": False}
        spec = parse_job(doc)

        def row(idx: int, generation: int, state: str, gpu: int, code: int | None) -> TaskRow:
            handle = {"pid": 1} if state == "RUNNING" else None
            return {"id": 10 * idx + generation, "job_id": 7, "attempt": 1, "role": "main",
                    "idx": idx, "generation": generation, "node": "n", "gpus": [gpu],
                    "cells": [f"n/{gpu}"], "state": state, "exit_code": code,
                    "handle": handle, "started_at": 0.0, "ended_at": None,
                    "downgraded_by": None}  # fmt: skip

        rows = [row(0, 1, "ENDED", 0, 0), row(1, 1, "ENDED", 1, 0), row(2, 1, "STOPPED", 2, None),
                row(0, 2, "RUNNING", 3, None)]  # fmt: skip
        job: JobRow = {"id": 7, "name": "inc", "user": "alice", "vc": "vc1", "priority": 0,
               "state": "RUNNING", "attempt": 1, "retries": 0, "retries_used": 0,
               "task_count": 3, "gpus": 3, "opportunistic": False, "cancel_requested": False,
               "spec": doc, "reason": "started", "why": None, "exit_code": None,
               "submitted_at": 0.5, "started_at": 1.0, "finished_at": None, "updated_at": 1.0,
               "owner_id": None}  # fmt: skip
        run, adopt = restore(job, spec, rows, 2.0)
        assert [(t.role, t.index, t.gpus) for t in adopt.tasks] == [("main", 0, (3,))]
        assert adopt.ended == (("main", 1),)
        assert run.generations == {("main", 0): 2, ("main", 1): 1, ("main", 2): 1}
        assert [k.generation for k in run.handles] == [2]
        assert run.codes == {("main", 1): 0} and run.gpus == {("n", 3)}
    finally:
        loop.store.dispose()
