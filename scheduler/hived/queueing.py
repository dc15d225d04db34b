"""HiveD's waiting jobs and the scheduling pass that starts them.

Waiting jobs are grouped in classes of identical jobs (``queue.JobClass``): a class that failed
stays blocked until the capacity it depends on grows (its stamp changes), and a cheap upper bound
of that capacity (``_room``) skips classes no search could satisfy. ``schedule`` then tries the
classes in queue order (priority, then submission), each attempt in ``attempt``. CPU-only jobs
wait in their own list and start where nodes' CPUs and memory hold them (``schedule_cpu``).
All of it is ``ClassQueue``, a part the scheduler holds (``HivedScheduler.queue``).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Hashable
from typing import Any

from labhive.scheduler.core.config import ClusterConfig
from labhive.scheduler.core.jobs import RoleSpec
from labhive.scheduler.core.model import Decision, Start, TaskPlacement
from labhive.scheduler.hived.base import UNBOUNDED, HivedBase, account
from labhive.scheduler.hived.job import Job
from labhive.scheduler.hived.queue import FailedAt, JobClass, JobSize, Signature, VCQueue
from labhive.scheduler.hived.turns import Turns
from labhive.scheduler.hived.vc import VC

#: A class's room when no node or VC can hold it (any real room is >= 0, so it blocks).
NO_ROOM = -1


class ClassQueue:
    """Classes of waiting jobs, their blocking stamps, and the scheduling pass.

    A part ``core.HivedScheduler`` holds (``self.queue``), not a base it inherits, as HiveD's
    Go code keeps its ``intraVCScheduler``. Its state is the waiting jobs; the cells, VCs,
    jobs and the counters that say what capacity grew (``_dirty_vcs``, ``_dirty_oppo``,
    ``_oppo_epoch``, ``_tick``: the bookkeeping of ``base`` sets them as GPUs are freed) are
    the scheduler's, read through ``_sched``. Per-user turns (fair share, caps, the
    reservation) are the ``turns`` part's, asked only when the scheduler keeps a ledger."""

    def __init__(self, sched: HivedBase, turns: Turns) -> None:
        #: The scheduler whose jobs, cells, VCs and capacity counters a pass reads; each
        #: attempt goes to its ``attempt`` part.
        self._sched = sched
        #: Whose turn it is inside a VC (fair share, caps, a reservation): ``turns.Turns``.
        self.turns = turns
        #: Per VC, its waiting jobs in queue order (positions, ``views``).
        self.queues: dict[str, VCQueue] = {}
        #: Classes worth a look at the next pass (new, unblocked, or given back by a cap).
        self.ready: set[JobClass] = set()
        #: A new job (and its class key) that ``schedule`` tries before it is queued
        #: (``arrive``), or None.
        self._arrived: tuple[Job, Hashable] | None = None
        #: Every class made since the last config, by key (``_class_key``).
        self.classes: dict[Hashable, JobClass] = {}
        #: The opportunistic ones among them (a release anywhere may let them fit).
        self.oppo_classes: dict[Hashable, JobClass] = {}
        #: Per VC, its classes that have waiting jobs (a release looks at those, not at every
        #: class ever made: a trace makes one per job size).
        self.vc_classes: dict[str, dict[Hashable, JobClass]] = {}
        #: Waiting CPU-only jobs, in queue order: (-priority, seq, job id) (``schedule_cpu``).
        self.cpu_waiting: list[tuple[int, int, str]] = []
        #: Whether opportunistic jobs of all VCs share classes: unless SKUs size them by their
        #: VC's (the config's, read on every job: ``load``).
        self.oppo_shared = True
        #: Whether the scheduler tells users apart (``ClusterConfig.per_user``: then, and only
        #: then, it keeps a ledger and ``turns`` judges each class's head).
        self.per_user = False

    def load(self, config: ClusterConfig) -> None:
        """What a (new) config says that the pass reads on every job (``base._load``)."""
        self.oppo_shared = not config.skus
        self.per_user = config.per_user

    def reset(self) -> None:
        """Forget every waiting job and class (a new config: ``adopt`` queues them again)."""
        self.queues, self.ready, self._arrived = {}, set(), None
        self.classes, self.oppo_classes, self.vc_classes = {}, {}, {}
        self.cpu_waiting = []

    def _class_key(self, job: Job) -> Hashable:
        if job.grouped:
            return ("groups", job.job_id)  # rare: a class of its own
        roles = job.spec.roles
        if len(roles) == 1 and not job.placed and roles[0].instances > 0:
            # The usual job, nothing started: its one role waits whole. The same shape as
            # counting below, without hashing the role once per task.
            r = roles[0]
            shape: tuple[tuple[int, float, int, str | None, int], ...] = (
                (r.gpu, r.cpu, r.memory_mb, r.sku, r.instances),
            )
        else:
            shape = self._shape(job)
        if not job.spec.gang:
            shape = shape[:1]
        # Opportunistic jobs of all VCs share classes, unless SKUs size them by their VC's.
        vc = None if job.spec.opportunistic and self.oppo_shared else job.vc
        return (vc, job.spec.priority, job.spec.gang, job.pinned, shape)

    @staticmethod
    def _shape(job: Job) -> tuple[tuple[int, float, int, str | None, int], ...]:
        """What a job's waiting tasks ask for: per role, its resources and task count."""
        waiting: dict[RoleSpec, int] = {}
        for role, _ in job.waiting_tasks:
            waiting[role] = waiting.get(role, 0) + 1
        return tuple((r.gpu, r.cpu, r.memory_mb, r.sku, n) for r, n in waiting.items())

    def enqueue(self, job: Job) -> None:
        """Put a job (back) in its VC's queue at its original place, in its current class."""
        if job.cpu_only:
            entry = (-job.spec.priority, job.seq, job.job_id)
            if entry not in self.cpu_waiting:
                bisect.insort(self.cpu_waiting, entry)
            return
        if job.share:  # GPU shares wait apart (``shares``)
            self._sched.shares.book.wait(job.spec.priority, job.seq, job.job_id)
            return
        self.dequeue(job, keep_order=True)
        queue = self._queue_of(job)
        key = self._class_key(job)
        cls = self._class_of(job, key)
        if not cls.entries or cls.entries[0][0] > job.seq or not self._blocked(cls):
            self.ready.add(cls)
        if cls.users is None:
            cls.add(job.seq, job.job_id)
        else:
            owner = account(job)
            if cls.add(job.seq, job.job_id, owner):
                self.turns.account_joins(cls, owner)
        if not job.spec.opportunistic:
            listed = self.vc_classes.get(job.vc)
            if listed is None:
                listed = self.vc_classes[job.vc] = {}
            listed[key] = cls
        job.queued_key = key
        if not job.in_order:
            queue.add(job.spec.priority, job.seq, job.job_id)
            job.in_order = True

    def _queue_of(self, job: Job) -> VCQueue:
        queue = self.queues.get(job.vc)
        if queue is None:  # (``setdefault`` would build a queue every time)
            queue = self.queues[job.vc] = VCQueue()
        return queue

    def _class_of(self, job: Job, key: Hashable) -> JobClass:
        """The job's class (``key``), made on first use."""
        cls = self.classes.get(key)
        if cls is None:
            cls = self.classes[key] = JobClass(key, job.vc, job.spec.priority)
            if self.per_user:
                cls.users = {}
                shared = job.spec.opportunistic and self.oppo_shared and not job.grouped
                cls.scope = None if shared else job.vc  # (``_class_key``)
            cls.need = self._class_need(job)
            cls.task_need = self._task_need(job)
            cls.vc_ref = self._sched.vcs.by_name.get(job.vc)
            if job.spec.opportunistic:
                self.oppo_classes[key] = cls
        return cls

    def arrive(self, job: Job) -> None:
        """A new job: it waits in its queue, unless a pass would try it first and alone (no
        other class is ready, nothing was freed, none of its class waits ahead of it); then
        ``schedule`` tries it straight away (``_start_arrived``) and queues it only if it
        did not start, sparing the queue's bookkeeping the usual job of an idle cluster."""
        if (
            job.spec.gang
            and not job.grouped
            and not job.cpu_only
            and not job.share
            and not self.ready
            and not self._sched._dirty_vcs
            and not self._sched._dirty_oppo
        ):
            key = self._class_key(job)
            cls = self.classes.get(key)
            if cls is None or not cls.entries:
                self._arrived = (job, key)
                return
        self.enqueue(job)

    def _start_arrived(
        self, job: Job, key: Hashable, failed: dict[Hashable, list[JobSize]], out: list[Decision]
    ) -> None:
        """What a pass does with the one class ``arrive`` left it (``_collect_ready``'s
        checks, then ``schedule``'s), the job queued first only where it would stay queued:
        the state after is the same as had it been queued and then started."""
        self._queue_of(job)
        cls = self._class_of(job, key)
        stamp = self._stamp(cls)
        if cls.blocked_at is not None and cls.blocked_at == stamp:
            self._wait_blocked(job, cls)
            return
        if self._class_room(cls) < cls.need:
            self._wait_blocked(job, cls)
            self._block(cls, stamp)
            return
        if self.per_user and not self.turns.gate(cls, job):
            self._wait_blocked(job, cls)
            return
        # ``_may_fit`` would ask the same bound again of the same cells: it holds.
        if cls.signature is None:
            cls.signature = self._signature(job)
        self._sched.attempt.place(job, out, self._since(cls), cls)
        if job.all_placed:
            return
        self._wait_blocked(job, cls)
        if self.per_user and self.turns.stopped_at_cap(job):
            return
        self._block(cls)
        if cls.signature.group is not None:
            failed.setdefault(cls.signature.group, []).append(cls.signature.size)

    def _wait_blocked(self, job: Job, cls: JobClass) -> None:
        """Queue a job whose class is not tried again in this pass (as ``_collect_ready``
        or a failed attempt leaves it: out of the ready set)."""
        self.enqueue(job)
        self.ready.discard(cls)

    def _class_need(self, job: Job) -> int:
        """The fewest GPUs a job of this class can start with (its next task if incremental)."""
        s = self._sched
        unit = s.sizing.units(job)[0]
        chains = s.sizing.chains(job, [r for r, _ in unit])
        if not chains:
            return UNBOUNDED
        return min(sum(t.leaves for t in s.sizing.needs(unit, c, job.vc)) for c in chains)

    def _task_need(self, job: Job) -> int:
        """The fewest GPUs the job's largest waiting task needs on one node."""
        s = self._sched
        roles = [r for r, _ in job.waiting_tasks]
        chains = s.sizing.chains(job, roles)
        if not chains:
            return UNBOUNDED
        return min(
            max(s.sizing.leaves(r, s.tree.chains[c].leaf_type, job.vc) for r in roles)
            for c in chains
        )

    def dequeue(self, job: Job, keep_order: bool = False) -> None:
        if job.cpu_only:
            entry = (-job.spec.priority, job.seq, job.job_id)
            if entry in self.cpu_waiting:
                self.cpu_waiting.remove(entry)
            return
        if job.share:
            self._sched.shares.book.unwait(job.spec.priority, job.seq, job.job_id)
            return
        if job.queued_key is not None:
            cls = self.classes.get(job.queued_key)
            if cls is not None:
                if cls.users is None:
                    cls.remove(job.seq, job.job_id)
                else:
                    owner = account(job)
                    if cls.remove(job.seq, job.job_id, owner):
                        self.turns.account_leaves(cls, owner)
                if not cls.entries:  # only classes with waiting jobs are listed per VC
                    listed = self.vc_classes.get(cls.vc)
                    if listed is not None:
                        listed.pop(cls.key, None)
                        if not listed:  # and only VCs with such classes (``_collect_ready``)
                            del self.vc_classes[cls.vc]
            job.queued_key = None
        if not keep_order and job.in_order:
            self.queues[job.vc].remove(job.spec.priority, job.seq, job.job_id)
            job.in_order = False

    def _stamp(self, cls: JobClass) -> Hashable:
        """What the class's chances depend on; unchanged means a failed class still fails."""
        if cls.priority < 0:
            return self._sched._oppo_epoch
        vc = cls.vc_ref
        if vc is None:
            return None
        if cls.stamp_version == vc.version:
            return cls.stamp
        freed = 0
        for p, n in vc.freed.items():
            if p >= cls.priority:
                freed += n
        cls.stamp_version, cls.stamp = vc.version, (vc.epoch, vc.pool_epoch, freed)
        return cls.stamp

    def _blocked(self, cls: JobClass) -> bool:
        return cls.blocked_at is not None and cls.blocked_at == self._stamp(cls)

    def _block(self, cls: JobClass, stamp: Hashable = None) -> None:
        cls.blocked_at = self._stamp(cls) if stamp is None else stamp
        vc = cls.vc_ref
        if vc is not None and cls.priority >= 0:
            cls.failed_at = FailedAt(self._sched._tick, vc.epoch, vc.pool_epoch)
        else:
            cls.failed_at = None

    def _since(self, cls: JobClass) -> tuple[int, bool] | None:
        """When the class last failed, if only GPUs freed in its VC (and free physical cells)
        changed since then: only the nodes those GPUs lie on need a new look, and binding
        more cells only if more physical cells became free (the bool)."""
        vc = cls.vc_ref
        failed = cls.failed_at
        if failed is None or vc is None or failed.epoch != vc.epoch:
            return None
        return failed.tick, failed.pool_epoch != vc.pool_epoch

    def _collect_ready(self) -> list[JobClass]:
        """The classes worth an attempt: new or unblocked ones whose need the capacity they
        depend on could still cover (a cheap upper bound; the placement search decides)."""
        s = self._sched
        dirty = s._dirty_vcs
        if dirty:
            listed = self.vc_classes
            if listed:  # (no VC has a class that waits: none to mark)
                for name, level in dirty.items():
                    classes = listed.get(name)
                    if classes:
                        for cls in classes.values():
                            if cls.priority <= level and cls.entries:
                                self.ready.add(cls)
            dirty.clear()
        if s._dirty_oppo:
            if self.oppo_classes:
                self.ready.update(self.oppo_classes.values())
            s._dirty_oppo = False
        if not self.ready:  # the usual end of a job on a cluster where nothing waits
            return []
        out = []
        rooms: dict[tuple[str, int], int] = {}  # a guaranteed class's bound, by VC and priority
        oppo_rooms: dict[int, int] = {}  # an opportunistic class's, by its task's need
        for cls in self.ready:
            if not cls.entries:
                continue
            stamp = self._stamp(cls)
            if cls.blocked_at is not None and cls.blocked_at == stamp:
                continue
            if cls.priority < 0:  # (per user, many classes share a task size: one node scan)
                room = oppo_rooms.get(cls.task_need, NO_ROOM - 1)
                if room == NO_ROOM - 1:
                    room = oppo_rooms[cls.task_need] = self._class_room(cls)
            elif cls.vc_ref is None:
                room = self._class_room(cls)
            else:
                key = (cls.vc, cls.priority)
                room = rooms.get(key, NO_ROOM)
                if room == NO_ROOM:
                    room = rooms[key] = self._class_room(cls)
            if room < cls.need:
                self._block(cls, stamp)
                continue
            out.append(cls)
        self.ready.clear()
        return out

    def _class_room(self, cls: JobClass) -> int:
        """The cheap upper bound on the GPUs a job of ``cls`` could start with now: for an
        opportunistic class the idle ones, if some node could hold its task; for a
        guaranteed one its VC's room at its priority (``_room``)."""
        if cls.priority < 0:
            return self._sched.tree.free_total if self._node_with(cls.task_need) else NO_ROOM
        if cls.vc_ref is None:
            return NO_ROOM
        return self._room(cls.vc_ref, cls.priority)

    def _may_fit(self, cls: JobClass) -> bool:
        """The cheap bound again, just before an attempt: jobs placed since the class was
        collected may have taken what it needed."""
        if cls.priority < 0:
            return self._node_with(cls.task_need)
        vc = cls.vc_ref
        return vc is not None and self._room(vc, cls.priority) >= cls.need

    def _node_with(self, free: int) -> bool:
        """Whether some node has ``free`` idle healthy GPUs."""
        for nodes in self._sched.tree.open.values():
            for node in nodes:
                if node.free >= free:
                    return True
        return False

    def _room(self, vc: VC, priority: int) -> int:
        """GPUs a job of this priority could have in its VC: free, unbound, or preemptible."""
        room = vc.free_in + vc.unbound_leaves + vc.oppo_in
        for p, n in vc.prio_in.items():
            if p < priority:
                room += n
        return room

    def schedule(self, out: list[Decision]) -> None:
        """Start what fits, classes in queue order; a class that fails is skipped until the
        capacity it depends on grows. Per user (``turns``), a class's head is its
        best-ranked account's, and classes are ordered by their head's rank first."""
        s = self._sched
        # (-priority, [its head's rank key under fair share,] its head's seq, tie, class)
        heap: list[tuple[Any, ...]] = []
        failed: dict[Hashable, list[JobSize]] = {}
        tie = 0
        ledger = s._ledger
        # caps or reservations: a head may change without a change of its class
        fair_gates = ledger is not None and (bool(ledger.caps) or ledger.reserve_after is not None)
        if ledger is not None:
            turns = self.turns
            turns.pass_begins(out)
        if self._arrived is not None:
            (job, key), self._arrived = self._arrived, None
            self._start_arrived(job, key, failed, out)
        while True:
            ready = self._collect_ready() if self.ready or s._dirty_vcs or s._dirty_oppo else ()
            for cls in ready:
                tie += 1
                if ledger is None:
                    heapq.heappush(heap, (-cls.priority, cls.entries[0][0], tie, cls))
                else:
                    head = turns.fair_head(cls)  # (None: its users wait for a cap or a holder)
                    if head is not None:
                        item = (-cls.priority, head[0], head[1], tie, cls, head[2], cls.changes)
                        heapq.heappush(heap, item)
            if not heap:  # (under fair share ``handle`` counts the pass's decisions next)
                return
            entry = heapq.heappop(heap)
            if ledger is None:
                cls = entry[-1]
                seq = entry[1]
                if not cls.entries or cls.entries[0][0] != seq or self._blocked(cls):
                    if cls.entries and not self._blocked(cls):
                        self.ready.add(cls)
                    continue
                job = s._jobs[cls.entries[0][1]]
            else:
                cls = entry[4]
                if not cls.entries or self._blocked(cls):
                    continue
                if cls.changes == entry[6] and not fair_gates:  # (nothing moved its head)
                    job = s._jobs[entry[5]]
                else:
                    head = turns.fair_head(cls)
                    if head is None:
                        continue
                    if head[0] != entry[1] or head[1] != entry[2]:  # a cap or a start moved it
                        self.ready.add(cls)
                        continue
                    job = s._jobs[head[2]]
            if cls.signature is None:
                cls.signature = self._signature(job)
            group, size = cls.signature.group, cls.signature.size
            if (group is not None and any(size.dominated_by(f) for f in failed.get(group, ()))) or (
                not self._may_fit(cls)
            ):
                self._block(cls)
                continue
            before = len(job.placed)
            s.attempt.place(job, out, self._since(cls), cls)
            if job.all_placed:
                self.dequeue(job)
                if ledger is not None:
                    turns.started_whole(cls)
                if cls.entries:  # its next job may start too (an empty class is not tried)
                    self.ready.add(cls)
                continue
            if len(job.placed) > before:  # an incremental job started some tasks
                self.enqueue(job)
            if ledger is not None and turns.stopped_at_cap(job):
                if cls.entries:  # (the job moved to a class of its waiting tasks: this
                    self.ready.add(cls)  # one's other jobs may go, as after a start)
                continue
            if job.queued_key is not None:
                self._block(self.classes[job.queued_key])
            if group is not None:
                failed.setdefault(group, []).append(size)

    def _signature(self, job: Job) -> Signature:
        """What a failed attempt says about larger jobs (single-role jobs only)."""
        role = job.spec.roles[0]
        size = JobSize(
            job.spec.priority, role.gpu, role.cpu, role.memory_mb, len(job.waiting_tasks)
        )
        if len(job.spec.roles) != 1:
            return Signature(None, size)
        vc = None if job.spec.opportunistic and self.oppo_shared else job.vc
        # A pinned job runs in its pinned cell only: what fails elsewhere says nothing of it.
        return Signature((vc, role.sku, job.spec.gang, job.pinned), size)

    def schedule_cpu(self, out: list[Decision]) -> None:
        """Start waiting CPU-only jobs in queue order where nodes' CPUs and memory hold them
        (a gang whole, an incremental job task by task); no preemption either way."""
        s = self._sched
        for entry in list(self.cpu_waiting):
            job = s._jobs[entry[2]]
            units = [job.waiting_tasks] if job.spec.gang else [[t] for t in job.waiting_tasks]
            started = []
            for unit in units:
                nodes = s.cpu.plan(unit)
                if nodes is None:
                    break
                for (role, index), node in zip(unit, nodes, strict=True):
                    s.cpu.hold(node, role)
                    placement = TaskPlacement(role.name, index, node, ())
                    job.placed[(role.name, index)] = (placement, [])
                    started.append(placement)
            if started:
                out.append(Start(job.job_id, tuple(started), False))
            if not job.waiting_tasks:
                self.cpu_waiting.remove(entry)
