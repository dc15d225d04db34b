"""``labhive explain JOB``: why a job waited, from the journal.

The journal is replayed (as the twin check does) and, after every step while the job waits, the
policy is asked what the live service would have shown: the job's why-text (``JobView.why``, the
same words ``labhive show`` printed then) and which jobs held GPUs, on which nodes. Consecutive
steps that say the same are one span. What it names as holders is every job on a GPU while the
job waited (the cluster's view), not only those on the cells the job could use.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from labhive.scheduler.core.model import Adopt, Cancel, Finish, Submit
from labhive.scheduler.service.journal.table import Pass
from labhive.scheduler.service.journal.twin import PolicyMaker, step_of
from labhive.scheduler.service.policy_port import PolicyPort

WAITING = "WAITING"


@dataclass
class Span:
    """A stretch of the job's wait over which the policy said the same."""

    begin: float
    end: float
    why: str
    holders: dict[int, tuple[str, ...]]  # job -> nodes


@dataclass
class Explained:
    job_id: int
    spans: list[Span] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)  # job -> "name (user, vc)"
    submitted: float | None = None
    started: float | None = None  # its (last) start, if it started
    ended: float | None = None
    waiting: bool = False  # (while walking) the job waited after the last step

    def text(self) -> str:
        if self.submitted is None:
            return f"job {self.job_id} is not in the journal (pruned, or never submitted)"
        lines = [f"job {self.job_id} {self.names.get(self.job_id, '')}".rstrip()]
        lines.append(f"  submitted {_at(self.submitted)}")
        for s in self.spans:
            held = ", ".join(
                f"job {j} {self.names.get(j, '')} on {'/'.join(nodes)}".replace("  ", " ")
                for j, nodes in sorted(s.holders.items())
            )
            lines.append(
                f"  {_at(s.begin)} .. {_at(s.end)} ({s.end - s.begin:.0f} s) waited: {s.why}"
            )
            lines.append(f"      GPUs held by: {held or 'nobody'}")
        if self.started is not None:
            lines.append(f"  started {_at(self.started)}")
        if self.ended is not None:
            lines.append(f"  left the policy {_at(self.ended)}")
        return "\n".join(lines)


def _at(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _name(event: Any) -> str:
    spec = event.spec
    return f"{spec.name} ({spec.user or '?'}, {spec.vc})"


def explain(passes: Iterable[Pass], make: PolicyMaker, job_id: int) -> Explained:
    out = Explained(job_id)
    port: PolicyPort | None = None
    for p in passes:
        if p.fresh:
            port = PolicyPort(make(p.policy or {}))
        if port is None:
            continue
        for event, _recorded in p.steps:
            decided = step_of(port, event)
            t = float(getattr(event, "time", p.t))
            if isinstance(event, Submit | Adopt):
                out.names[event.job_id] = _name(event)
                if event.job_id == job_id and out.submitted is None:
                    out.submitted = t
            if isinstance(decided, list) and any(
                getattr(d, "job_id", None) == job_id and type(d).__name__ == "Start"
                for d in decided
            ):
                out.started = t
            if isinstance(event, Finish | Cancel) and event.job_id == job_id:
                out.ended = t
            if out.submitted is not None:
                _note(out, port, job_id, t)
        if out.ended is not None:
            break
    return out


def _note(out: Explained, port: PolicyPort, job_id: int, t: float) -> None:
    """After a step at ``t``: the open span runs until now; a new one opens when what the
    policy says of the waiting job (its why, the GPUs' holders) changed."""
    if out.waiting and out.spans:
        out.spans[-1].end = t
    view = port.job(job_id)
    out.waiting = view is not None and view.state == WAITING
    if view is None or not out.waiting:
        return
    holders: dict[int, set[str]] = {}
    for node in port.cluster().nodes:
        for holder in node.used.values():
            holders.setdefault(holder, set()).add(node.name)
    held = {j: tuple(sorted(n)) for j, n in holders.items()}
    why = view.why or "waiting"
    last = out.spans[-1] if out.spans else None
    if last is None or last.end != t or (last.why, last.holders) != (why, held):
        out.spans.append(Span(t, t, why, held))
