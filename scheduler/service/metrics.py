"""``GET /metrics``: LabHive's own job and queue metrics in Prometheus' text format.

``collect`` yields every metric family; the GPU exporter (NVML, dcgm-exporter names) extends
the page by appending a collector function to ``COLLECTORS``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from sqlalchemy import func, select

from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.store import events, jobs

if TYPE_CHECKING:
    from labhive.scheduler.service.app import Service

CONTENT_TYPE = CONTENT_TYPE_LATEST


def jobs_metrics(svc: Service) -> Iterable[Metric]:
    """Jobs by state and VC, queue length and oldest wait per VC, preemptions."""
    now = time.time()
    with svc.store.read() as conn:
        by_state = conn.execute(
            select(jobs.c.state, jobs.c.vc, func.count()).group_by(jobs.c.state, jobs.c.vc)
        ).all()
        oldest = conn.execute(
            select(jobs.c.vc, func.min(jobs.c.submitted_at))
            .where(jobs.c.state == lc.WAITING)
            .group_by(jobs.c.vc)
        ).all()
        preemptions = conn.execute(
            select(func.count()).select_from(events).where(events.c.reason == "preempted")
        ).scalar_one()
    family = GaugeMetricFamily("labhive_jobs", "Jobs by state and VC", labels=["state", "vc"])
    for state, vc, count in by_state:
        family.add_metric([state, vc], count)
    yield family
    wait = GaugeMetricFamily(
        "labhive_queue_oldest_wait_seconds", "Wait of the oldest waiting job", labels=["vc"]
    )
    for vc, submitted in oldest:
        wait.add_metric([vc], max(0.0, now - submitted))
    yield wait
    counter = CounterMetricFamily("labhive_preemptions", "Preemptions since the store began")
    counter.add_metric([], preemptions)
    yield counter


def cluster_metrics(svc: Service) -> Iterable[Metric]:
    """Per-VC guaranteed/used/opportunistic GPUs and queue length; allocated vs idle GPUs."""
    view = svc.loop.cluster()
    gauges = {
        "guaranteed_gpus": "GPUs the VC is guaranteed",
        "used_gpus": "GPUs the VC's guaranteed jobs use",
        "opportunistic_gpus": "GPUs the VC's opportunistic jobs use",
        "waiting": "Jobs waiting in the VC's queue",
    }
    for attr, doc in gauges.items():
        name = "labhive_queue_length" if attr == "waiting" else f"labhive_vc_{attr}"
        family = GaugeMetricFamily(name, doc, labels=["vc"])
        for vc, v in view.vcs.items():
            family.add_metric([vc], getattr(v, attr))
        yield family
    total = sum(len(n.gpus) for n in view.nodes)
    used = sum(len(n.used) for n in view.nodes)
    gpus = GaugeMetricFamily("labhive_gpus", "GPUs by allocation", labels=["status"])
    gpus.add_metric(["allocated"], used)
    gpus.add_metric(["idle"], total - used)
    yield gpus


#: Every function here contributes metric families to /metrics.
COLLECTORS: list[Callable[[Any], Iterable[Metric]]] = [jobs_metrics, cluster_metrics]


class _Collector:
    def __init__(self, svc: Service) -> None:
        self.svc = svc

    def collect(self) -> Iterable[Metric]:
        for collector in COLLECTORS:
            yield from collector(self.svc)


def render(svc: Service) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(svc))  # type: ignore[arg-type]
    return generate_latest(registry).decode()
