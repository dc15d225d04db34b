"""``GET /metrics``: the service's page, rendered by its ``Monitoring`` (service/monitoring.py).

GPU series under dcgm-exporter's names and labels, then LabHive's own scheduling metrics
(jobs by state and VC, queues and waits, GPUs per VC, nodes, preemptions, retries, failures,
submissions, decision latency); see ``labhive.scheduler.observe.prometheus``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from labhive.scheduler.observe.prometheus import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from labhive.scheduler.service.monitoring import Monitoring
    from labhive.scheduler.service.store import Store

CONTENT_TYPE = CONTENT_TYPE_LATEST


def render(monitoring: Monitoring, store: Store) -> str:
    """The page, with the ETA accuracy series; it takes what it renders, not the app, so that it
    needs nothing of the app."""
    from labhive.scheduler.service.eta import render_accuracy, render_cost, stored_accuracy

    cost = render_cost(monitoring.loop.eta)
    notices = monitoring.loop.notices.render()  # culled servers, reclaimed GPU-hours
    return monitoring.render() + render_accuracy(stored_accuracy(store)) + cost + notices
