"""What an executor that asks its cluster about nodes (Slurm's ``sinfo``, Kubernetes' Node
objects) last found wrong with each, and the events a new finding makes.

Both executors poll and reach a verdict per node (a problem in words, or None when it is fine);
the scheduler wants only the changes: ``NodeDown`` when a node turns bad, or is bad the first
time it is seen, ``NodeUp`` when a bad node is fine again. A bad node whose problem is reworded
(drained, then down) stays down without a second event.
"""

from __future__ import annotations

from labhive.scheduler.core.model import NodeDown, NodeUp


class NodeWatch:
    """The last verdict on each node an executor polled; not thread-safe (the caller holds its
    lock where other threads read ``problem``)."""

    def __init__(self) -> None:
        #: Node -> what was wrong with it at the last poll (None: fine, or never seen bad).
        self._problems: dict[str, str | None] = {}

    def saw(self, node: str, problem: str | None, t: float) -> NodeDown | NodeUp | None:
        """Take this poll's verdict on ``node``: the event it makes, if any."""
        was_bad = self._problems.get(node) is not None
        self._problems[node] = problem
        if problem and not was_bad:
            return NodeDown(node, t, problem)
        if not problem and was_bad:
            return NodeUp(node, t)
        return None

    def problem(self, node: str) -> str | None:
        """What was wrong with ``node`` at the last poll (None: fine, or never polled)."""
        return self._problems.get(node)
