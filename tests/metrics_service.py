"""The real job service (store on SQLite, scheduler loop, local executor, REST app) on a
one-GPU node ``gpu-node-1`` whose GPU is the recorded H100 (plus zeroed ECC counters, which the
recording did not query), sampled through the real sampler code path. The HiveD policy is
wrapped to record the node events the loop hands it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from fastapi.testclient import TestClient
from nvml_recorded import RecordedNVML, load_h100
from waiting import wait_until

from labhive.scheduler.core.config import cluster_from_gpus
from labhive.scheduler.core.jobs import JobSpec, parse_job
from labhive.scheduler.core.model import Decision, Event, NodeDown, NodeUp, Scheduler
from labhive.scheduler.executors.local import LocalExecutor
from labhive.scheduler.observe.nvml import Sampler
from labhive.scheduler.policies import get_policy
from labhive.scheduler.service.app import Service, create_app
from labhive.scheduler.service.auth import TokenAuthenticator, ensure_admin_token, load_users
from labhive.scheduler.service.loop import SchedulerLoop
from labhive.scheduler.service.monitoring import LoopCounters, Monitoring
from labhive.scheduler.service.store import Store, database_url

NODE = "gpu-node-1"


class Watching:
    """The HiveD policy, plus a record of the node events the loop gave it."""

    def __init__(self, inner: Scheduler) -> None:
        self.inner = inner
        self.node_events: list[Event] = []

    def handle(self, event: Event) -> list[Decision]:
        if isinstance(event, NodeDown | NodeUp):
            self.node_events.append(event)
        return self.inner.handle(event)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass
class World:
    service: Service
    client: TestClient
    nvml: RecordedNVML
    policy: Watching
    headers: dict[str, str]

    def submit(self, **job: Any) -> int:
        r = self.client.post("/api/v1/jobs", json=job, headers=self.headers)
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def wait_state(self, job_id: int, state: str) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            r = self.client.get(f"/api/v1/jobs/{job_id}", headers=self.headers).json()
            return r if r["state"] == state else None

        return wait_until(reached, f"job {job_id} to become {state}")

    def task_leaf_pid(self, job_id: int) -> int:
        """The pid of the job's command (below the executor's supervisor and shell)."""

        def sleeps() -> list[psutil.Process]:
            handles = list(self.service.loop.handles(job_id).values())
            return [
                p
                for h in handles
                for p in psutil.Process(h.info["pid"]).children(recursive=True)
                if p.name() == "sleep"
            ]

        return wait_until(sleeps, "the job's sleep to start")[0].pid

    def running_on_the_gpu(self, name: str, sm: int = 37) -> tuple[int, int]:
        """A running job (``sleep 60``) whose process the GPU reports as using it: (job, pid).
        The recording's own pids were another machine's."""
        job = self.submit(name=name, vc="vc1", gpus=1, command="sleep 60")
        self.wait_state(job, "RUNNING")
        leaf = self.task_leaf_pid(job)
        device = self.nvml.recording["devices"][0]
        device["compute_procs"] = [{"pid": leaf, "usedGpuMemory": 2**30}]
        device["process_utilization"] = [{"pid": leaf, "sm": sm, "mem": 2}]
        return job, leaf

    def metrics(self) -> str:
        r = self.client.get("/api/v1/metrics")
        assert r.status_code == 200
        return r.text

    def wait_samples(self, n: int = 2) -> None:
        """Until the sampler has read the (changed) recording ``n`` more times."""
        seen = self.nvml.calls.count("nvmlDeviceGetCount")
        wait_until(lambda: self.nvml.calls.count("nvmlDeviceGetCount") >= seen + n, "samples")


@contextmanager
def labhive_service(
    tmp_path: Path, interval_s: float = 0.05, db: str | None = None
) -> Iterator[World]:
    """``db``: a SQLite path or PostgreSQL URL (default: SQLite in ``tmp_path``)."""
    config = cluster_from_gpus(NODE, 1, vcs=("vc1",))
    store = Store(database_url(db, tmp_path))
    store.migrate()
    executor = LocalExecutor(tmp_path / "tasks", grace_s=2.0)
    policy = Watching(get_policy("hived", config))

    def load_spec(row: dict[str, Any]) -> JobSpec:
        spec = parse_job(row["spec"], default_vc="vc1")
        return dataclasses.replace(spec, user=row["user"], name=row["name"])

    counters = LoopCounters(store)  # the loop reports to monitoring through these
    loop = SchedulerLoop(
        store, lambda: policy, executor, load_spec, grace_s=2.0, poll_s=0.05, observers=[counters]
    )
    recording = load_h100()
    recording["devices"][0]["ecc_errors"] = {  # ECC counters, as an H100 with ECC on reports
        "corrected_volatile": 0,
        "uncorrected_volatile": 0,
        "corrected_aggregate": 0,
        "uncorrected_aggregate": 0,
    }
    nvml = RecordedNVML(recording)
    monitoring = Monitoring(
        store, loop, interval_s=interval_s, sampler=Sampler(nvml, hostname=NODE), counters=counters
    )
    token, _ = ensure_admin_token(tmp_path / "admin.token")
    auth = TokenAuthenticator(token, load_users(None), tmp_path / "admin.token")
    service = Service(
        store,
        loop,
        executor,
        auth,
        lambda doc: parse_job(doc, default_vc="vc1"),
        policy.check,
        policy="hived",
        monitoring=monitoring,
    )
    loop.start()
    monitoring.start()
    try:
        with TestClient(create_app(service)) as client:
            yield World(service, client, nvml, policy, {"Authorization": f"Bearer {token}"})
    finally:
        monitoring.stop()
        loop.stop(stop_tasks=True)
        store.dispose()
