"""Nodes out of service: those an admin took down (stored marks) and those health reports
down, and the node events queued for the loop's next pass.

An admin's mark wins over health: a node an admin holds down stays down whatever health says,
and lifting the mark does not bring back a node health still reports broken. Both are
remembered here so a policy rebuilt from the store learns them again (``restore``).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from labhive.scheduler.core.model import NodeDown, NodeUp
from labhive.scheduler.service.policy_port import ServiceEvent
from labhive.scheduler.service.runtime import record
from labhive.scheduler.service.runtime.runs import drain
from labhive.scheduler.service.store import Store
from labhive.scheduler.service.store.marks import MarkRow

log = logging.getLogger("labhive.service.loop")
E = TypeVar("E", bound=ServiceEvent)


class Nodes:
    """Node marks and health, and the node events for the next pass (any thread queues)."""

    def __init__(self, store: Store, clock: Callable[[], float], wake: threading.Event) -> None:
        self._store = store
        self._clock = clock
        self._wake = wake
        self._events: deque[ServiceEvent] = deque()
        self.held: dict[str, str] = {}  # nodes an admin took down -> why (see take_down)
        #: Nodes health reports down -> why, whatever admins say (kept so a rebuilt policy
        #: learns them again).
        self.health_down: dict[str, str] = {}

    def inject(self, events_in: list[ServiceEvent]) -> None:
        """Events from outside the job lifecycle (``NodeDown``/``NodeUp`` from GPU health)."""
        self._events.extend(self.health(events_in))
        self._wake.set()

    def health(self, events_in: list[ServiceEvent]) -> list[ServiceEvent]:
        """Node health as reported (GPU health, Kubernetes readiness), less what concerns nodes
        an admin holds down (they stay down, for the admin's reason); remembers which nodes
        health itself holds down."""
        out: list[ServiceEvent] = []
        for e in events_in:
            if isinstance(e, NodeDown):
                self.health_down[e.node] = e.reason
            elif isinstance(e, NodeUp):
                self.health_down.pop(e.node, None)
            if not (isinstance(e, NodeDown | NodeUp) and e.node in self.held):
                out.append(e)
        return out

    def take_down(self, node: str, reason: str, by: str) -> NodeDown:
        """An admin takes ``node`` out of service: its jobs are stopped and requeued, nothing
        starts there until ``bring_up``, and the mark is stored so a restart keeps it."""
        record.mark_down(self._store, node, reason, by, self._clock())
        self.held[node] = why_down(by, reason)
        return self._queue(NodeDown(node, self._clock(), self.held[node]))

    def bring_up(self, node: str) -> NodeUp | NodeDown:
        """Lift an admin's mark; the node takes work again unless health still holds it down
        (a broken GPU is not put back in service by hand)."""
        record.unmark(self._store, node)
        self.held.pop(node, None)
        broken = self.health_down.get(node)  # then it stays down, for health's reason
        if broken is None:
            return self._queue(NodeUp(node, self._clock()))
        return self._queue(NodeDown(node, self._clock(), broken))

    def _queue(self, event: E) -> E:
        """An admin's node event, past the health filter; returned so the caller can wait for
        the cluster view to show it."""
        self._events.append(event)
        self._wake.set()
        return event

    def take_events(self) -> list[ServiceEvent]:
        """(The loop.) The node events queued since the last pass."""
        return drain(self._events)

    def down(self) -> dict[str, str]:
        """Every node out of service -> why."""
        return {**self.health_down, **self.held}

    def restore(self, marks: list[MarkRow], in_cluster: set[str], t: float) -> list[ServiceEvent]:
        """What a rebuilt policy must learn again: nodes an admin marked (stored) and nodes
        health holds down (remembered), as ``NodeDown`` events. They follow the adopts, so a
        job adopted on such a node (a kill between the mark and its pass) is stopped there."""
        self.held = {}
        for mark in marks:
            if mark["node"] not in in_cluster:
                log.warning("node %r is marked down but not in the cluster: ignored", mark["node"])
                continue
            self.held[mark["node"]] = why_down(mark["marked_by"], mark["reason"])
        down = {n: why for n, why in self.health_down.items() if n in in_cluster} | self.held
        return [NodeDown(node, t, why) for node, why in down.items()]


def why_down(by: str, reason: str) -> str:
    return f"taken down by {by}" + (f": {reason}" if reason else "")
