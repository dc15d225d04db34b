"""Given the real service on a node whose GPU is the recorded H100 and a job holding it, expect
/metrics to label the GPU and the job's own process with the job, VC and user, the job's GPU
history at /jobs/{id}/gpus, and a lost GPU to take the node down in the scheduler loop."""

from __future__ import annotations

from metrics_service import NODE, labhive_service
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_until

from labhive.scheduler.core.model import NodeDown

pytest_plugins = ["service_fixtures"]


def samples(text: str, name: str) -> list:
    return [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def test_gpu_and_process_carry_the_job(tmp_path) -> None:
    with labhive_service(tmp_path) as w:
        job, leaf = w.running_on_the_gpu("train")
        w.wait_samples()
        text = w.metrics()
        (util,) = samples(text, "DCGM_FI_DEV_GPU_UTIL")
        assert util.value == 100
        assert (util.labels["job"], util.labels["vc"], util.labels["user"]) == (
            str(job),
            "vc1",
            "admin",
        )
        assert util.labels["Hostname"] == NODE
        (mem,) = samples(text, "labhive_gpu_process_memory_used_mib")
        assert mem.labels["pid"] == str(leaf) and mem.labels["job"] == str(job)
        assert mem.value == 1024.0
        running = samples(text, "labhive_jobs")
        assert [s.value for s in running if s.labels == {"vc": "vc1", "state": "RUNNING"}] == [1]
        assert [s.value for s in samples(text, "labhive_submissions_total")] == [1]
        decided = samples(text, "labhive_scheduling_decision_seconds_count")
        assert decided[0].value >= 1
        (waits,) = samples(text, "labhive_queue_wait_seconds_count")
        assert waits.labels == {"vc": "vc1"} and waits.value == 1

        gpus = w.client.get(f"/api/v1/jobs/{job}/gpus", headers=w.headers)
        assert gpus.status_code == 200, gpus.text
        body = gpus.json()
        assert body["sampling"] is True
        (series,) = body["history"]
        assert (series["node"], series["gpu"]) == (NODE, 0)
        assert series["uuid"] == "GPU-e7c046e5-9dbd-ca41-9060-91d5a385b88f"
        assert len(series["points"]) >= 2 and series["points"][0]["gpu_util"] == 100
        (now,) = body["current"]
        assert now["processes"] == [{"pid": leaf, "used_mib": 1024.0, "sm_util": 37}]


def test_history_is_downsampled_in_the_store(tmp_path, db_url) -> None:
    """On SQLite and on a real PostgreSQL server."""
    with labhive_service(tmp_path, interval_s=0.01, db=db_url) as w:
        assert w.service.monitoring is not None, "the service samples its GPUs"
        w.service.monitoring.history_points = 8
        job = w.submit(name="long", vc="vc1", gpus=1, command="sleep 60")
        w.wait_state(job, "RUNNING")
        w.wait_samples(30)
        (series,) = w.client.get(f"/api/v1/jobs/{job}/gpus", headers=w.headers).json()["history"]
        assert len(series["points"]) <= 8
        assert sum(p["n"] for p in series["points"]) >= 30
        assert max(p["n"] for p in series["points"]) > 1


def test_lost_gpu_takes_the_node_down_and_back_up(tmp_path) -> None:
    with labhive_service(tmp_path) as w:
        w.wait_samples()
        w.nvml.recording["devices"][0]["lost"] = True
        w.wait_samples()
        text = w.metrics()
        assert [s.value for s in samples(text, "labhive_gpu_lost")] == [1]
        # the loop thread hands it to the policy
        wait_until(lambda: w.policy.node_events, "the NodeDown", 10)
        (down,) = w.policy.node_events
        assert isinstance(down, NodeDown), down
        assert down.node == NODE and "GPU 0" in down.reason and "lost" in down.reason
        w.nvml.recording["devices"][0]["lost"] = False
        wait_until(lambda: len(w.policy.node_events) == 2, "the NodeUp", 10)
        assert [type(e).__name__ for e in w.policy.node_events] == ["NodeDown", "NodeUp"]


def test_virtual_cluster_has_no_sampler_and_no_readings(tmp_path) -> None:
    """No NVIDIA driver on this machine: the real pynvml cannot load, no thread starts."""
    from labhive.scheduler.service.server import ServeOptions, build

    running = build(ServeOptions(data_dir=tmp_path, gpu_sample_s=1.0))
    try:
        monitoring = running.service.monitoring
        monitoring.start()
        assert not monitoring.sampling
        text = monitoring.render()
        assert "DCGM_FI_DEV_GPU_UTIL" not in text
        assert [s.value for s in samples(text, "labhive_cluster_virtual")] == [1]
        assert running.virtual
    finally:
        running.service.monitoring.stop()
        running.service.store.dispose()


def test_oom_killed_task_is_counted_per_vc(tmp_path) -> None:
    """The exit the local executor reports for a task its cgroup killed for memory (this
    machine has no cgroup memory controller to do it for real), handed over by the loop."""
    from labhive.scheduler.executors.base import TaskExit, TaskKey

    with labhive_service(tmp_path) as w:
        job = w.submit(name="hungry", vc="vc1", gpus=1, command="sleep 60")
        w.wait_state(job, "RUNNING")
        assert w.service.monitoring is not None
        hook = w.service.monitoring.counters.task_failed
        reason = "killed: over its memory limit of 64 MiB"
        hook(job, TaskExit(TaskKey(str(job), 1, "main", 0), 137, reason))
        hook(job, TaskExit(TaskKey(str(job), 1, "main", 0), 1, "exit code 1"))
        oom = [
            s
            for s in samples(w.metrics(), "labhive_job_failures_total")
            if s.labels["reason"] == "oom_killed"
        ]
        assert [(s.labels["vc"], s.value) for s in oom] == [("vc1", 1.0)]
