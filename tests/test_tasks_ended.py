"""Tasks that end on their own while their job goes on (``TasksEnded``). Given a VC of one
4-GPU node and an incremental job of four 2-GPU tasks, expect two tasks to run, then, once they
end, the other two on the cells they freed, and the ended ones never placed again: not by the
scheduler, not after a restart (``Adopt.ended``), and the job SUCCEEDED in the live service.
Before, an ended task's cells stayed its job's until the job ended: such a job, larger than its
VC, waited for ever for its next tasks on cells its own ended tasks held."""

from __future__ import annotations

from pathlib import Path

from helpers import Cluster
from loop_helpers import job_state as _state
from loop_helpers import submit_by_hand as _submit
from waiting import wait_until

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Adopt, Requeue, Start, TasksEnded
from labhive.scheduler.service.server import ServeOptions, build

CLUSTER_2X4 = Path(__file__).with_name("data") / "cluster-2x4.yaml"
WIDE = {"vc": "vc1", "tasks": 4, "gpus": 2, "gang": False, "command": "true"}


def _placed(c: Cluster) -> list[str]:
    return [f"{t.role}-{t.index}" for d in c.last if isinstance(d, Start) for t in d.tasks]


def test_ended_tasks_free_their_cells_for_the_job_s_next_tasks() -> None:
    c = Cluster(CLUSTER_2X4)
    c.submit("wide", **WIDE)
    assert _placed(c) == ["main-0", "main-1"]
    assert "vc1 has room for 0 of the 1 task of 2 GPUs" in (c.why("wide") or "")
    c.handle(TasksEnded("wide", (("main", 0),), 10.0))
    assert _placed(c) == ["main-2"]
    c.handle(TasksEnded("wide", (("main", 1), ("main", 2)), 20.0))
    assert _placed(c) == ["main-3"]  # main-0 and main-1 are done: never placed again
    view = c.sched.job("wide")
    assert view is not None and view.ended == (("main", 0), ("main", 1), ("main", 2))
    c.handle(TasksEnded("wide", (("main", 3),), 30.0))
    assert c.last == [] and c.sched.job("wide") is not None  # its driver sends Finish next


def test_a_restart_adopts_the_running_tasks_and_keeps_the_ended_ones_done() -> None:
    c = Cluster(CLUSTER_2X4)
    c.submit("wide", **WIDE)
    first = c.sched.job("wide")
    assert first is not None
    running = tuple(t for t in first.tasks if t.index == 1)
    again = Cluster(CLUSTER_2X4)
    spec = parse_job({"name": "wide", **WIDE})
    again.handle(Adopt("wide", spec, running, ended=(("main", 0),)))
    assert again.last == []  # an adopt places nothing
    again.handle(TasksEnded("wide", (), 1.0))  # any event runs a pass
    assert _placed(again) == ["main-2"]  # main-0's cells are free, main-0 is done


def test_requeued_job_runs_every_task_again() -> None:
    c = Cluster(CLUSTER_2X4)
    c.submit("wide", **WIDE)
    c.handle(TasksEnded("wide", (("main", 0),), 10.0))
    c.handle(Requeue("wide", 20.0))
    assert _placed(c) == ["main-0", "main-1"]  # a new attempt: none is done
    view = c.sched.job("wide")
    assert view is not None and view.ended == ()


def test_an_incremental_job_larger_than_its_vc_succeeds_in_the_live_service(
    tmp_path: Path,
) -> None:
    running = build(ServeOptions(data_dir=tmp_path / "data", grace_s=1, cluster=str(CLUSTER_2X4)))
    running.service.intake.close()  # this test submits by hand
    loop = running.service.loop
    loop.start()
    try:
        wide = _submit(loop, {"name": "wide", **WIDE, "command": "sleep 0.3"})
        wait_until(lambda: _state(loop, wide) == "SUCCEEDED", "the job done", timeout=30)
    finally:
        loop.stop(stop_tasks=True)
        loop.store.dispose()
