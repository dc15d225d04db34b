"""The base of the queue-ordering policies beside it; each policy only says who goes next.

FIFO, SJF, DRF, Capacity and LAS differ in three answers, which a subclass gives:
- ``order_key(job)``: a job's place in its waiting line (static while it waits);
- ``line_key(job)``: the scope of head-of-line blocking. Waiting jobs are kept in groups; in a
  scheduling pass a group whose first job cannot start is passed over for the rest of the pass
  (every later job in it is no better placed), other groups go on. One line for all jobs is a
  strict queue. With ``backfill`` (every queue policy's option) each line is split further by
  GPU count, so smaller jobs start past a blocked big one;
- ``group_priority(head)``: which group's head is tried next (default: its ``order_key``); DRF
  and Capacity rank groups by a share that changes as jobs start.
Optionally ``admit`` (may this job start now, guaranteed or borrowed?) and ``victims`` (running
jobs it may preempt, in preemption order). Placement is ``NodePool``'s, the same for all.

Per-VC queues (``per_vc=true``, offered by FIFO, SJF and LAS; Helios' model): each VC has its
own lines and runs at most its guaranteed GPUs (its quota, counted on the shared pool), never
borrowing; a job larger than its VC's quota is rejected; LAS preempts only within the VC.

Cost: a new submission tries only that job, and only if it heads its group; a pass after
resources free up visits each group's head once, so a 10,000-job queue is never rescanned.
A policy with a line per user (DRF) sets ``HEAD_INDEX``: its heads then stay ranked between
passes (``head_index.py``), filed by shape and (with backfill) time limit, so a pass costs its
starts, not the number of waiting users; with backfill it reuses the head's shadow while it
holds.

Beside it: ``queued_job`` (the job as a queue policy holds it), ``queued_pass`` (the scheduling
pass, a mixin), ``queued_views`` (what the policy shows: job and cluster views, why a job waits;
a mixin) and ``queued_config`` (the pool, the VCs' quotas and the options a cluster config and
``--policy`` give).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Iterable, Sequence
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from mypy_extensions import mypyc_attr

from labhive.scheduler.core.frozen_build import frozen_builder
from labhive.scheduler.core.gpu_share import shares_refused
from labhive.scheduler.core.jobs import JobSpec, RoleSpec
from labhive.scheduler.core.model import (
    Adopt,
    Cancel,
    Decision,
    Event,
    Finish,
    Requeue,
    SpecRejected,
    Start,
    Stop,
    Submit,
    TaskPlacement,
    Tick,
)
from labhive.scheduler.policies.head_index import HeadIndex
from labhive.scheduler.policies.node_pool import (
    Gang,
    NodePool,
    gang_of,
)
from labhive.scheduler.policies.policy_base import (
    node_down,
    reconfigured,
)
from labhive.scheduler.policies.queued_config import policy_options, pool_from_config, vc_gpus
from labhive.scheduler.policies.queued_job import NOT_WAITING, Entry, QueuedJob
from labhive.scheduler.policies.queued_pass import QueuedPass
from labhive.scheduler.policies.size_refusals import SizeRefusals

if TYPE_CHECKING:
    from labhive.scheduler.core.config import ClusterConfig

# Re-exported: the policies and tests import these from here, where they lived before the job
# (``queued_job``), the config readers (``queued_config``) and the views (``queued_views``)
# got modules of their own.
__all__ = [
    "QueuedJob",
    "QueuedPolicy",
    "from_config",
    "policy_options",
    "pool_from_config",
    "vc_gpus",
]


Q = TypeVar("Q", bound="QueuedPolicy")

#: ``Start(job_id, tasks, opportunistic)`` without the frozen ``__init__`` (one a job).
_started: Callable[[str, tuple[TaskPlacement, ...], bool], Start] = frozen_builder(Start)

#: ``QueuedPolicy.order_key``'s answer, ``job.seq``, in C.
_seq_of: Callable[[QueuedJob], int] = operator.attrgetter("seq")

#: The events about a job a policy may no longer hold (a tuple built once: ``Finish | Cancel
#: | Requeue`` in ``handle`` built a union at each of its two calls a job).
_ENDINGS = (Finish, Cancel, Requeue)


# users write their own policies on it (docs/policies.md, lab 4): open to interpreted subclasses
@mypyc_attr(allow_interpreted_subclasses=True)
class QueuedPolicy(QueuedPass):
    """A ``Scheduler`` whose subclasses supply ordering (and optionally preemption)."""

    name = "queued"
    #: Set by policies that preempt (they override ``victims`` and ``victim_gpus``).
    preemptive = False
    #: Preemption searches allowed per scheduling pass: each releases (and, failing,
    #: restores) a few jobs, so a pass over many blocked groups stays cheap; jobs left out
    #: are tried again at the next event.
    SEARCHES_PER_PASS = 2
    #: Whether backfill is on when the ``backfill`` option is not given.
    BACKFILL: ClassVar[bool] = False
    #: Keep the lines' heads ranked between passes (``HeadIndex``), when the policy does not
    #: preempt and runs without per-VC quotas. Only for a policy whose ``admit`` always admits
    #: and whose ``group_priority`` changes only with what ``priority_changed`` reports (with
    #: backfill: for each line of the job's ``line_key``), and only rises while a pass starts
    #: jobs: a pass then skips every head of a shape that did not fit, and with backfill every
    #: head ranked after the blocked one whose shape and limit may not jump it.
    HEAD_INDEX: ClassVar[bool] = False

    def __init__(
        self,
        pool: NodePool,
        vc_gpus: dict[str, int],
        *,
        backfill: bool | None = None,
        per_vc: bool = False,
        pool_factory: Any = None,
    ):
        self.pool = pool
        self.backfill = self.BACKFILL if backfill is None else backfill
        self.per_vc = per_vc
        self.vc_gpus = dict(vc_gpus)
        self._pool_factory = pool_factory
        self._jobs = {}
        # (no dict of the waiting jobs: a job's waiting state is its ``group``, ``NOT_WAITING``
        # while it waits in no line. Why: at a million jobs that dict's entry a queued job, set
        # and popped by id, was a cache miss each, issue 34)
        # each line a heap of entries (order key, seq, token, the job): a job's entry holds the
        # job itself, so a line's head is read off its first entry (``_head``). The order is
        # total before the job (a job's ``seq`` is its own, its ``token`` new at each join),
        # so jobs are never compared.
        self._groups = {}
        self._seq = 0
        self._now = 0.0
        # id(spec.roles) -> (those roles, their gang, whether ``check`` found it fits here):
        # a trace's jobs of one size share one roles tuple, so they share one gang and one
        # size check (the entry keeps the roles alive: their id is not reused while kept)
        self._gangs: dict[int, tuple[tuple[RoleSpec, ...], Gang, bool]] = {}
        self._passed: JobSpec | None = None  # the spec ``check`` passed last
        self._passed_gang: Gang | None = None  # and its gang (``_new_job`` reads it)
        self._searches = self.SEARCHES_PER_PASS
        self._no_room = set()
        # what a submission's try resets first (``QueuedPass._schedule``): of what
        # ``_begin_pass`` resets, a try that cannot search reads only the shapes found no
        # room (``_searches`` and the kept refusals, ``_refused``, are read by searches and
        # by a preemptive pass's skips alone), so a policy that does not preempt clears
        # that set, without a frame (a call a submission, issue 34); ``_no_room`` is cleared,
        # never replaced, so the bound ``clear`` stays its own
        self._begin_try = self._begin_pass if self.preemptive else self._no_room.clear
        # ``surely_refused`` by GPU count, kept while no job starts or stops (``_refused``)
        self._refusals = {}
        self._refusals_at = -1  # ``_runs`` when kept; -1: forgotten (a pass begins)
        self._sizes = SizeRefusals()  # the refusals, kept across passes (``size_refusals``)
        # ``group_priority`` is the head's ``order_key``, which its line's first entry holds
        # (static while it waits): a pass reads it there
        self._keyed = type(self).group_priority is QueuedPolicy.group_priority
        # ``order_key`` as ``_enqueue`` asks it: where it is the base's (FIFO, DRF, Capacity),
        # the job's ``seq`` read in C, without the method's frame (a call a job queued)
        self._order_key: Callable[[QueuedJob], Any] = (
            _seq_of if type(self).order_key is QueuedPolicy.order_key else self.order_key
        )
        # a full pass's ranked heads, kept between passes where that is exact (``_kept_heads``:
        # a keyed, preemptive policy), and the lines a job joined or left since
        self._line_heads = None
        if self._keyed and self.preemptive:
            self._line_heads = {}
        self._touched = set()
        # every job in one line, ranked by arrival (FIFO, strict): ``_enqueue`` files a job
        # under ``None`` without asking ``group_key`` and ``line_key`` (two calls a job)
        cls = type(self)
        self._one_line = not (per_vc or self.backfill) and (
            cls.group_key is QueuedPolicy.group_key and cls.line_key is QueuedPolicy.line_key
        )
        # The GPUs each VC's running jobs hold, and of them borrowed: kept up at every start
        # and stop only where a decision reads them (per-VC quotas: ``within_quota``; a
        # policy with an ``admit`` of its own: Capacity's guaranteed and borrowed shares).
        # Elsewhere only the cluster view reads them, and counts the running jobs then
        # (``QueuedViews.vc_use``). Why: two dict updates a job of FIFO, SJF, DRF and LAS
        # (about 28 bytecodes) for a view a simulation never asks for.
        self.vc_used = dict.fromkeys(self.vc_gpus, 0)
        self.vc_borrowed = dict.fromkeys(self.vc_gpus, 0)
        self._counts_vcs = per_vc or not self._admits_all
        self._blocked = None  # backfill: the first head a pass could not place
        self._runs = 0  # jobs started or stopped so far: the running set's version
        self._limited = 0  # running jobs that declared a time limit (backfill's shadow)
        self._shadow = None
        indexed = self.HEAD_INDEX and not (self.preemptive or per_vc)
        self._index = HeadIndex() if indexed else None
        # ``_try`` asks ``NodePool.may_fit`` before placing only where a refusal by it differs
        # from placement's own: a preemptive policy then searches, and DRF's index parks the
        # kind. Elsewhere ``place`` refuses the same gangs by the same first tests, and the
        # shape it adds to ``_no_room`` only spares placements this pass would refuse too.
        self._ask_fit = self.preemptive or indexed
        # a pass that would find every line's head refused by free counts, not run
        # (``QueuedPass._settle``): only where no search, backfill or index reads what a pass
        # leaves, and this policy alone reads its pool's ``peak``
        self._may_settle = self.SKIP_SETTLED_PASSES and not (
            self.preemptive or self.backfill or indexed
        )
        self._settled = None  # (the pool, the wake level)
        # with the index and backfill: the groups of each line_key so far (one per GPU count;
        # the line_key's priority, e.g. a user's share, ranks all of them)
        self._split: dict[Hashable, set[Hashable]] = {}

    # ---- what subclasses decide --------------------------------------------------------------

    def order_key(self, job: QueuedJob) -> Any:
        return job.seq

    def line_key(self, job: QueuedJob) -> Hashable:
        return None

    def group_key(self, job: QueuedJob) -> Hashable:
        line = self.line_key(job)
        if self.per_vc:
            line = (job.vc, line)
        return (line, job.gpus) if self.backfill else line

    def within_quota(self, job: QueuedJob) -> bool:
        """Per-VC mode: the VC's running jobs plus this one stay within its quota."""
        return self.vc_used.get(job.vc, 0) + job.gpus <= self.vc_gpus.get(job.vc, 0)

    def group_priority(self, head: QueuedJob) -> Any:
        return self.order_key(head)

    def admit(self, job: QueuedJob) -> tuple[bool, bool]:
        """(may start now, as borrowed/opportunistic)."""
        return True, False

    def victims(self, job: QueuedJob, opportunistic: bool) -> Iterable[QueuedJob]:
        """Running jobs ``job`` may preempt, the first to go first (``preemptive`` only)."""
        return ()

    def victim_gpus(self, job: QueuedJob, opportunistic: bool) -> int:
        """An upper bound of the GPUs ``victims`` hold, so hopeless searches are skipped;
        with ``opportunistic`` False, at least its value with True (a pass asks it so before
        it knows how ``admit`` would start the job: ``_hopeless``)."""
        return 0

    def on_started(self, job: QueuedJob) -> None:
        """Hook: ``job`` just started (at ``self._now``)."""

    def priority_changed(self, job: QueuedJob) -> None:
        """``group_priority`` of ``job``'s group may have changed (with ``HEAD_INDEX``: it is
        re-ranked before the next pass; with backfill, so is each line of its ``line_key``)."""
        if self._index is None:
            return
        if not self.backfill:
            self._index.touch(self.group_key(job))
            return
        waiting = self._groups
        for group in self._split.get(self.line_key(job), ()):
            if group in waiting:  # one gone was touched when it lost its last job
                self._index.touch(group)

    def on_stopped(self, job: QueuedJob) -> None:
        """Hook: ``job`` stopped running (finished, preempted, requeued, or its node died)."""

    def on_tick(self) -> None:
        """Hook: a ``Tick`` arrived (at ``self._now``); reorder, then a pass runs."""

    def next_wakeup(self) -> float | None:
        return None

    def wait_reason(self, job: QueuedJob) -> str:
        """Why a waiting job is not running, as policy-specific text."""
        return ""

    # ---- the Scheduler interface ---------------------------------------------------------

    def check(self, spec: JobSpec) -> None:
        if spec is self._passed:
            return  # drivers check a spec, then submit it: the second check is free
        if spec.vc not in self.vc_gpus:
            raise SpecRejected(
                f"unknown VC {spec.vc!r}; this cluster has {', '.join(sorted(self.vc_gpus))}"
            )
        kept = self._gangs.get(id(spec.roles))
        if kept is None or kept[0] is not spec.roles or not kept[2]:
            # (a share is of the roles, so roles kept as fitting passed this test too)
            if spec.share_milli:
                raise SpecRejected(shares_refused(self.name, spec.share_milli))
            kept = self._check_size(spec)
        if self.per_vc and spec.total_gpus > self.vc_gpus[spec.vc]:
            raise SpecRejected(
                f"the job needs {spec.total_gpus} GPUs but VC {spec.vc} is guaranteed "
                f"{self.vc_gpus[spec.vc]} and per-VC queues never borrow; ask for fewer GPUs "
                "or drop per_vc"
            )
        # Specs are frozen, so the same object passes again until the cluster changes
        # (``_reconfigure`` forgets it); the job made of it next takes its gang as found here
        # (``_gang``'s look-up again, a call a job)
        self._passed = spec
        self._passed_gang = kept[1]

    def handle(self, event: Event) -> list[Decision]:
        out: list[Decision] = []
        if event.time > self._now:  # (``max``, without the call: twice a job)
            self._now = event.time
        # A simulation's events are a submit and a finish a job (and with LAS about a tick):
        # ``_apply``'s first three cases, taken here (its call, and a submit's test for an
        # ending not ours, were about 30 bytecodes a job of every queue policy)
        new: QueuedJob | None = None
        if type(event) is Submit:
            # (``_submit``'s three lines, without its call and keyword: a call a job)
            spec = event.spec
            if not event.admitted and spec is not self._passed:
                self.check(spec)
            new = self._new_job(event.job_id, spec)
            self._enqueue(new)
        elif type(event) is Finish:
            gone = self._jobs.pop(event.job_id, None)  # (one look-up: ``_remove``'s)
            if gone is None:
                return out  # not ours (any more): nothing changed
            self._forget(gone)
        elif type(event) is Tick:
            self.on_tick()
        else:
            if isinstance(event, _ENDINGS) and event.job_id not in self._jobs:
                return out
            new = self._apply(event, out)
        self._schedule(out, only=new)
        return out

    def handle_batch(self, events: Sequence[Event]) -> list[Decision]:
        """Apply every event of one virtual instant, then decide once: three jobs submitted
        in the same second are ordered by the policy, not by which came first in the file.
        A batch of submissions only tries the lines they joined (nothing was freed)."""
        out: list[Decision] = []
        joined: set[Hashable] = set()
        only_submits = True
        for event in events:
            self._now = max(self._now, event.time)
            new = self._apply(event, out)
            if new is None:
                only_submits = False
            else:
                joined.add(new.group)
        self._schedule(out, groups=joined if only_submits else None)
        return out

    def _submit(self, job_id: str, spec: JobSpec, *, admitted: bool = False) -> QueuedJob:
        if not admitted and spec is not self._passed:  # (checked by the driver: ``check``
            self.check(spec)  # would return at once, a call a job)
        job = self._new_job(job_id, spec)
        self._enqueue(job)
        return job

    def _remove(self, job_id: str) -> None:
        gone = self._jobs.pop(job_id, None)
        if gone is not None:
            self._forget(gone)

    def _forget(self, gone: QueuedJob) -> None:
        """A job no longer held (``_jobs`` let it go): it frees what it ran on, or leaves its
        line."""
        if gone.running:
            self._stop(gone)
        else:
            self._dequeue(gone)

    def _requeue(self, job_id: str) -> None:
        back = self._jobs.get(job_id)
        if back is not None and back.running:
            self._stop(back)
            self._enqueue(back)

    def _node_health(self, node: str, healthy: bool, out: list[Decision], reason: str) -> None:
        running = self.pool.set_healthy(node, healthy, reason)
        if healthy:
            return
        for job_id in running:
            job = self._jobs[job_id]
            self._stop(job)
            self._enqueue(job)
            out.append(Stop(job_id, node_down(node, reason)))

    # ---- state changes -------------------------------------------------------------------

    def _check_size(self, spec: JobSpec) -> tuple[tuple[RoleSpec, ...], Gang, bool]:
        """Refuse a gang that could never be placed here; one that could is kept as fitting
        (until the cluster changes: ``_reconfigure``), and that entry of ``_gangs`` returned.
        Asked only for roles of whole GPUs (``check`` refused a share first): "fitting" roles
        need no share test again."""
        gang = self._gang(spec)
        if not gang.tasks:
            raise SpecRejected("the job has no tasks")
        if not self.pool.fits_empty(gang):
            biggest = gang.largest
            raise SpecRejected(
                f"the job needs {spec.total_gpus} GPUs (largest task {biggest}) but this cluster "
                f"has {self.pool.total_gpus} GPUs and at most {self.pool.max_node_gpus} on a node"
            )
        kept = self._gangs[id(spec.roles)] = (spec.roles, gang, True)
        return kept

    def _gang(self, spec: JobSpec) -> Gang:
        """The spec's gang, shared by the specs with the same roles tuple (``_gangs``)."""
        roles = spec.roles
        kept = self._gangs.get(id(roles))
        if kept is not None and kept[0] is roles:
            return kept[1]
        gang = gang_of(spec)
        if len(self._gangs) >= 4096:  # roles built per spec (the service's): forget, not grow
            self._gangs.clear()
        self._gangs[id(roles)] = (roles, gang, False)
        return gang

    def _new_job(self, job_id: str, spec: JobSpec) -> QueuedJob:
        gang = self._passed_gang if spec is self._passed else None
        if gang is None:  # (not checked last: adopted, admitted by the driver, or passed None)
            gang = self._gang(spec)
        job = QueuedJob(
            job_id=job_id,
            spec=spec,
            seq=self._seq,
            gang=gang,
            vc=spec.vc,
            gpus=gang.gpus,
            user=spec.user or "",
        )
        self._seq += 1
        self._jobs[job_id] = job
        return job

    def _enqueue(self, job: QueuedJob) -> None:
        job.token += 1
        entry: Entry = (self._order_key(job), job.seq, job.token, job)  # (one tuple: ``is``)
        group = job.group = None if self._one_line else self.group_key(job)
        line = self._groups.setdefault(group, [])
        heappush(line, entry)
        if self._settled is not None and line[0] is entry:
            self._settled = None  # it heads its line: a pass must try it (``_settle``)
        if self._line_heads is not None:
            self._touched.add(group)
        if self._index is not None:
            if line[0] is entry:  # it heads its line now (else as filed: ``HeadIndex.touch``)
                self._index.touch(group)
            if self.backfill:
                self._split.setdefault(self.line_key(job), set()).add(group)

    def _dequeue(self, job: QueuedJob) -> None:
        """Leave the waiting line; its heap entry goes stale and is dropped when reached."""
        group = job.group
        job.group = NOT_WAITING
        job.token += 1
        self._settled = None  # it may have headed its line (``_settle``)
        if self._line_heads is None and self._index is None:
            return
        # the line it joined (a waiting job's ``group_key`` stays that of its line: LAS's
        # promotion leaves the line before the level changes); asked anew for a job that
        # never waited (adopted), as before
        if group is NOT_WAITING:  # (it did not wait: adopted)
            group = self.group_key(job)
        if self._line_heads is not None:
            self._touched.add(group)
        if self._index is not None:
            line = self._groups.get(group)
            if line and line[0][3] is job:  # it headed it (``HeadIndex.touch``)
                self._index.touch(group)

    def requeue_waiting(self, job: QueuedJob) -> None:
        """Re-file a waiting job whose ``order_key`` changed (e.g. an LAS promotion)."""
        self._dequeue(job)
        self._enqueue(job)

    def _head(self, group: Hashable) -> QueuedJob | None:
        """The line's first job still waiting, its stale entries dropped on the way. An entry
        is live where its job's ``token`` is the entry's: each change of a job's state bumps
        it, leaving (``_dequeue``: a start, a removal) included, so no look-up by id is
        needed. Why: ``_head`` is called several times a job by every queue policy (LAS
        about 7.7 times an arrival), each with a dict look-up (issue 34)."""
        heap = self._groups.get(group)
        # (an entry's items are Any to mypy, ``Entry``: typed here, so that mypyc reads them as
        # a job and an int, not as objects; no instruction in pure Python)
        job: QueuedJob
        token: int
        while heap:
            _, _, token, job = heap[0]
            if job.token == token:
                return job
            heappop(heap)
        if heap is not None:
            del self._groups[group]
        return None

    def _start(self, job: QueuedJob, tasks: tuple[TaskPlacement, ...], opp: bool) -> Start:
        self._dequeue(job)
        self._runs += 1
        if job.spec.time_limit:
            self._limited += 1
        job.running = True
        job.opportunistic = opp
        job.started = self._now
        if self._counts_vcs:  # (else only the view reads them: ``QueuedViews.vc_use``)
            self.vc_used[job.vc] = self.vc_used.get(job.vc, 0) + job.gpus
            if opp:
                self.vc_borrowed[job.vc] = self.vc_borrowed.get(job.vc, 0) + job.gpus
        self.on_started(job)
        return _started(job.job_id, tasks, opp)

    def _stop(self, job: QueuedJob, *, release: bool = True) -> None:
        """Stop running and free the GPUs; the caller re-enqueues it or forgets it."""
        if release:
            self.pool.release(job.job_id)
        job.running = False
        self._runs += 1
        if job.spec.time_limit:
            self._limited -= 1
        job.token += 1
        # (``attained``, the run's GPU-seconds, is LAS's: summed in its ``on_stopped``, not
        # here, where every policy paid about 14 bytecodes a job stopped for it)
        if self._counts_vcs:  # (as in ``_start``)
            self.vc_used[job.vc] -= job.gpus
            if job.opportunistic:
                self.vc_borrowed[job.vc] -= job.gpus
        self.on_stopped(job)
        job.opportunistic = False

    def preempt_reason(self, victim: QueuedJob) -> str:
        return f"preempted by {self.name}"

    # ---- restore and reconfigure ---------------------------------------------------------

    def _adopt(self, event: Adopt, out: list[Decision]) -> None:
        job = self._new_job(event.job_id, event.spec)
        if not self.pool.claim(job.job_id, event.tasks, job.gang):
            self._enqueue(job)
            out.append(Stop(job.job_id, "its GPUs are no longer free or healthy"))
            return
        self._start(job, event.tasks, event.opportunistic)

    def _reconfigure(self, config: ClusterConfig, out: list[Decision]) -> None:
        if self._pool_factory is None:
            raise SpecRejected(f"policy {self.name} was built without a cluster config")
        old, self.pool = self.pool, self._pool_factory(config)
        self._passed = None
        self._gangs.clear()  # "fits" was of the old cluster
        self.vc_gpus = vc_gpus(config)
        for vc in self.vc_gpus:
            self.vc_used.setdefault(vc, 0)
            self.vc_borrowed.setdefault(vc, 0)
        if self._index is not None:
            for group in self._groups:
                self._index.touch(group)  # priorities may count the cluster's size
        for job in sorted((j for j in self._jobs.values() if j.running), key=lambda j: j.seq):
            held = old.placement(job.job_id)
            if not self.pool.claim(job.job_id, held, job.gang):
                self.pool.claim(job.job_id, (), job.gang)
                self._stop(job)
                self._enqueue(job)
                out.append(Stop(job.job_id, reconfigured("its GPUs are gone or taken")))


# ---- building from a cluster config ------------------------------------------------------


def from_config(cls: type[Q], config: ClusterConfig, options: dict[str, Any], **defaults: Any) -> Q:
    """A queue policy for ``config``: ``options`` (from ``--policy name:key=value``) checked
    against the policy's own ``defaults`` plus what every queue policy takes (``locality``,
    ``backfill``); a reconfigured cluster gets a pool of the same locality."""
    opts = policy_options(options, locality="consolidated", backfill=cls.BACKFILL, **defaults)
    locality = opts.pop("locality")
    return cls(
        pool_from_config(config, locality),
        vc_gpus(config),
        pool_factory=lambda changed: pool_from_config(changed, locality),
        **opts,
    )
