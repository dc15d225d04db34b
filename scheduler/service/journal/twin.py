"""The twin check: the journal replayed under a config and policy must give, step by step, the
decisions the live service recorded.

Each stretch of the journal starts at a fresh pass (the service's start, or its recovery after
a failed pass), where the live loop built its policy anew and fed it ``Adopt``/``Submit`` events
from the store; the replay builds a policy there too (``PolicyMaker``, as ``labhive serve``
builds it) and feeds it the recorded events in order. The first step whose decisions (or
refusal) differ is the divergence: nondeterminism, a lost event, a recovery that rebuilt a
different policy state, or simply another config or policy than the one that ran.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from labhive.scheduler.core.model import Scheduler, SpecRejected
from labhive.scheduler.service.journal import codec
from labhive.scheduler.service.journal.table import Pass
from labhive.scheduler.service.policy_port import PolicyPort

#: A fresh policy as the live service builds it (the journal's ``policy`` record in, for the
#: way the loop stops: tasks, or whole jobs).
PolicyMaker = Callable[[dict[str, Any]], Scheduler]

#: How many steps before a divergence its report shows.
CONTEXT = 8


@dataclass(frozen=True)
class Divergence:
    """The first step the replay decided otherwise."""

    pass_id: int
    t: float
    step: int
    event: Any
    recorded: list[Any] | str
    replayed: list[Any] | str
    before: list[tuple[Any, list[Any] | str]]

    def text(self) -> str:
        lines = [
            f"DIVERGED at journal pass {self.pass_id} (t={self.t:.3f}), step {self.step}:",
            f"  event:    {codec.dumps(self.event)}",
            f"  recorded: {_show(self.recorded)}",
            f"  replayed: {_show(self.replayed)}",
            f"  the {len(self.before)} steps before it, oldest first:",
        ]
        lines += [f"    {codec.dumps(ev)} -> {_show(out)}" for ev, out in self.before]
        return "\n".join(lines)


@dataclass
class Report:
    passes: int = 0
    steps: int = 0
    decisions: int = 0
    stretches: int = 0
    seconds: float = 0.0
    divergence: Divergence | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Steps replayed per second (each step: one event, its decisions compared)."""
        return self.steps / self.seconds if self.seconds > 0 else 0.0


def _show(result: list[Any] | str) -> str:
    return f"refused ({result})" if isinstance(result, str) else codec.dumps(result)


def step_of(port: PolicyPort, event: Any) -> list[Any] | str:
    try:
        return list(port.handle(event))
    except SpecRejected as err:
        return f"SpecRejected: {err}"
    except ValueError as err:
        return f"ValueError: {err}"


def replay(passes: Iterable[Pass], make: PolicyMaker) -> Report:
    """Replay ``passes`` (from a fresh one: ``table.read``); stop at the first divergence."""
    report = Report()
    began = time.perf_counter()
    port: PolicyPort | None = None
    recent: deque[tuple[Any, list[Any] | str]] = deque(maxlen=CONTEXT)
    for p in passes:
        report.passes += 1
        if p.fresh:
            port = PolicyPort(make(p.policy or {}))
            ran = (p.policy or {}).get("name")
            if ran is not None and ran != port.scheduler.name:
                report.notes.append(
                    f"pass {p.id}: the service ran policy {ran!r}, the replay "
                    f"{port.scheduler.name!r}"
                )
            report.stretches += 1
            recent.clear()
        if port is None:  # (``read`` starts at a fresh pass)
            raise codec.JournalFormatError(f"journal pass {p.id} comes before any fresh pass")
        if p.gap is not None:
            lost = f"not recorded ({p.gap})"
            report.divergence = Divergence(p.id, p.t, 0, None, lost, "-", list(recent))
            break
        for i, (event, recorded) in enumerate(p.steps):
            got = step_of(port, event)
            report.steps += 1
            if got != recorded:
                report.divergence = Divergence(p.id, p.t, i, event, recorded, got, list(recent))
                report.seconds = time.perf_counter() - began
                return report
            report.decisions += len(got) if isinstance(got, list) else 0
            recent.append((event, recorded))
    report.seconds = time.perf_counter() - began
    return report


def policy_maker(
    cluster: str | None, policy: str, fair_share_half_life: float | None
) -> PolicyMaker:
    """Policies as ``labhive serve --cluster C --policy P --fair-share H`` builds them
    (``server.build``), stopping tasks or whole jobs as the journal says the loop did."""
    from labhive.scheduler.core.config import load_cluster_config
    from labhive.scheduler.core.detect import default_cluster
    from labhive.scheduler.policies import get_policy
    from labhive.scheduler.service.runtime.loop import whole_job_stops
    from labhive.scheduler.service.server import with_fair_share

    config = load_cluster_config(cluster) if cluster else default_cluster()
    config = with_fair_share(config, fair_share_half_life)

    def make(recorded: dict[str, Any]) -> Scheduler:
        scheduler = get_policy(policy, config)
        if recorded.get("partial_stops") is False:
            scheduler = whole_job_stops(scheduler)
        return scheduler

    return make
