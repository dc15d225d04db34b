"""Prometheus text for ``GET /metrics``: GPU readings under dcgm-exporter's names, plus LabHive's
own scheduling metrics.

GPU series keep dcgm-exporter's metric names, units, types and base labels (``gpu``, ``UUID``,
``pci_bus_id``, ``device``, ``modelName``, ``Hostname``), so the stock "NVIDIA DCGM Exporter
Dashboard" and existing alert rules work on LabHive's endpoint unchanged. LabHive adds ``job``,
``vc`` and ``user`` (the way dcgm-exporter adds ``hpc_job``), empty on a GPU nobody holds. A
Prometheus scrape of this endpoint must set ``honor_labels: true`` (the shipped scrape config
does) so LabHive's ``job`` is kept instead of being renamed ``exported_job``; an empty ``job``
then leaves the series without one.

Everything is built from plain data handed over by the service (``ServiceSnapshot``, NVML
``Sample`` objects, who holds which GPU), so the exporter never reaches into the service.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from labhive.scheduler.core.model import NodeView, VCView
from labhive.scheduler.core.states import STORED, JobState
from labhive.scheduler.observe.nvml import GpuReading, Sample

__all__ = [
    "CONTENT_TYPE_LATEST",
    "DCGM_FIELDS",
    "DECISION_BUCKETS",
    "JOB_STATES",
    "WAIT_BUCKETS",
    "HistogramData",
    "Owner",
    "RunningHistogram",
    "ServiceSnapshot",
    "render",
]

#: OpenPAI's job states, as the service stores them.
JOB_STATES = STORED
#: Queue waits span seconds (an idle lab) to days (a busy department): seconds.
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)
#: One policy decision should take well under a millisecond; the tail matters.
DECISION_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)

#: (dcgm-exporter metric, Prometheus type, help, ``GpuReading`` attribute). Names, types and
#: units are those of dcgm-exporter's ``default-counters.csv`` (the ECC ones are in its file,
#: commented out; LabHive exports them because node health depends on them).
DCGM_FIELDS: tuple[tuple[str, str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "sm_clock_mhz"),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "mem_clock_mhz"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temperature_c"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power_w"),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "Enforced power limit (in W).", "power_limit_w"),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since the driver loaded (in mJ).",
        "energy_mj",
    ),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "gpu_util"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory copy utilization (in %).", "mem_copy_util"),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "fb_free_mib"),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "fb_used_mib"),
    (
        "DCGM_FI_DEV_FB_RESERVED",
        "gauge",
        "Framebuffer memory reserved by the driver (in MiB).",
        "fb_reserved_mib",
    ),
    ("DCGM_FI_DEV_FAN_SPEED", "gauge", "Fan speed (in %).", "fan_speed_pct"),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error seen (0: none).", "last_xid"),
    (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Single-bit ECC errors since the driver loaded.",
        "ecc_sbe_volatile",
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Double-bit ECC errors since the driver loaded.",
        "ecc_dbe_volatile",
    ),
    (
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "counter",
        "Single-bit ECC errors over the GPU's life.",
        "ecc_sbe_aggregate",
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "Double-bit ECC errors over the GPU's life.",
        "ecc_dbe_aggregate",
    ),
)

BASE_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")
OWNER_LABELS = ("job", "vc", "user")


@dataclass(frozen=True, slots=True)
class Owner:
    """The LabHive job (and its VC and user) holding a GPU or running a process."""

    job: str
    vc: str = ""
    user: str = ""


NOBODY = Owner("")


@dataclass(frozen=True, slots=True)
class HistogramData:
    """A histogram as plain data: ``counts[i]`` values fell at or under ``bounds[i]`` and over
    the bound before; the last count is above every bound."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total: float = 0.0

    @classmethod
    def of(cls, values: Iterable[float], bounds: Sequence[float]) -> HistogramData:
        counts = [0] * (len(bounds) + 1)
        total = 0.0
        for v in values:
            counts[bisect.bisect_left(bounds, v)] += 1
            total += v
        return cls(tuple(bounds), tuple(counts), total)

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*self.bounds, math.inf), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == math.inf else repr(float(bound)), running))
        return out


class RunningHistogram:
    """A histogram the service feeds one observation at a time (decision latency)."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = tuple(bounds)
        self._counts = [0] * (len(bounds) + 1)
        self._total = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self._lock:
            self._counts[bisect.bisect_left(self._bounds, value)] += 1
            self._total += value

    def snapshot(self) -> HistogramData:
        with self._lock:
            return HistogramData(self._bounds, tuple(self._counts), self._total)


@dataclass(frozen=True)
class ServiceSnapshot:
    """What the service knows, handed to the exporter at scrape time. Counters are totals since
    the store began (the service counts them from its events), so restarts do not reset them."""

    vcs: Sequence[VCView] = ()
    nodes: Sequence[NodeView[Any]] = ()  # whatever names its jobs (only counted)
    jobs: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (vc, state) -> jobs
    oldest_wait_s: Mapping[str, float] = field(default_factory=dict)  # vc -> longest waiting
    queue_wait: Mapping[str, HistogramData] = field(default_factory=dict)  # vc -> started waits
    submissions: Mapping[str, int] = field(default_factory=dict)  # vc -> total
    preemptions: Mapping[str, int] = field(default_factory=dict)  # vc -> total
    retries: Mapping[str, int] = field(default_factory=dict)  # vc -> total
    failures: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (vc, reason) -> n
    decision_latency: HistogramData | None = None
    virtual: bool = False
    loop_age_s: float | None = None  # seconds since the scheduler loop's last good pass


# ---- GPU series in dcgm-exporter's text shape ----------------------------------------------


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)


def _number(value: float) -> str:
    if isinstance(value, bool):
        return str(int(value))
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _gpu_labels(sample: Sample, gpu: GpuReading, owner: Owner) -> list[tuple[str, str]]:
    return [
        ("gpu", str(gpu.index)),
        ("UUID", gpu.uuid or ""),
        ("pci_bus_id", gpu.pci_bus_id or ""),
        ("device", gpu.device),
        ("modelName", gpu.name or ""),
        ("Hostname", sample.hostname),
        ("job", owner.job),
        ("vc", owner.vc),
        ("user", owner.user),
    ]


def _family(name: str, kind: str, help_text: str, lines: list[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *lines] if lines else []


def _gpu_text(
    samples: Sequence[Sample],
    gpu_owners: Mapping[tuple[str, int], Owner],
    process_owners: Mapping[int, Owner],
) -> list[str]:
    """dcgm-exporter's own shape, written directly: its counters carry no ``_total`` suffix,
    which prometheus_client's writer would add."""
    rows = [
        (s, g, _labels(_gpu_labels(s, g, gpu_owners.get((s.hostname, g.index), NOBODY))))
        for s in samples
        for g in s.gpus
    ]
    out: list[str] = []
    for name, kind, help_text, attr in DCGM_FIELDS:
        lines = [
            f"{name}{{{labels}}} {_number(value)}"
            for _, g, labels in rows
            if (value := getattr(g, attr)) is not None
        ]
        out += _family(name, kind, help_text, lines)
    out += _family(
        "labhive_gpu_lost",
        "gauge",
        "1 when NVML reports the GPU lost (fallen off the bus, needs a reset).",
        [f"labhive_gpu_lost{{{labels}}} {int(g.lost)}" for _, g, labels in rows],
    )
    out += _family(
        "labhive_gpu_xid_errors_total",
        "counter",
        "XID events the GPU reported since the sampler started (the last code: "
        "DCGM_FI_DEV_XID_ERRORS).",
        [f"labhive_gpu_xid_errors_total{{{labels}}} {g.xid_count}" for _, g, labels in rows],
    )
    proc_mem, proc_sm = [], []
    for s, g, _ in rows:
        for p in g.processes:
            owner = process_owners.get(p.pid, NOBODY)
            labels = _labels(
                [
                    ("gpu", str(g.index)),
                    ("UUID", g.uuid or ""),
                    ("Hostname", s.hostname),
                    ("pid", str(p.pid)),
                    *zip(OWNER_LABELS, (owner.job, owner.vc, owner.user), strict=True),
                ]
            )
            if p.used_mib is not None:
                proc_mem.append(
                    f"labhive_gpu_process_memory_used_mib{{{labels}}} {_number(p.used_mib)}"
                )
            if p.sm_util is not None:
                proc_sm.append(f"labhive_gpu_process_sm_util{{{labels}}} {p.sm_util}")
    out += _family(
        "labhive_gpu_process_memory_used_mib",
        "gauge",
        "GPU memory held by one process (in MiB), with the LabHive job that started it.",
        proc_mem,
    )
    out += _family(
        "labhive_gpu_process_sm_util",
        "gauge",
        "SM utilization of one process over NVML's last sample period (in %).",
        proc_sm,
    )
    return out


# ---- LabHive's own metrics -----------------------------------------------------------------


def _vc_names(s: ServiceSnapshot) -> list[str]:
    names = {v.name for v in s.vcs} | {vc for vc, _ in s.jobs} | set(s.queue_wait)
    return sorted(names)


def _job_families(s: ServiceSnapshot, vcs: list[str]) -> Iterator[Metric]:
    jobs = GaugeMetricFamily("labhive_jobs", "Jobs by state and VC.", labels=["vc", "state"])
    queue = GaugeMetricFamily("labhive_queue_length", "Jobs waiting, per VC.", labels=["vc"])
    for vc in vcs:
        for state in JOB_STATES:
            jobs.add_metric([vc, state], s.jobs.get((vc, state), 0))
        queue.add_metric([vc], s.jobs.get((vc, JobState.WAITING), 0))
    yield jobs
    yield queue
    oldest = GaugeMetricFamily(
        "labhive_queue_oldest_wait_seconds",
        "How long the longest-waiting job of the VC has waited (0: none waiting).",
        labels=["vc"],
    )
    for vc in vcs:
        oldest.add_metric([vc], s.oldest_wait_s.get(vc, 0.0))
    yield oldest
    waits = HistogramMetricFamily(
        "labhive_queue_wait_seconds",
        "Time from submission (or requeue) to start, of attempts that started, per VC.",
        labels=["vc"],
    )
    for vc in vcs:
        h = s.queue_wait.get(vc) or HistogramData.of((), WAIT_BUCKETS)
        waits.add_metric([vc], h.cumulative(), sum_value=h.total)
    yield waits


def _counter_families(s: ServiceSnapshot, vcs: list[str]) -> Iterator[Metric]:
    for name, help_text, values in (
        ("labhive_submissions", "Jobs accepted, per VC.", s.submissions),
        ("labhive_preemptions", "Job attempts preempted, per VC of the victim.", s.preemptions),
        ("labhive_job_retries", "Failed attempts sent back to the queue, per VC.", s.retries),
    ):
        family = CounterMetricFamily(name, help_text, labels=["vc"])
        for vc in vcs:
            family.add_metric([vc], values.get(vc, 0))
        yield family
    failures = CounterMetricFamily(
        "labhive_job_failures",
        "Failed attempts by VC and reason (oom_killed: killed for memory).",
        labels=["vc", "reason"],
    )
    for (vc, reason), n in sorted(s.failures.items()):
        failures.add_metric([vc, reason], n)
    yield failures


def _gpu_families(s: ServiceSnapshot) -> Iterator[Metric]:
    quota = GaugeMetricFamily(
        "labhive_vc_guaranteed_gpus", "GPUs guaranteed to the VC.", labels=["vc"]
    )
    gpus = GaugeMetricFamily(
        "labhive_vc_gpus",
        "GPUs per VC: allocated to its guaranteed jobs, idle in its quota, or held by its "
        "opportunistic jobs.",
        labels=["vc", "state"],
    )
    for v in sorted(s.vcs, key=lambda v: v.name):
        quota.add_metric([v.name], v.guaranteed_gpus)
        gpus.add_metric([v.name, "allocated"], v.used_gpus)
        gpus.add_metric([v.name, "idle"], max(v.guaranteed_gpus - v.used_gpus, 0))
        gpus.add_metric([v.name, "opportunistic"], v.opportunistic_gpus)
    yield quota
    yield gpus
    healthy = GaugeMetricFamily(
        "labhive_node_healthy",
        "1 while the node takes jobs; 0 with the reason it was taken out.",
        labels=["node", "reason"],
    )
    node_gpus = GaugeMetricFamily(
        "labhive_node_gpus", "GPUs of the node, used or free.", labels=["node", "state"]
    )
    totals = {"allocated": 0, "idle": 0, "unhealthy": 0}
    for n in sorted(s.nodes, key=lambda n: n.name):
        healthy.add_metric([n.name, n.reason], int(n.healthy))
        node_gpus.add_metric([n.name, "used"], len(n.used))
        node_gpus.add_metric([n.name, "free"], len(n.gpus) - len(n.used))
        totals["allocated"] += len(n.used)
        totals["idle" if n.healthy else "unhealthy"] += len(n.gpus) - len(n.used)
    yield healthy
    yield node_gpus
    cluster = GaugeMetricFamily(
        "labhive_gpus",
        "The cluster's GPUs: allocated to jobs, idle, or free on an unhealthy node.",
        labels=["state"],
    )
    for state, count in totals.items():
        cluster.add_metric([state], count)
    yield cluster
    yield GaugeMetricFamily(
        "labhive_cluster_virtual",
        "1 when the cluster's GPUs are virtual slots (no NVIDIA driver): no GPU readings exist.",
        value=int(s.virtual),
    )


class _SnapshotCollector:
    def __init__(self, snapshot: ServiceSnapshot) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        s = self.snapshot
        vcs = _vc_names(s)
        yield from _job_families(s, vcs)
        yield from _counter_families(s, vcs)
        yield from _gpu_families(s)
        latency = HistogramMetricFamily(
            "labhive_scheduling_decision_seconds",
            "Time the policy took to handle one event and return its decisions.",
        )
        h = s.decision_latency or HistogramData.of((), DECISION_BUCKETS)
        latency.add_metric([], h.cumulative(), sum_value=h.total)
        yield latency
        if s.loop_age_s is not None:
            yield GaugeMetricFamily(
                "labhive_loop_last_pass_age_seconds",
                "Seconds since the scheduler loop last completed a pass; it grows while the "
                "loop fails (database down, executor broken) and backs off.",
                value=s.loop_age_s,
            )


def render(
    snapshot: ServiceSnapshot | None = None,
    samples: Sequence[Sample] = (),
    gpu_owners: Mapping[tuple[str, int], Owner] | None = None,
    process_owners: Mapping[int, Owner] | None = None,
) -> str:
    """The whole ``/metrics`` body: GPU series first (as dcgm-exporter orders them), then
    LabHive's. ``gpu_owners`` maps (hostname, GPU index) to the job holding it;
    ``process_owners`` maps a GPU process's pid to its job (see ``observe.owners``)."""
    text = _gpu_text(samples, gpu_owners or {}, process_owners or {})
    body = "\n".join(text) + ("\n" if text else "")
    if snapshot is not None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_SnapshotCollector(snapshot))
        body += generate_latest(registry).decode()
    return body
