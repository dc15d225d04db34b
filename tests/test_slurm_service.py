"""The job service with ``--executor slurm`` over a real two-node Slurm.

Given the cluster config ``labhive cluster from-slurm`` writes (2 nodes x 4 GPUs, one VC), expect
a gang over both nodes to run and log through the API, a higher-priority job to preempt a lower
one through Slurm, a node drained in Slurm to requeue its job without spending a retry, and a
restarted service to re-adopt a running job and settle it with its real exit code.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pg_throwaway import free_port
from serving import serving
from slurm_cluster import SlurmCluster
from test_slurm_executor import native_sbatch
from waiting import wait_until

from labhive.scheduler.client import Client

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
pytest_plugins = ["slurm_cluster"]

USERS = """
users:
  alice: {token: alice-token-123, groups: [lab]}
groups:
  lab: {vcs: [default]}
"""


@contextmanager
def service(
    slurm: SlurmCluster,
    data_dir: Path,
    stop_tasks: bool = True,
    partition: str | None = None,
    task_identity: str = "service",
) -> Iterator[Client]:
    from labhive.scheduler.executors.slurm_cli import Slurm
    from labhive.scheduler.executors.slurm_config import cluster_from_slurm
    from labhive.scheduler.service.server import ServeOptions, build

    cluster = data_dir / "cluster.yaml"
    if not cluster.exists():
        cluster.write_text(cluster_from_slurm(Slurm(conf=str(slurm.conf))))
    (data_dir / "users.yaml").write_text(USERS)
    (data_dir / "users.yaml").chmod(0o600)  # tokens: a service running users' uids insists
    port = free_port()
    opts = ServeOptions(
        port=port, data_dir=data_dir, users=data_dir / "users.yaml", grace_s=1.0,
        cluster=str(cluster), executor="slurm",
        executor_options={"slurm_conf": str(slurm.conf), "partition": partition},
        gpu_sample_s=0, task_identity=task_identity,
    )  # fmt: skip
    running = build(opts)
    running.service.loop.poll_s = 0.05
    running.service.loop.start()
    try:
        with serving(running.app, port):
            yield Client(running.url, "alice-token-123")
    finally:
        running.service.intake.close()
        running.service.loop.stop(stop_tasks=stop_tasks)
        running.service.store.dispose()


def state(job: Any, wanted: str, timeout: float = 90) -> None:
    wait_until(lambda: job.refresh().state == wanted, f"job {job.id} to be {wanted}", timeout)


def test_a_gang_over_both_nodes_runs_and_logs_through_the_api(
    slurm: SlurmCluster, data_dir: Path
) -> None:
    with service(slurm, data_dir) as alice:
        job = alice.submit(
            command='echo "$(hostname) rank $RANK of $WORLD_SIZE gpus $CUDA_VISIBLE_DEVICES"',
            gpus=4, tasks=2, name="wide",
        )  # fmt: skip
        state(job, "SUCCEEDED")
        assert sorted(t["node"] for t in job.tasks) == ["n1", "n2"]
        lines = sorted(alice.logs(job.id, task=f"{t['role']}-{t['index']}").data.strip()
                       for t in job.tasks)  # fmt: skip
        assert lines == ["n1 rank 0 of 2 gpus 0,1,2,3", "n2 rank 1 of 2 gpus 0,1,2,3"]


def test_a_prod_job_preempts_a_test_job_through_slurm(slurm: SlurmCluster, data_dir: Path) -> None:
    with service(slurm, data_dir) as alice:
        low = alice.submit(command="sleep 600", gpus=4, tasks=2, priority="test", name="low")
        state(low, "RUNNING")  # committed before Slurm is asked: wait for the allocation
        wait_until(lambda: len(_slurm_jobs(slurm)) == 1, "the low job's Slurm allocation")
        slurm_ids = _slurm_jobs(slurm)
        high = alice.submit(command="sleep 600", gpus=4, priority="prod", name="high")
        state(high, "RUNNING")
        assert low.refresh().state == "WAITING"
        assert any("preempted by high" in (e["why"] or "") for e in low.events()), low.events()
        assert slurm_ids[0] not in _slurm_jobs(slurm)  # the victim's allocation is gone
        high.cancel()
        low.cancel()


def test_a_node_drained_in_slurm_requeues_its_job_without_spending_a_retry(
    slurm: SlurmCluster, data_dir: Path
) -> None:
    with service(slurm, data_dir) as alice:
        job = alice.submit(command="sleep 600", gpus=4, name="long", retries=0)
        state(job, "RUNNING")
        first = job.tasks[0]["node"]
        slurm.scontrol("update", f"NodeName={first}", "State=DRAIN", "Reason=disk full")
        try:
            wait_until(lambda: job.refresh().attempt == 2 and job.state == "RUNNING", timeout=90)
            assert job.tasks[0]["node"] != first
            (stop,) = [e for e in job.events() if e["reason"] == "stopped"]
            assert "disk full" in stop["why"]
        finally:
            slurm.scontrol("update", f"NodeName={first}", "State=RESUME")
        job.cancel()


def test_a_restarted_service_re_adopts_a_running_job_and_settles_its_exit_code(
    slurm: SlurmCluster, data_dir: Path
) -> None:
    with service(slurm, data_dir, stop_tasks=False) as alice:
        job = alice.submit(command="sleep 4; exit 3", gpus=1, name="through", retries=0)
        state(job, "RUNNING")
    with service(slurm, data_dir) as alice:
        job = alice.job(job.id)
        state(job, "FAILED")
        assert (
            job.attempt == 1
            and job.events()[-1]["why"] == "attempt 1 failed (exit codes main-0: 3)"
        )


def test_a_job_past_its_partitions_default_time_fails_at_that_limit_not_requeued_forever(
    slurm: SlurmCluster, data_dir: Path
) -> None:
    """Given the service on partition "short" (DefaultTime 1 min) with a cluster config that
    sets no time limit, and a job that declares none and runs 10 min with 2 retries: Slurm
    stops it at the partition's minute. Expect it FAILED "time limit of 1 min reached" after
    its one attempt, no retry spent (before: "attempt N lost its tasks", requeued every
    minute)."""
    with service(slurm, data_dir, partition="short") as alice:
        job = alice.submit(command="sleep 600", gpus=1, name="endless", retries=2)
        state(job, "FAILED", timeout=200)
        last = job.events()[-1]
        assert last["reason"] == "time limit of 1 min reached", job.events()
        assert last["why"].startswith("time limit of 1 min reached; ask for more time")
        assert job.attempt == 1 and job.retries_used == 0


def test_a_uid_slurm_does_not_know_is_the_jobs_why_with_the_fix(
    slurm: SlurmCluster, data_dir: Path
) -> None:
    """Given the service running tasks as its users' own uids (allocated from 200000, which no
    Slurm node knows), expect alice's job FAILED with Slurm's refusal and what to do in its
    why, not a bare "exit codes main-0: 127"."""
    with service(slurm, data_dir, task_identity="users") as alice:
        job = alice.submit(command="true", gpus=1, name="stranger", retries=0)
        state(job, "FAILED")
        why = job.events()[-1]["why"]
        assert "main-0: 127 (cannot start the task: Slurm knows no account uid 2" in why, why
        assert "create that account on the Slurm controller and every node" in why
        assert "--first-uid" in why


def test_labhive_places_around_a_native_sbatch_job_and_takes_the_node_once_it_ends(
    slurm: SlurmCluster, data_dir: Path
) -> None:
    """Given a user's own ``sbatch`` job holding 2 of n1's 4 GPUs, and alice submitting two
    4-GPU jobs through LabHive: expect the first on n2, the second WAITING (n1 is not free for
    it: before, LabHive started it on n1, where Slurm kept it pending behind the native job
    while LabHive showed it RUNNING), n1 shown down with the native job named, and the second
    job running on n1 once the native job ends."""
    native = native_sbatch(slurm, "n1", gpus=2, name="bobs-training")
    try:
        with service(slurm, data_dir) as alice:
            wait_until(lambda: _why_down(alice, "n1"), "n1 to be held for the native job", 60)
            assert f"job {native} (root: bobs-training)" in _why_down(alice, "n1")
            first = alice.submit(command="sleep 600", gpus=4, name="first")
            state(first, "RUNNING")
            assert first.tasks[0]["node"] == "n2"
            second = alice.submit(command="hostname", gpus=4, name="second", retries=0)
            time.sleep(8)  # several passes of the loop and of Slurm's node poll
            assert second.refresh().state == "WAITING", second.data
            subprocess.run(["scancel", native], env=slurm.env, check=True)
            state(second, "SUCCEEDED")
            assert second.tasks[0]["node"] == "n1"
            assert alice.logs(second.id).data.strip() == "n1"
            first.cancel()
    finally:
        subprocess.run(["scancel", native], env=slurm.env, check=False)


def _why_down(client: Client, node: str) -> str:
    (view,) = [n for n in client.cluster()["nodes"] if n["name"] == node]
    return "" if view["healthy"] else str(view["reason"])


def _slurm_jobs(slurm: SlurmCluster) -> list[str]:
    """Slurm jobs not ended yet (a het job once, by its leader's id)."""
    from labhive.scheduler.executors.slurm_cli import ENDED_STATES, Slurm, job_states

    states = job_states(Slurm(conf=str(slurm.conf)).json(["squeue"]))
    return sorted(j for j, s in states.items() if s not in ENDED_STATES)
