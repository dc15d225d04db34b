"""HiveD's scheduling algorithm as a pure state machine: one event in, decisions out.

What it keeps: the physical cells and who uses them (``cells``), each VC's quota and its lazy
bindings (``vc``), the waiting jobs (``queue``). What it decides, after every event: which
waiting jobs start where (``placement``), whom they preempt (strictly lower priority only,
opportunistic jobs first), whom they merely downgrade (lazy preemption), and which jobs a node
failure stopped. A search that fails leaves a small record of why (``failures``); why-texts are
formatted from it only when someone asks (``job()``, ``jobs()``).

This module is the front door: events are dispatched here to the parts that handle them. The
class queue and its pass (``self.queue``), whose turn it is inside a VC (``self.turns``: fair
share, caps, the reservation), what a job asks for (``self.sizing``), the search for a job's
cells (``self.attempt``, with ``self.failures``, the record of why a search failed), node
health (``self.health``), adoption (``self.adoption``), preemption (``self.preemption``) and GPU
shares (``self.shares``: who shares which GPU, the pass of waiting shares) are parts the
scheduler holds, each with its own state, over the shared state of ``base`` (issue 32: no mixin
is left). Admission and the views are here too.
"""

from __future__ import annotations

from typing import Any

from labhive.scheduler.core.config import ClusterConfig
from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import (
    Adopt,
    ClusterView,
    Decision,
    Event,
    JobView,
    SpecRejected,
    Submit,
    VCView,
)
from labhive.scheduler.hived.admission import reject_if_never_runs
from labhive.scheduler.hived.adopt import Adoption, AdoptRefused
from labhive.scheduler.hived.attempt import Attempt
from labhive.scheduler.hived.base import HivedBase
from labhive.scheduler.hived.cells import Cell
from labhive.scheduler.hived.failures import Failures
from labhive.scheduler.hived.fair_line import FairLine
from labhive.scheduler.hived.health import NodeHealth
from labhive.scheduler.hived.job import Job, leaves_needed
from labhive.scheduler.hived.preempt import Preemption
from labhive.scheduler.hived.queueing import ClassQueue
from labhive.scheduler.hived.shares import Shares
from labhive.scheduler.hived.shortfall import Failure
from labhive.scheduler.hived.turns import Turns
from labhive.scheduler.hived.views import free_list, job_view, node_views, vc_cells, vc_views
from labhive.scheduler.policies.policy_base import PolicyBase, listing_order

__all__ = ["AdoptRefused", "HivedScheduler", "Job", "leaves_needed"]

_UNCHECKED = object()  # ``check``'s cache has no answer for a key yet


class HivedScheduler(HivedBase, PolicyBase[Job]):
    """HiveD's algorithm behind ``model.Scheduler``."""

    name = "hived"
    #: HiveD's unit of preemption, lazy preemption and node failure: a task of an incremental
    #: job, an affinity group of a job of several, else the job. A driver that can stop only
    #: whole jobs turns this off and every such decision stops or downgrades the whole job.
    partial_stops = True
    #: The parts as this class makes them (``base`` knows them by ``parts``' protocols).
    queue: ClassQueue
    turns: Turns
    shares: Shares

    def __init__(self, config: ClusterConfig) -> None:
        self._jobs = {}
        self._seq = 0
        self._oppo_epoch = 0
        self._dirty_vcs = {}
        self._dirty_oppo = False
        self._tick = 0
        self._ledger = None
        #: GPU shares: who shares which GPU and the pass of waiting shares (made anew per
        #: config by ``_load``, the waiting shares kept).
        self.shares = Shares(self)
        #: Whose turn it is inside a VC: fair share, per-user caps, the reservation.
        self.turns = Turns(self)
        #: The waiting jobs, their classes, and the scheduling pass that starts them.
        self.queue = ClassQueue(self, self.turns)
        #: Which nodes are down, and what a NodeDown or NodeUp changes (a part of its own).
        self.health = NodeHealth(self)
        #: Running jobs put back on exactly their cells (``Adopt``, ``Reconfigure``).
        self.adoption = Adoption(self)
        #: A plan carried out: victims preempted or downgraded, the job started.
        self.preemption = Preemption(self)
        #: Why a search for a job's cells failed: built when one fails, kept by its class.
        self.failures = Failures(self)
        #: The search for a job's cells, unit by unit, each plan carried out at once.
        self.attempt = Attempt(self, self.preemption.commit, self.failures)
        self._load(config)

    # ---- admission ---------------------------------------------------------------------------

    def check(self, spec: JobSpec) -> None:
        """Refuse a job that can never run here, saying what would fit."""
        if spec is self._passed:
            return  # drivers check a spec, then submit it: the second check is free
        key = (spec.vc, spec.priority, spec.gang, spec.roles)
        message = self._checked.get(key, _UNCHECKED)
        if message is _UNCHECKED:
            try:
                reject_if_never_runs(self.admission, spec)
                message = None
            except SpecRejected as err:
                message = str(err)
            self._checked[key] = message
        if message is not None:
            raise SpecRejected(message)
        # Specs are frozen, so the same object passes again until the cluster changes
        # (``_load`` forgets it).
        self._passed = spec

    # ---- events ------------------------------------------------------------------------------

    def handle(self, event: Event) -> list[Decision]:
        out: list[Decision] = []
        if self._ledger is not None:  # fair share or per-user caps (``turns``)
            ledger, turns = self._ledger, self.turns
            turns.out, turns.counted = out, 0
            if type(event) is Submit:  # (``before_event`` of the usual event, inline)
                if event.time > ledger.now:
                    ledger.advance(event.time)
                if turns.fair_lines:
                    turns.fair_lines = {}
            else:
                turns.before_event(event)
        self._apply(event, out)
        if self._ledger is not None:  # (a Reconfigure may have turned it on or off)
            ledger, turns = self._ledger, self.turns
            if turns.out is not out:  # a Reconfigure turned them on
                turns.out, turns.counted = out, 0
                ledger.advance(event.time)
            if type(event) is Submit:  # the new job waits from now (unless it was refused)
                if event.job_id in self._jobs:
                    ledger.waiting_since[event.job_id] = ledger.now
            elif type(event) is Adopt:
                turns.after_event(event)
        if isinstance(event, Adopt):
            # An adopt places nothing new: a driver restores every running job before any
            # decision (a partly stopped job's waiting tasks must not take another's GPUs),
            # then sends a Tick, after which a pass places what waits (as queue policies do).
            return out
        self.queue.schedule(out)
        if self.queue.cpu_waiting:
            self.queue.schedule_cpu(out)
        if self.shares.book.waiting:
            self.shares.schedule(out)
        if self._ledger is not None and self.turns.counted != len(out):
            self.turns.count_decisions()
        return out

    def _node_health(self, node: str, healthy: bool, out: list[Decision], reason: str) -> None:
        self.health.change(node, healthy, out, reason)

    def _reconfigure(self, config: ClusterConfig, out: list[Decision]) -> None:
        self.adoption.reconfigure(config, out)

    def _adopt(self, event: Adopt, out: list[Decision]) -> None:
        self.adoption.adopt(event, out)

    def failure_of(self, job: Job) -> Failure:
        """Why ``job`` waits (``failures.Failures.failure_of``), for the why-texts (``why``)."""
        return self.failures.failure_of(job)

    def fair_line(self, vc: str) -> FairLine:
        """The VC's line under fair share (``turns.Turns.fair_line``), for the standings."""
        return self.turns.fair_line(vc)

    def fair_position(self, job: Job) -> int:
        """The job's place in its VC's line under fair share (``turns``), for the views."""
        return self.turns.fair_position(job)

    def wait_key(self, job: Job) -> tuple[int, float, int, str]:
        """``jobs()``'s order of waiting jobs (``turns.Turns.wait_key``)."""
        return self.turns.wait_key(job)

    @property
    def down_reasons(self) -> dict[str, str]:
        """Node -> the reason its ``NodeDown`` gave, while it is down (``health``)."""
        return self.health.down_reasons

    def _submit(self, job_id: str, spec: JobSpec, *, admitted: bool = False) -> None:
        if job_id in self._jobs:
            raise ValueError(f"job {job_id} was submitted twice")
        if not admitted:
            self.check(spec)
        self.queue.arrive(self._new_job(job_id, spec))

    def _remove(self, job_id: str) -> None:
        job = self._jobs.pop(job_id, None)
        if job is None:
            return
        self.queue.dequeue(job)
        self._vacate_job(job, forget=True)

    def _tasks_ended(
        self, job_id: str, tasks: tuple[tuple[str, int], ...], out: list[Decision]
    ) -> None:
        """Tasks that exited while the job's attempt goes on free their cells, as HiveD frees
        a completed pod's; they are done and are not placed again in this attempt."""
        job = self._jobs.get(job_id)
        if job is None:
            return
        keys = {k for k in tasks if k in job.placed}
        touched: set[Cell] = set()
        self._stop_tasks(job, keys, touched)
        job.done.update(keys)
        self._settle(touched)

    def _requeue(self, job_id: str) -> None:
        job = self._jobs.get(job_id)
        if job is None:
            return
        self._vacate_job(job)
        self.queue.enqueue(job)

    # ---- views -------------------------------------------------------------------------------

    def job(self, job_id: str) -> JobView | None:
        job = self._jobs.get(job_id)
        return None if job is None else self._view(job)

    def jobs(self) -> list[JobView]:
        listed = listing_order(
            (j for j in self._jobs.values() if j.placed),
            (j for j in self._jobs.values() if not j.placed),
            seq=lambda j: j.seq,
            wait_key=self.wait_key,
        )
        return [self._view(j) for j in listed]

    def _view(self, job: Job) -> JobView:
        return job_view(self, job)

    def cluster(self) -> ClusterView:
        return ClusterView(node_views(self), self.vc_views(), self.config.virtual)

    def vc_views(self) -> dict[str, VCView]:
        return vc_views(self)

    def cells(self) -> dict[str, Any]:
        """Bindings and free cells, for replay's JSON (``views.vc_cells``, ``free_list``)."""
        return {"vcs": vc_cells(self), "free_list": free_list(self)}

    def next_wakeup(self) -> float | None:
        return None
