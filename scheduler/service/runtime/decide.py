"""The policy's part of a pass: each event in, its decisions out, in order (the caller holds
the loop's lock on the policy)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from labhive.scheduler.core.model import (
    Adopt,
    Cancel,
    Finish,
    Preempt,
    Requeue,
    SpecRejected,
    Start,
    Stop,
)
from labhive.scheduler.service.policy_port import PolicyPort, ServiceDecision, ServiceEvent
from labhive.scheduler.service.runtime.observers import PassObserver
from labhive.scheduler.service.runtime.plan import Plan
from labhive.scheduler.service.runtime.runs import Runs

#: Every event the policy is given and what it decided, at DEBUG (``--log-level debug``).
decisions_log = logging.getLogger("labhive.service.decisions")


def decide(
    policy: PolicyPort,
    events_in: list[ServiceEvent],
    runs: Runs,
    plan: Plan,
    observers: Sequence[PassObserver],
) -> tuple[list[ServiceDecision], list[tuple[int, str]]]:
    """The decisions, and the adopted jobs the policy refused (job, why): their cells are
    gone or taken (the cluster changed while the service was down)."""
    decisions: list[ServiceDecision] = []
    refused: list[tuple[int, str]] = []
    displaced: set[int] = set()  # jobs this batch already sent back to waiting
    for ev in events_in:
        if isinstance(ev, Requeue) and ev.job_id in displaced:
            continue  # already waiting in the policy
        if isinstance(ev, Finish) and ev.job_id in displaced:
            ev = Cancel(ev.job_id, ev.time)  # done after all: leave the queue
        if isinstance(ev, Requeue | Finish | Cancel):
            # A start decided for the attempt now ending (an incremental job's next
            # task, placed on another event's freed GPUs) never happens, whether this
            # batch decided it or an earlier one held it back for draining GPUs: the
            # policy frees its cells with the attempt, and may place the job anew.
            # (A held one left behind was recorded onto the next attempt beside the
            # policy's new placement: a GPU taken twice, found with per-task stops.)
            decisions = [
                d for d in decisions if not (isinstance(d, Start) and d.job_id == ev.job_id)
            ]
            runs.reserved.drop(ev.job_id)
        began = time.perf_counter()
        try:
            out = policy.handle(ev)
            if decisions_log.isEnabledFor(logging.DEBUG):  # --log-level debug
                decisions_log.debug("%r -> %r", ev, out)
            for observer in observers:
                observer.decided(time.perf_counter() - began)
            decisions.extend(out)
            plan.journal.append((ev, out))
            displaced.update(d.job_id for d in out if isinstance(d, Preempt | Stop))
        except SpecRejected as err:  # the cluster changed under a stored job
            plan.journal.append((ev, f"SpecRejected: {err}"))
            job_id = ev.job_id  # type: ignore[union-attr]
            plan.rejected.append((job_id, str(err)))
            runs.forget(job_id)
        except ValueError as err:
            if not isinstance(ev, Adopt):
                raise
            plan.journal.append((ev, f"ValueError: {err}"))
            refused.append((ev.job_id, str(err)))
    return decisions, refused
