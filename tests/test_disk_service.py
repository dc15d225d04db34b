"""Given the service with its data dir on a small real file system (a 64 MiB tmpfs), expect a
job that fills the disk not to take the service down with it: on a full disk the service still
answers /health, reads and cancels, and refuses new jobs with 507 "disk full"; a job that fills
the disk fails saying so and is not rerun without end; finished tasks' work dirs are removed
after the retention, and a symlink planted in one never leads the removal outside it."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from disk_support import MIB, free_mib, small_fs
from service_fixtures import live_service
from waiting import wait_until

from labhive.scheduler.client import LabHiveError

FILL = "head -c 200M /dev/zero > fill"


@pytest.fixture
def fs(tmp_path: Path):
    with small_fs(tmp_path / "fs", 64) as where:
        yield where


def state(job) -> str:
    return job.refresh().state


def test_on_a_full_disk_it_answers_health_reads_and_cancels_and_refuses_jobs_with_507(fs):
    with live_service(fs / "data", disk_reserve=16 * MIB, work_quota=None) as svc:
        c = svc.client()
        quiet = c.submit(command="sleep 600", vc="vc1", gpus=1, name="quiet")
        hog = c.submit(command=f"{FILL}; sleep 600", vc="vc1", gpus=1, name="hog")
        wait_until(lambda: state(quiet) == state(hog) == "RUNNING", what="both jobs to run")
        wait_until(lambda: free_mib(fs) < 10, what="the hog to fill the disk")
        health = httpx.get(svc.url + "/health", timeout=10)
        assert health.status_code == 200 and health.json()["disk"].startswith("full: ")
        refused = httpx.post(
            svc.url + "/jobs",
            json={"command": "true", "vc": "vc1", "gpus": 1},
            headers={"Authorization": f"Bearer {svc.admin}"},
            timeout=10,
        )
        assert refused.status_code == 507
        assert refused.json()["detail"].startswith("disk full: the service's data dir ")
        assert "below its reserve of 16 MiB" in refused.json()["detail"]
        assert [j.name for j in c.jobs()] == ["hog", "quiet"]  # reads work
        assert c.cancel(quiet.id, wait=10).state == "STOPPED"
        assert c.cancel(hog.id, wait=10).state == "STOPPED"
        assert [e["to_state"] for e in quiet.events()][-1] == "STOPPED"  # it was committed
        assert not (svc.data_dir / "disk.reserve").exists()  # given to the store for that


def test_a_job_that_fills_the_disk_fails_saying_disk_full_and_is_not_rerun_forever(fs):
    with live_service(fs / "data", disk_reserve=16 * MIB, work_quota=None) as svc:
        c = svc.client()
        job = c.submit(command=f"{FILL}; exit 0", vc="vc1", gpus=1, retries=1, name="filler")
        assert job.wait(60, 0.1).state == "FAILED"
        assert "disk full" in job.why
        assert (job.attempt, job.retries_used) == (2, 1)  # its one retry, then no more
        try:
            c.submit(command="true", vc="vc1", gpus=1)
        except LabHiveError as err:
            assert err.status == 507
        else:
            raise AssertionError("a submission on a full disk was accepted")


def test_a_job_over_its_work_dir_quota_fails_with_the_reason(fs):
    with live_service(fs / "data", work_quota=4 * MIB, disk_reserve=None) as svc:
        svc.running.service.executor.quota_interval_s = 0.2
        c = svc.client()
        job = c.submit(command="head -c 20M /dev/zero > big; sleep 600", vc="vc1", gpus=1)
        assert job.wait(30, 0.1).state == "FAILED"
        assert "killed: over its disk quota of 4 MiB" in job.why


def test_retention_removes_finished_work_dirs_and_nothing_a_planted_symlink_points_at(fs, tmp_path):
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the task's")
    plant = f"mkdir sub; echo data > sub/f; ln -s {outside} sub/link; ln -s {outside}/keep.txt ln"
    with live_service(fs / "data", keep_work_s=1.0, disk_reserve=None) as svc:
        svc.running.service.housekeeping.retention_every_s = 0.2
        c = svc.client()
        runner = c.submit(command="echo hi > here; sleep 600", vc="vc1", gpus=1, name="runner")
        done = c.submit(command=f"{plant}; echo finished", vc="vc1", gpus=1, name="done")
        assert done.wait(30, 0.1).state == "SUCCEEDED"
        (task_dir,) = (svc.data_dir / "jobs" / str(done.id)).glob("*/*")
        wait_until(lambda: not (task_dir / "work").exists(), what="the work dir to go")
        assert (outside / "keep.txt").read_text() == "not the task's"  # never followed
        assert c.logs(done.id).data == "finished\n"  # the log stays with the job
        (running_dir,) = (svc.data_dir / "jobs" / str(runner.id)).glob("*/*")
        assert (running_dir / "work" / "here").read_text() == "hi\n"  # a running task's stays
        c.cancel(runner.id, wait=10)


def test_retention_leaves_a_task_whose_supervisor_still_runs(tmp_path):
    """Even when the store says a task ended (a stop that has not finished yet), its work dir
    stays while its supervisor (pid and start time) is alive, and goes once it is not."""
    from local_exec_util import launch_one, wait_exits

    from labhive.scheduler.executors.local import LocalExecutor
    from labhive.scheduler.service.retention import WorkRetention

    ex = LocalExecutor(tmp_path / "data", grace_s=1.0)
    go = tmp_path / "go"
    handle = launch_one(ex, "7", f"while [ ! -e {go} ]; do sleep 0.05; done")
    retention = WorkRetention(None, tmp_path / "data", keep_s=0.0)  # type: ignore[arg-type]
    work = Path(handle.info["cwd"])
    assert retention._remove(handle.info) == "running" and work.is_dir()
    go.touch()
    wait_exits(ex, 1)
    assert retention._remove(handle.info) == work and not work.exists()
    assert Path(handle.info["stdout"]).exists()  # the logs stay
