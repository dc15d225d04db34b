"""``GET /metrics``: the service's page, rendered by its ``Monitoring`` (service/monitoring.py).

GPU series under dcgm-exporter's names and labels, then LabHive's own scheduling metrics
(jobs by state and VC, queues and waits, GPUs per VC, nodes, preemptions, retries, failures,
submissions, decision latency); see ``labhive.scheduler.observe.prometheus``.

Under fair share, an admin's scrape (``Authorization: Bearer <admin token>``) also gets each
user's decayed usage and share per VC (``standing_text``). An anonymous scrape does not: who
used how much is what ``GET /queue`` keeps from other users (docs/admin.md, the trust model).
Cardinality: one series per metric per (user, VC) counted by ``hived.standing`` (usage of at
least a GPU-second, or jobs running or waiting), at most ``MAX_USER_SERIES`` of them, the
highest usage first; the rest are summed under ``user="_others"``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from labhive.scheduler.hived.standing import UserStanding, VCStanding
from labhive.scheduler.observe.prometheus import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from labhive.scheduler.service.monitoring import Monitoring
    from labhive.scheduler.service.store import Store

CONTENT_TYPE = CONTENT_TYPE_LATEST
#: The most (user, VC) pairs exported per metric; a class of 300 in 3 VCs fits.
MAX_USER_SERIES = 1000
#: The user label of what is left over past ``MAX_USER_SERIES`` (no user name has a ``_``
#: prefix and a plural: LabHive's names are the hub's and the users file's).
OTHERS = "_others"


def render(
    monitoring: Monitoring, store: Store, standings: dict[str, VCStanding] | None = None
) -> str:
    """The page, with the ETA accuracy series and, when given (an admin's scrape under fair
    share), every user's standing; it takes what it renders, not the app, so that it needs
    nothing of the app."""
    from labhive.scheduler.service.eta import render_accuracy, render_cost, stored_accuracy

    cost = render_cost(monitoring.loop.eta)
    notices = monitoring.loop.notices.render()  # culled servers, reclaimed GPU-hours
    page = monitoring.render() + render_accuracy(stored_accuracy(store)) + cost + notices
    return page + (standing_text(standings) if standings else "")


def standing_text(standings: dict[str, VCStanding], limit: int = MAX_USER_SERIES) -> str:
    """``labhive_fair_share_usage_gpu_hours{vc,user}``, ``labhive_fair_share_share{vc,user}``
    (the user's weight over the VC's users' weights) and the half-life per VC."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StandingCollector(standings, limit))
    return generate_latest(registry).decode()


class _StandingCollector:
    def __init__(self, standings: dict[str, VCStanding], limit: int) -> None:
        self.standings, self.limit = standings, limit

    def collect(self) -> Iterator[Metric]:
        usage = GaugeMetricFamily(
            "labhive_fair_share_usage_gpu_hours",
            "A user's GPU-hours in a VC, decayed by the VC's fair-share half-life.",
            labels=["vc", "user"],
        )
        share = GaugeMetricFamily(
            "labhive_fair_share_share",
            "A user's fair-share weight over the weights of the VC's active users.",
            labels=["vc", "user"],
        )
        half_life = GaugeMetricFamily(
            "labhive_fair_share_half_life_seconds",
            "The half-life of usage in fair share, per VC.",
            labels=["vc"],
        )
        everyone = [u for v in self.standings.values() for u in v.by_user.values()]
        everyone.sort(key=lambda u: (-u.usage_gpu_s, u.vc, u.user))
        kept, rest = everyone[: self.limit], everyone[self.limit :]
        for u in sorted(kept, key=lambda u: (u.vc, u.user)):
            usage.add_metric([u.vc, u.user], round(u.usage_gpu_s / 3600, 6))
            share.add_metric([u.vc, u.user], round(u.share_of_vc, 6))
        for vc, (used, shared) in _summed(rest).items():
            usage.add_metric([vc, OTHERS], round(used / 3600, 6))
            share.add_metric([vc, OTHERS], round(shared, 6))
        for vc, standing in sorted(self.standings.items()):
            half_life.add_metric([vc], standing.half_life_s)
        yield usage
        yield share
        yield half_life


def _summed(rest: list[UserStanding]) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    for u in rest:
        used, shared = out.get(u.vc, (0.0, 0.0))
        out[u.vc] = (used + u.usage_gpu_s, shared + u.share_of_vc)
    return out
