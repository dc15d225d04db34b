"""GPU monitoring inside the job service: the glue between the store, the scheduler loop and
``labhive.scheduler.observe``.

Sampling side (the sampler thread, every ``interval_s``): NVML readings of this machine are
kept for ``/metrics``, turned into node-health events for the scheduler loop (``loop.inject``),
and appended to the history of the jobs holding the GPUs (``job_gpu_history``, downsampled).

Scrape side (``GET /metrics``): the service's state is read into a plain ``ServiceSnapshot``
(jobs by state from the store, counters from the event rows through ``EventTally``, VC and node
views from the policy) and rendered together with the last readings; GPUs and GPU processes are
labelled with the job, VC and user holding them.

Without an NVIDIA driver the sampler thread never starts: a virtual cluster exports its slots
and LabHive's metrics, and no GPU readings.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from labhive.scheduler.executors.base import TaskExit
from labhive.scheduler.executors.gpu_share_env import MigGpus
from labhive.scheduler.observe.health import NodeHealth, health
from labhive.scheduler.observe.history import MAX_POINTS, HistoryPoint, compact
from labhive.scheduler.observe.nvml import Sample, Sampler, SamplingThread, start_sampling
from labhive.scheduler.observe.owners import process_owners
from labhive.scheduler.observe.prometheus import (
    DECISION_BUCKETS,
    Owner,
    RunningHistogram,
    ServiceSnapshot,
    render,
)
from labhive.scheduler.observe.tally import EventTally
from labhive.scheduler.service.loop import SchedulerLoop
from labhive.scheduler.service.store import Store, queries, usage
from labhive.scheduler.service.store.usage import HISTORY_FIELDS

log = logging.getLogger("labhive.service.monitoring")

#: Seconds between GPU samples by default (dcgm-exporter's default collection interval is 30 s;
#: a job widget wants finer).
DEFAULT_INTERVAL_S = 10.0


class GpuPointOut(BaseModel):
    """``n`` samples from ``t0`` to ``t1``: mean utilization and power, peak memory and heat."""

    t0: float
    t1: float
    n: int
    gpu_util: float | None = None
    mem_copy_util: float | None = None
    fb_used_mib: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None


class GpuSeriesOut(BaseModel):
    node: str
    gpu: int
    uuid: str | None = None
    points: list[GpuPointOut]


class GpuProcessOut(BaseModel):
    pid: int
    used_mib: float | None = None
    sm_util: int | None = None


class GpuNowOut(BaseModel):
    node: str | None
    gpu: int
    uuid: str | None = None
    time: float
    lost: bool = False
    gpu_util: int | None = None
    mem_copy_util: int | None = None
    fb_used_mib: float | None = None
    fb_total_mib: float | None = None
    power_w: float | None = None
    temperature_c: int | None = None
    processes: list[GpuProcessOut] = []


class JobGpusOut(BaseModel):
    """``GET /jobs/{id}/gpus``; ``sampling`` is false without an NVIDIA driver (virtual GPUs
    have no readings)."""

    job_id: int
    sampling: bool
    interval_s: float
    history: list[GpuSeriesOut]
    current: list[GpuNowOut]


class LoopCounters:
    """What the loop tells monitoring as it runs (``runtime.observers.PassObserver``): each
    policy call's duration and the tasks that failed. Built before the loop, which is given
    it; ``Monitoring`` reads the same counters."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.tally = EventTally()
        self.decisions = RunningHistogram(DECISION_BUCKETS)
        self.lock = threading.Lock()  # guards the tally (the scrape feeds it events too)

    def decided(self, seconds: float) -> None:
        self.decisions.observe(seconds)

    def task_failed(self, job_id: int, exit: TaskExit) -> None:
        if not exit.reason:
            return
        with self.store.read() as conn:
            vc = queries.job_vc(conn, job_id)
        if vc is not None:
            self.tally.task_failed(vc, exit.reason)


class Monitoring:
    """Owns the sampler thread and the exporter's running state for one service."""

    def __init__(
        self,
        store: Store,
        loop: SchedulerLoop,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        sampler: Sampler | None = None,
        history_points: int = MAX_POINTS,
        clock: Callable[[], float] = time.time,
        counters: LoopCounters | None = None,
        mig: MigGpus | None = None,
    ) -> None:
        self.store, self.loop = store, loop
        self.mig = mig  # told which GPUs are in MIG mode (the launch builder refuses shares)
        self.interval_s = interval_s
        self.sampler = sampler
        self.history_points = history_points
        self.clock = clock
        #: What the loop reports (it was given these counters when it was built).
        self.counters = counters or LoopCounters(store)
        self.tally = self.counters.tally
        self.decisions = self.counters.decisions
        self._samples: dict[str, Sample] = {}  # hostname -> latest
        self._health: dict[str, NodeHealth] = {}
        self._lock = threading.Lock()
        self._tally_lock = self.counters.lock
        self._thread: SamplingThread | None = None
        self._unmatched: set[str] = set()

    # ---- life ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start sampling (no-op when the interval is 0 or there is no NVIDIA driver)."""
        if self._thread is None and self.interval_s > 0:
            # a virtual cluster expects no driver: its absence is no news there
            self.sampler = self.sampler or Sampler(expect_gpus=not self.loop.virtual)
            self._thread = start_sampling(self.interval_s, self.on_sample, self.sampler)

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.stop()
            self._thread = None
        if self.sampler is not None:
            self.sampler.close()

    @property
    def sampling(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ---- sampling side ---------------------------------------------------------------------

    def on_sample(self, sample: Sample) -> None:
        with self._lock:
            self._samples[sample.hostname] = sample
        node = self.node_of(sample.hostname)
        if node is None:
            return
        if self.mig is not None:
            self.mig.update(node, frozenset(g.index for g in sample.gpus if g.mig))
        events_out, self._health[node] = health(node, sample, self._health.get(node))
        if events_out:
            for ev in events_out:
                log.warning("GPU health: %s", ev)
            self.loop.inject(list(events_out))
        self._record_history(node, sample)

    def node_of(self, hostname: str) -> str | None:
        """The cluster node a machine's readings belong to: the node named like the host, or
        the only node of a one-node cluster (the local executor's case)."""
        nodes = [n.name for n in self.loop.cluster().nodes]
        if hostname in nodes:
            return hostname
        if len(nodes) == 1:
            return nodes[0]
        if hostname not in self._unmatched:
            self._unmatched.add(hostname)
            log.warning(
                "GPU readings of host %r match no cluster node (%s): no health events or job "
                "history for it; name the node like the host in the cluster config",
                hostname,
                ", ".join(nodes),
            )
        return None

    def _record_history(self, node: str, sample: Sample) -> None:
        held = self._held_gpus(node)
        rows = [
            (held[g.index], g, HistoryPoint.of(sample.time, g))
            for g in sample.gpus
            if g.index in held and not g.lost
        ]
        if not rows:
            return
        with self.store.write() as conn:
            for job_id, gpu, point in rows:
                usage.add_point(conn, job_id, node, gpu.index, point, gpu.uuid)
                self._compact(conn, job_id, node, gpu.index, gpu.uuid)

    def _compact(self, conn: Any, job_id: int, node: str, gpu: int, uuid: str | None) -> None:
        if usage.point_count(conn, job_id, node, gpu) <= self.history_points:
            return
        stored = usage.points(conn, job_id, node, gpu)
        kept = compact(stored, max(self.history_points // 2, 1))
        usage.replace_points(conn, job_id, node, gpu, kept, uuid)

    def _held_gpus(self, node: str) -> dict[int, int]:
        """GPU index -> job id of the GPUs held on ``node``, as the policy sees it now."""
        view = next((n for n in self.loop.cluster().nodes if n.name == node), None)
        return dict(view.used) if view else {}

    # ---- scrape side -----------------------------------------------------------------------

    def _feed_tally(self, conn: Any) -> None:
        with self._tally_lock:
            self.tally.add(usage.events_after(conn, self.tally.cursor))

    def snapshot(self) -> ServiceSnapshot:
        view = self.loop.cluster()
        with self.store.read() as conn:
            counts = usage.job_counts(conn)
            self._feed_tally(conn)
        return ServiceSnapshot(
            vcs=tuple(view.vcs.values()),
            nodes=view.nodes,
            jobs=counts,
            oldest_wait_s=self.tally.oldest_wait(self.clock()),
            queue_wait=self.tally.queue_wait(),
            submissions=self.tally.submissions(),
            preemptions=self.tally.preemptions(),
            retries=self.tally.retries(),
            failures=self.tally.failures(),
            decision_latency=self.decisions.snapshot(),
            virtual=view.virtual,
            loop_age_s=round(self.loop.health.age(), 3),
        )

    def owners(self) -> tuple[dict[tuple[str, int], Owner], dict[int, Owner]]:
        """Who holds each GPU (by host and index) and each GPU process (by pid)."""
        gpu_owners, proc_owners, _ = self._owners()
        return gpu_owners, proc_owners

    def _owners(
        self,
    ) -> tuple[dict[tuple[str, int], Owner], dict[int, Owner], dict[int, Owner]]:
        """``owners()``, and the running jobs' owners by job id."""
        with self._lock:
            samples = list(self._samples.values())
        if not samples:
            return {}, {}, {}
        with self.store.read() as conn:
            running = {
                r.id: Owner(str(r.id), r.vc, r.user)  # the metrics' label: text
                for r in usage.running_jobs(conn)
            }
            handles = usage.running_handles(conn)
        by_node = {n.name: n for n in self.loop.cluster().nodes}
        gpu_owners = {}
        for sample in samples:
            node = by_node.get(self.node_of(sample.hostname) or "")
            for index, job_id in (node.used if node else {}).items():
                owner = running.get(job_id)
                if owner is not None:
                    gpu_owners[(sample.hostname, index)] = owner
        task_pids = {
            int(h["pid"]): running[job_id]
            for job_id, h in handles
            if h and "pid" in h and job_id in running
        }
        pids = [p.pid for s in samples for g in s.gpus for p in g.processes]
        return gpu_owners, process_owners(pids, task_pids), running

    def render(self) -> str:
        snapshot = self.snapshot()
        gpu_owners, proc_owners = self.owners()
        with self._lock:
            samples = sorted(self._samples.values(), key=lambda s: s.hostname)
        return render(snapshot, samples, gpu_owners, proc_owners)

    # ---- GET /jobs/{id}/gpus ---------------------------------------------------------------

    def job_gpus(self, job_id: int) -> JobGpusOut:
        """The job's downsampled GPU history, and the latest readings of the GPUs it holds."""
        with self.store.read() as conn:
            rows = usage.job_history(conn, job_id)
        series: dict[tuple[str, int], dict[str, Any]] = {}
        for r in rows:
            entry = series.setdefault(
                (r.node, r.gpu), {"node": r.node, "gpu": r.gpu, "uuid": r.uuid, "points": []}
            )
            p = r.point
            entry["points"].append(
                {"t0": p.t0, "t1": p.t1, "n": p.n, **{f: getattr(p, f) for f in HISTORY_FIELDS}}
            )
        return JobGpusOut(
            job_id=job_id,
            sampling=self.sampling,
            interval_s=self.interval_s,
            history=[GpuSeriesOut(**v) for v in series.values()],
            current=[GpuNowOut(**c) for c in self._current(job_id)],
        )

    def _current(self, job_id: int) -> list[dict[str, Any]]:
        gpu_owners, proc_owners, running = self._owners()
        with self._lock:
            samples = list(self._samples.values())
        out = []
        for sample in samples:
            for g in sample.gpus:
                owner = gpu_owners.get((sample.hostname, g.index))
                if owner is None or owner != running.get(job_id):
                    continue
                out.append(
                    {
                        "node": self.node_of(sample.hostname),
                        "gpu": g.index,
                        "uuid": g.uuid,
                        "time": sample.time,
                        "lost": g.lost,
                        "gpu_util": g.gpu_util,
                        "mem_copy_util": g.mem_copy_util,
                        "fb_used_mib": g.fb_used_mib,
                        "fb_total_mib": g.fb_total_mib,
                        "power_w": g.power_w,
                        "temperature_c": g.temperature_c,
                        "processes": [
                            {"pid": p.pid, "used_mib": p.used_mib, "sm_util": p.sm_util}
                            for p in g.processes
                            if proc_owners.get(p.pid) == owner
                        ],
                    }
                )
        return out
