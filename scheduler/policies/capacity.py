"""Capacity: each VC is guaranteed its quota of GPUs, may borrow idle ones, and gets its
quota back by preemption (YARN's capacity scheduler, with VCs as queues).

A job whose VC stays within its quota with it starts as guaranteed; if the GPUs it needs are
held by other VCs' borrowed jobs, the most recently started of those are preempted until it
fits (only from VCs then using more than their quota). A job beyond its VC's quota starts
only on idle GPUs, as borrowed (shown opportunistic), and is the first to go when a VC
reclaims its share; ``borrow=false`` turns borrowing off (hard quotas). The VC using the
smallest fraction of its quota is served first; within a VC, submission order, strict unless
``backfill=true``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Iterator
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from mypy_extensions import mypyc_attr

from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import Decision, SpecRejected
from labhive.scheduler.policies.capacity_pass import CapacityPass
from labhive.scheduler.policies.queued import QueuedJob, from_config

if TYPE_CHECKING:
    from labhive.scheduler.core.config import ClusterConfig
    from labhive.scheduler.policies.node_pool import NodePool

_vc_of = attrgetter("vc")  # a job's line with a line per VC (``CapacityPolicy._bind_hooks``)


# open to subclasses written in Python, as QueuedPolicy is (docs/policies.md)
@mypyc_attr(allow_interpreted_subclasses=True)
class CapacityPolicy(CapacityPass):
    name = "capacity"
    preemptive = True

    def __init__(
        self,
        pool: NodePool,
        vc_gpus: dict[str, int],
        *,
        borrow: bool = True,
        backfill: bool | None = None,
        per_vc: bool = False,
        pool_factory: Any = None,
    ) -> None:
        # (each argument named: mypyc passes ``*args`` and ``**kwargs`` on to ``super()`` whole)
        super().__init__(pool, vc_gpus, backfill=backfill, per_vc=per_vc, pool_factory=pool_factory)
        self.borrow = borrow
        self._borrowers: dict[str, QueuedJob] = {}  # running borrowed jobs, in start order
        self._standing = {}  # (none without kept lines: a submission then fetches its head)
        if not (self.backfill or self.per_vc):
            self._keep_lines()  # a line per VC: its head kept between passes (``capacity_pass``)
        self._bind_hooks()

    def _bind_hooks(self) -> None:
        """Where this class's ``check`` or ``group_key`` adds nothing, bind the plain answer
        on the instance, so each call skips a frame of this class (and its ``super()``):
        with borrowing on ``check`` is ``QueuedPolicy``'s; with a line per VC a job's line
        is its VC (``QueuedPolicy.group_key`` gives that too, without backfill or per-VC
        caps), read by ``attrgetter`` with no frame at all. Not where a subclass overrides
        either. Why: drivers check every spec twice and each job's line is asked as it
        queues, starts and stops: about 30 bytecodes a job (issue 34)."""
        cls = type(self)
        try:
            if self.borrow and cls.check is CapacityPolicy.check:
                self.check = super().check  # type: ignore[method-assign]
            if not (self.backfill or self.per_vc) and cls.group_key is CapacityPolicy.group_key:
                self.group_key = _vc_of  # type: ignore[method-assign,assignment]
        except AttributeError:  # compiled (mypyc): methods are read-only, and calls cheap
            pass

    def check(self, spec: JobSpec) -> None:
        """Also reject, with hard quotas, a job larger than its VC's quota: it would block
        its VC's line forever."""
        if spec is self._passed:
            return  # (drivers check a spec, then submit it: passed both tests already)
        super().check(spec)
        if not self.borrow and spec.total_gpus > (quota := self.vc_gpus.get(spec.vc, 0)):
            self._passed = None  # (``super`` passed it: not this test)
            raise SpecRejected(
                f"the job needs {spec.total_gpus} GPUs but VC {spec.vc}'s quota is {quota} and "
                "borrowing is off (capacity:borrow=false); ask for at most "
                f"{quota} GPUs or allow borrowing"
            )

    def line_key(self, job: QueuedJob) -> Hashable:
        return job.vc

    def group_key(self, job: QueuedJob) -> Hashable:
        # (without backfill a line is a VC's: asked as each job queues, starts and stops;
        # bound as ``_vc_of`` on the instance then, ``_bind_hooks``)
        return job.vc if self._line_heads is not None else super().group_key(job)

    def group_priority(self, head: QueuedJob) -> Any:
        quota = self.vc_gpus.get(head.vc, 0)
        used = self.vc_used.get(head.vc, 0)
        return (used / quota if quota else math.inf, head.seq)

    def guaranteed_used(self, vc: str) -> int:
        return self.vc_used.get(vc, 0) - self.vc_borrowed.get(vc, 0)

    def admit(self, job: QueuedJob) -> tuple[bool, bool]:
        vc = job.vc  # (``guaranteed_used``, inline: asked of each head a pass weighs)
        guaranteed = self.vc_used.get(vc, 0) - self.vc_borrowed.get(vc, 0)
        if guaranteed + job.gpus <= self.vc_gpus.get(vc, 0):
            return True, False
        return self.borrow, True

    def victims(self, job: QueuedJob, opportunistic: bool) -> Iterable[QueuedJob]:
        if opportunistic:
            return ()
        return self._reclaimable(job.vc)

    def victim_gpus(self, job: QueuedJob, opportunistic: bool) -> int:
        if opportunistic:
            return 0
        return sum(self.vc_borrowed.values()) - self.vc_borrowed.get(job.vc, 0)

    def _reclaimable(self, vc: str) -> Iterator[QueuedJob]:
        # no copy: nothing changes ``_borrowers`` while a search walks it (victims are only
        # stopped after the search), and a search stops early, so it costs what it visits
        for job_id in reversed(self._borrowers):
            victim = self._borrowers.get(job_id)
            if victim is None or victim.vc == vc:
                continue
            # only a VC using more than its quota gives back (its borrowed jobs, newest first)
            if self.vc_used.get(victim.vc, 0) > self.vc_gpus.get(victim.vc, 0):
                yield victim

    def on_started(self, job: QueuedJob) -> None:
        if job.opportunistic:
            self._borrowers[job.job_id] = job
        if self._line_heads is not None:  # (``_share_changed``, inline: at every start)
            self._touched.add(job.vc)
            self._standing.pop(job.vc, None)

    def on_stopped(self, job: QueuedJob) -> None:
        # (only a job started borrowed is a borrower: ``opportunistic`` stays as ``_start``
        # set it until ``_stop`` clears it, after this hook)
        if job.opportunistic:
            self._borrowers.pop(job.job_id, None)
        if self._line_heads is not None:  # (``_share_changed``, inline: at every stop)
            self._touched.add(job.vc)
            self._standing.pop(job.vc, None)

    def _reconfigure(self, config: ClusterConfig, out: list[Decision]) -> None:
        super()._reconfigure(config, out)
        for vc in list(self._line_heads or ()):
            self._share_changed(vc)  # the quotas, so every share, may change

    def preempt_reason(self, victim: QueuedJob) -> str:
        return f"{victim.vc} borrowed these GPUs beyond its quota; their VC reclaimed them"

    def wait_reason(self, job: QueuedJob) -> str:
        quota = self.vc_gpus.get(job.vc, 0)
        used = self.guaranteed_used(job.vc)
        if used + job.gpus <= quota:
            return (
                f"{job.vc} has {quota - used} of its {quota} GPUs free for the {job.gpus} "
                f"this job needs, but they are not placeable yet ({self.pool.free_gpus} idle)"
            )
        tail = f"borrowing waits for {job.gpus} idle GPUs" if self.borrow else "borrowing is off"
        return f"{job.vc} uses {used} of its {quota} GPUs; {tail}"


def create(config: ClusterConfig, **options: Any) -> CapacityPolicy:
    return from_config(CapacityPolicy, config, options, borrow=True)
