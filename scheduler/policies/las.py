"""Tiresias' discretized two-dimensional LAS (Gu et al., NSDI '19).

A job's attained service is GPUs x seconds run (both dimensions: a wide job ages faster). Jobs
sit in priority queues split at ``thresholds`` of attained GPU-seconds (default 3250 and 7200,
the Tiresias simulator's queue limits: three queues); a job moves down when it crosses one,
at a time the policy asks the driver for with ``next_wakeup``. Higher queues go first, each
queue in submission order; a waiting job preempts running jobs of strictly lower queues
(lowest queue, latest submitted first) when that makes it fit, once they have run for
``quantum`` seconds (default 300) in their current run, so no run is cut shorter than that.
Starvation guard (Tiresias' PROMOTEKNOB): a job waiting in a lower queue for ``promote_knob`` x
the time it has run goes back to the top queue with its attained service reset. It is off by
default (``promote_knob=0``): without checkpoints a promoted job preempts others that lose
their progress, is demoted, preempted and promoted again, and long jobs never finish (Tiresias
pairs it with free checkpoints: ``--checkpoint 1``). Jobs that do not fit are skipped
(``backfill=false`` makes each queue order strict).

``same_queue=true`` (Tiresias' dlas-gpu, ``--model tiresias``): a queue is ordered by when each
job entered it, not by submission, and a waiting job may also preempt a running job of its own
queue that entered it after it in the same instant. Tiresias appends a job demoted while it
runs to its new queue's end, behind the jobs waiting there, then hands out GPUs in queue
order, so those take the demoted job's GPUs at once; after each event it moves a queue's
waiting jobs behind its running ones, so a job preempted waits ahead of those that waited
already (here: at its queue's front). Off by default: it preempts more.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Hashable, Iterable, Iterator
from itertools import chain
from typing import TYPE_CHECKING, Any

from mypy_extensions import mypyc_attr

from labhive.scheduler.core.model import Decision
from labhive.scheduler.policies.node_pool import NodePool
from labhive.scheduler.policies.preempt_probe import fails_on_paper, to_ends
from labhive.scheduler.policies.queued import QueuedJob, QueuedPolicy
from labhive.scheduler.policies.vc_nodes import VcNodes, per_vc_from_config

if TYPE_CHECKING:
    from labhive.scheduler.core.config import ClusterConfig

THRESHOLDS = (3250.0, 7200.0)
PROMOTE_KNOB = 0.0  # as Tiresias' dlas-gpu (its dlas-gpu-8 variant: 8, with free checkpoints)
QUANTUM = 300.0
_EPS = 1e-6


# open to subclasses written in Python, as QueuedPolicy is (docs/policies.md)
@mypyc_attr(allow_interpreted_subclasses=True)
class LasPolicy(QueuedPolicy):
    name = "las"
    preemptive = True
    BACKFILL = True

    def __init__(
        self,
        pool: NodePool,
        vc_gpus: dict[str, int],
        *,
        thresholds: tuple[float, ...] = THRESHOLDS,
        promote_knob: float = PROMOTE_KNOB,
        quantum: float = QUANTUM,
        same_queue: bool = False,
        backfill: bool | None = None,
        per_vc: bool = False,
        pool_factory: Any = None,
    ) -> None:
        # (each argument named: mypyc passes ``*args`` and ``**kwargs`` on to ``super()`` whole)
        super().__init__(pool, vc_gpus, backfill=backfill, per_vc=per_vc, pool_factory=pool_factory)
        self.same_queue = bool(same_queue)
        # same_queue: job id -> its rank in its queue (entries count up; a preempted job's
        # count down, to the front) and the time it entered the queue
        self._entry: dict[str, int] = {}
        self._entries = 0
        self._entered_at: dict[str, float] = {}
        self._fronts = 0
        self.thresholds = tuple(sorted(float(t) for t in thresholds))
        self.promote_knob = float(promote_knob)
        self.quantum = max(0.0, float(quantum))
        self._matured: list[tuple[float, int, str]] = []  # (quantum over, token, job id)
        levels = len(self.thresholds) + 1
        self._lowest = levels - 1  # the lowest queue's level
        self._running: list[dict[str, QueuedJob]] = [{} for _ in range(levels)]
        # per level: the running buckets of the queues below it, lowest first (the order the
        # victims are met in), the same dicts as ``_running``'s (a search skips the range)
        self._below = [self._running[:level:-1] for level in range(levels)]
        self._past = 0 if self.same_queue else 1  # victims from this many queues down on
        self._level_gpus = [0] * levels  # GPUs held by running jobs, per queue
        self._demotions: list[tuple[float, int, str]] = []  # (when, token, job id)
        self._promotions: list[tuple[float, int, str]] = []
        # a full pass's searches (level, GPUs, victims met) and tests of the victims' GPUs
        # (level, GPUs, enough?), logged while it runs; kept with the pool and ``_runs`` when
        # it changed nothing but its searches' moves (``_schedule``)
        self._log: list[tuple[int, int, bool | tuple[str, ...]]] | None = None
        # (the pool, ``_runs`` and ``_stopped`` after it, and what it asked)
        self._quiet: tuple[NodePool, int, int, list[tuple[int, int, bool | tuple[str, ...]]]] | None
        self._quiet = None
        self._unlimited: tuple[NodePool | None, bool] = (None, False)
        # searches on paper (``_fails_by_bound``): the pool, ``_runs`` and ``_upheavals`` at
        # the last one, and the victims it met
        self._upheavals = 0  # node faults, reconfigurations and real searches so far
        # the victims the last search met, while they are where it left them: forgotten at
        # each start, stop and upheaval (each moves nodes in the buckets or jobs in the pool)
        self._last_walk: tuple[str, ...] = ()
        self._freed = 0  # GPUs freed by runs stopped so far (``on_stopped``)
        self._stopped = 0  # runs stopped so far
        # by node count: ``_most_free`` when last found less ``_freed`` then (it is now at most
        # that plus ``_freed`` now: starts only take), kept while ``_upheavals`` is
        # ``_reach_at``; None where the pool may not be bounded so (not consolidated, or CPU
        # or memory limits)
        self._reach: dict[int, int] | None = None
        self._reach_at = -1

    def order_key(self, job: QueuedJob) -> Any:
        if self.same_queue:
            return (job.level, self._entry[job.job_id])
        return (job.level, job.seq)

    def _entered(self, job: QueuedJob) -> None:
        """same_queue: the job enters its (new) queue now, behind every job already there."""
        self._entry[job.job_id] = self._entries
        self._entered_at[job.job_id] = self._now
        self._entries += 1

    def line_key(self, job: QueuedJob) -> Hashable:
        return job.level

    def victims(self, job: QueuedJob, opportunistic: bool) -> Iterable[QueuedJob]:
        found = self._lower_than(job.level)
        if self.same_queue:
            found = chain(found, self._behind(job))
        if self.per_vc:
            return (v for v in found if v.vc == job.vc)
        return found

    def victim_gpus(self, job: QueuedJob, opportunistic: bool) -> int:
        gpus = sum(self._level_gpus[job.level + self._past :])
        # a full pass logs where they hold too few (``_quiet``); where they hold enough they
        # go on doing so until a job stops (demotions only move GPUs down the queues)
        if self._log is not None and self.pool.free_gpus + gpus < job.gpus:
            self._log.append((job.level, job.gpus, False))
        return gpus

    def _lower_than(self, level: int) -> Iterator[QueuedJob]:
        young = self._now - self.quantum + _EPS
        for bucket in self._below[level]:
            for job_id in reversed(bucket):  # no copy: see Capacity
                victim = bucket.get(job_id)
                if victim is not None and victim.started <= young:
                    yield victim

    def _first_victim(self, job: QueuedJob) -> QueuedJob | None:
        """The first of ``victims(job, ...)``: without a generator where the victims are
        ``_lower_than``'s alone (the bound asks only the first, ``_fails_by_bound``)."""
        if self.same_queue or self.per_vc:
            return next(iter(self.victims(job, False)), None)
        return self._first_lower(job.level)

    def _first_lower(self, level: int) -> QueuedJob | None:
        """The first of ``_lower_than(level)``, in one loop (nothing changes while it looks).
        Why: a contended LAS run asks it about three times per job arrived (issue 34)."""
        young = self._now - self.quantum + _EPS
        for bucket in self._below[level]:
            for job_id in reversed(bucket):
                victim = bucket[job_id]
                if victim.started <= young:
                    return victim
        return None

    def _behind(self, job: QueuedJob) -> Iterator[QueuedJob]:
        """same_queue: running jobs of ``job``'s queue that entered it after ``job`` in this
        instant (demoted now), the last to enter first: Tiresias hands out GPUs in queue
        order, the last lose them; a job that kept its GPUs is ahead of the waiting ones
        from then on, as Tiresias moves its waiting jobs behind the running ones."""
        young = self._now - self.quantum + _EPS
        entry = self._entry
        mine = entry[job.job_id]
        now = self._now - _EPS
        at = self._entered_at
        later = [
            v for v in self._running[job.level].values()
            if entry[v.job_id] > mine and v.started <= young and at[v.job_id] >= now
        ]  # fmt: skip
        later.sort(key=lambda v: entry[v.job_id], reverse=True)
        return iter(later)

    def _fails_on_paper(self, job: QueuedJob, opp: bool) -> bool:
        """The pass's test before a preemption search, in one loop where no VC quota is
        weighed (``preempt_probe.fails_on_paper``: the same answer and pool). A full pass
        logs the victims each search met (``_quiet``)."""
        if self.per_vc:
            return super()._fails_on_paper(job, opp)
        pool = self.pool
        limit = job.gpus + 2 * pool.max_node_gpus  # as ``_preempt_for``'s bound
        log = self._log
        if log is None:  # (not a full pass: its moves leave the pool where no pass left it)
            self._quiet = None
        walk = self._fails_by_bound(job, opp) if pool.free_gpus >= limit else None
        if walk is None:
            walked: list[str] = []
            if not fails_on_paper(
                pool, job.gang, self.victims(job, opp), pool.free_gpus, limit, walked
            ):
                self._upheaval()  # a real search follows: it releases and claims back
                self._log = None  # (and its pass is not kept as quiet)
                return False
            walk = tuple(walked)
        self._last_walk = walk
        if log is not None:
            log.append((job.level, job.gpus, walk))
        return True

    def _fails_by_bound(self, job: QueuedJob, opp: bool) -> tuple[str, ...] | None:
        """``fails_on_paper`` where the pool's free GPUs reach the search's bound and a bound
        shows the search fails: the victim met, moved as the search moves it; else None (make
        the search). The search meets one victim, then stops; for a gang wider than a node
        (consolidated) it fails unless the ``need`` most-free nodes hold the gang's GPUs once
        that victim's are free, and they gain at most that victim's GPUs. ``_most_free(need)``
        is kept by node count (``_reach``) with the GPUs stopped runs had freed then: starts
        only take, so now it is at most the kept figure plus what stops freed since (a node
        fault, a reconfiguration or a real search forgets it, ``_upheavals``); that short of
        the gang's GPUs less the victim's proves the search fails. The victim's nodes, GPUs
        and job then go to their ends (``to_ends``), unless the last search met it alone and
        nothing changed since (``_last_walk``: no start, stop or upheaval): nothing has
        moved since, so they are there already. Not on a pool with CPU or memory limits
        (``_may_keep``). Why: a contended LAS run makes 2.9 searches per job arrived, each
        meeting one victim (most often of one GPU) for a gang of 24 to 64 GPUs and failing,
        the victim the last search met 5 times in 6 (issue 34)."""
        # (a gang within a node: ``_out_of_reach`` cannot tell; per VC: no bound is asked)
        first = self._first_victim(job) if self.same_queue else self._first_lower(job.level)
        if first is None or not self._out_of_reach(job.gpus, first.gpus):
            return None
        walk = (first.job_id,)
        if walk != self._last_walk:
            to_ends(self.pool, first.job_id)
        return walk

    def _out_of_reach(self, gpus: int, freed: int) -> bool:
        """Do the most-free nodes a gang of ``gpus`` GPUs (wider than a node) needs hold
        fewer than ``gpus`` once ``freed`` more are free on them, by the kept bound
        (``_fails_by_bound``)? False where it cannot tell."""
        pool = self.pool
        kept = self._reach
        if self._reach_at != self._upheavals:  # (a new pool comes with one: ``_reconfigure``)
            self._reach_at = self._upheavals
            bounded = pool.locality == "consolidated" and self._unlimited_pool(pool)
            kept = self._reach = {} if bounded else None
        most = pool.max_node_gpus
        if kept is None or gpus <= most:
            return False
        need = -(-gpus // most)
        goal = gpus - freed - self._freed  # (the bound and the goal less the GPUs freed so far)
        bound = kept.get(need)
        if bound is None or bound >= goal:
            stopped = self._freed
            found = pool._most_free(need)
            kept[need] = found - stopped
            if found >= gpus - freed:
                return False
        return True

    # ---- a full pass that would change nothing, not run -----------------------------------

    def _schedule(
        self,
        out: list[Decision],
        only: QueuedJob | None = None,
        groups: set[Hashable] | None = None,
    ) -> None:
        """A full pass, unless it would repeat the last one (``_still_quiet``); after one
        that started, stopped and moved nothing but its failed searches' victims, kept
        (``_quiet``) with what it asked. Why: a contended LAS run gets a tick about once per
        job arrived (a demotion, or a run's quantum over), and each ran a full pass, with
        its two preemption searches, that started nothing 99 times in 100 (issue 34)."""
        if only is not None or groups is not None:  # (a search or start there forgets it)
            super()._schedule(out, only, groups)
            return
        quiet = self._quiet
        if quiet is not None and self._still_quiet(*quiet):
            return
        self._quiet = None
        log: list[tuple[int, int, bool | tuple[str, ...]]] = []
        # (as the attribute's type, not narrowed to a list: mypyc would read ``self._log`` below
        # as one, where the pass may have set it None)
        logged: list[tuple[int, int, bool | tuple[str, ...]]] | None = log
        self._log = logged
        had = len(out)
        super()._schedule(out)
        kept = self._log is log
        self._log = None
        if kept and len(out) == had and self._may_keep(self.pool):
            self._quiet = (self.pool, self._runs, self._stopped, log)

    def _may_keep(self, pool: NodePool) -> bool:
        """May a quiet pass be kept here? Not under Tiresias' same-queue order (its victims
        depend on when each entered its queue, to the instant), per-VC quotas, backfill
        weighing declared limits against the clock, without kept heads (``_touched`` is
        marked only with them: a pass fetching every head anew), nor on a pool with CPU or memory
        limits: a failed search adds back and takes again their float counters, which need
        not come back to the same bits, so repeating one is not a no-op."""
        if self.same_queue or self.per_vc or self._limited or self._line_heads is None:
            return False  # (without kept heads no line is marked when a job joins or leaves)
        return self._unlimited_pool(pool)

    def _unlimited_pool(self, pool: NodePool) -> bool:
        """Has no node of ``pool`` a CPU or memory limit? (Kept per pool.)"""
        if self._unlimited[0] is not pool:
            unlimited = all(
                n.cpu == math.inf and n.memory_mb == math.inf for n in pool.nodes.values()
            )
            self._unlimited = (pool, unlimited)
        return self._unlimited[1]

    def _still_quiet(
        self,
        pool: NodePool,
        runs: int,
        stopped: int,
        log: list[tuple[int, int, bool | tuple[str, ...]]],
    ) -> bool:
        """Would a full pass now do exactly what the kept quiet one did? Yes when, since
        it, no job started or stopped (the pool's free GPUs per node are the same: each try
        and refusal answers the same), no search ran outside a full pass, no node went down
        or up, no cluster was reconfigured (these forget ``_quiet``), each line a job joined
        or left is headed by the same job (a pass tries only heads), and what it asked of the
        running jobs answers the same: for each head it found the victims too few for, still
        too few (demotions only add to the lower queues' GPUs, so "enough" stays so), and for
        each search, the victims it met, in order (a demotion or a run's quantum ending may
        change them). Each search then fails again, moving the same victims to the same ends
        of the same buckets in the same order: that leaves the pool as it is, as the pass's
        own moves left it there. Where jobs started or stopped since, or a search's first
        victim changed (``_replays``), the pass is not run either where it would fail the
        same way, but its searches' moves are made."""
        if pool is not self.pool or self._limited:
            return False
        starts, stops = runs != self._runs, stopped != self._stopped
        if self._touched:
            kept = self._line_heads
            assert kept is not None  # (``_may_keep``)
            for group in self._touched:
                head, was = self._head(group), kept.get(group)
                if (head.seq if head else None) != (was[1] if was else None):
                    return False
            # each headed by the job kept, under the same key (a waiting job's level is its
            # line's): ``_kept_heads`` would keep each entry and count as it is, so they need
            # not be looked at again. Why: replayed passes left them marked, and each replay
            # fetched every line a job had joined since the last pass made (issue 34)
            self._touched.clear()
        if starts or stops:
            return self._replays(pool, log, stops)
        free = pool.free_gpus
        held = self._level_gpus
        extra = 2 * pool.max_node_gpus
        first, below = None, -1  # (the first victim below a level: asked once per level)
        for level, gpus, asked in log:
            if asked is False:
                if free + sum(held[level + 1 :]) >= gpus:
                    return False
                continue
            limit = gpus + extra
            if free >= limit:  # (the search meets one victim, the first: without a generator)
                if level != below:
                    first, below = self._first_lower(level), level
                if asked != (() if first is None else (first.job_id,)):
                    return self._replays(pool, log, False)  # (another victim: moved, not kept)
                continue
            freed, met = free, []
            for victim in self._lower_than(level):
                met.append(victim.job_id)
                freed += victim.gpus
                if freed >= limit:
                    break
            if tuple(met) != asked:
                return False
        return True

    def _replays(
        self, pool: NodePool, log: list[tuple[int, int, bool | tuple[str, ...]]], stops: bool
    ) -> bool:
        """``_still_quiet`` where jobs started or stopped since the kept pass, or a search's
        first victim changed (a demotion or a quantum ending): the same heads, and each head
        is refused by placement still: a start only takes GPUs from nodes; after a stop, every
        kept line's GPU count must be refused by free counts (``_all_refused``: then each head
        the pass tries is refused, and each it skipped is skipped still). Each head whose
        victims held too few still finds too few (checked: a stop may free the victims' GPUs).
        Each search the pass made fails by the bound with one victim (``_fails_by_bound``)
        where the free GPUs reach its bound (then it meets one victim, the first, whichever it
        is now, and the free GPUs and victims held pass the pass's own tests) and the bound
        (kept across starts and stops) says so: that is checked, and then each search's victim
        moved to its ends, in the pass's order, as the searches would (starts and stops moved
        nodes in the buckets: the moves are not the no-op they are in an exact repeat). The
        pass is then kept as if made now, with the victims met now. Why: a contended LAS run
        keeps a quiet pass, then a job submitted starts at once, and the next tick's pass, the
        same, was made in full (one in four jobs arrived); and the pass after a finish that
        freed too little for any waiting gang, 1.2 per job arrived with 2.7 searches, was
        made in full too (issue 34)."""
        if stops and not self._all_refused(pool):
            return False
        free = pool.free_gpus
        held = self._level_gpus
        extra = 2 * pool.max_node_gpus
        victims: list[str] = []
        changed = False  # (a victim other than the one logged: the log is made anew)
        first, below = None, -1  # (the first victim below a level: asked once per level)
        for level, gpus, asked in log:
            if asked is False:
                if free + sum(held[level + 1 :]) >= gpus:
                    return False
                continue
            if free < gpus + extra:
                return False
            if level != below:
                first, below = self._first_lower(level), level
            if first is None or not self._out_of_reach(gpus, first.gpus):
                return False
            victims.append(first.job_id)
            changed = changed or asked != (first.job_id,)
        last = ""
        for job_id in victims:
            if job_id != last:  # (the same victim again at once: at its ends already)
                to_ends(pool, job_id)
                last = job_id
        if victims:
            self._last_walk = (last,)
            if changed:
                walks = iter(victims)
                log = [e if e[2] is False else (e[0], e[1], (next(walks),)) for e in log]
        self._quiet = (pool, self._runs, self._stopped, log)
        return True

    def _all_refused(self, pool: NodePool) -> bool:
        """Does placement refuse, by free counts alone, every GPU count a kept line's head
        needs (``_kept_sizes``: the heads are the kept pass's, ``_still_quiet``)? Asked of
        the pass's own kept refusals (``SizeRefusals``: as ``NodePool.may_fit`` answers), the
        counts it holds refused not asked one by one (most, on a contended cluster)."""
        sizes = self._kept_sizes
        if sizes is None:  # (kept with backfill only)
            return False
        kept = self._sizes
        refused = kept.refused
        for gpus in sizes.keys() - kept.held(pool).keys():  # noqa: SIM110 (no generator)
            if not refused(pool, gpus):
                return False
        return True

    def _node_health(self, node: str, healthy: bool, out: list[Decision], reason: str) -> None:
        self._quiet = None  # (a node up changes the pool's buckets without a start or stop)
        self._upheaval()
        super()._node_health(node, healthy, out, reason)

    def _reconfigure(self, config: ClusterConfig, out: list[Decision]) -> None:
        self._quiet = None
        self._upheaval()
        super()._reconfigure(config, out)

    def _upheaval(self) -> None:
        """A node fault, a reconfiguration or a real search: the kept bound (``_reach``) and
        the last walk's place are forgotten."""
        self._upheavals += 1
        self._last_walk = ()

    def _demote(self, job: QueuedJob) -> None:
        """A running job crosses its queue's threshold: out of its queue's bucket and into the
        end of the next one down, its GPUs counted there (``on_started`` and ``on_stopped``
        file a run so, each in its own body: a contended run starts, stops and demotes about
        once per job arrived, issue 34)."""
        level = job.level
        job.level = lower = level + 1
        del self._running[level][job.job_id]
        self._running[lower][job.job_id] = job
        held = self._level_gpus
        held[level] -= job.gpus
        held[lower] += job.gpus

    def on_started(self, job: QueuedJob) -> None:
        self._last_walk = ()  # (a start moves nodes in the buckets and jobs in the pool)
        self._running[job.level][job.job_id] = job
        self._level_gpus[job.level] += job.gpus
        self._plan_demotion(job)
        # a run's quantum end, filed for the wake-up (``next_wakeup``), only below the top
        # queue: a run in the top queue is below none, and its demotion files the same entry
        # while it is young (filed and dropped once a start, issue 34)
        if job.level and self.quantum > 0:
            heapq.heappush(self._matured, (self._now + self.quantum, job.token, job.job_id))

    def _plan_demotion(self, job: QueuedJob) -> None:
        level = job.level
        if level < self._lowest and job.gpus > 0:  # (a job in the lowest queue stays there)
            now, gpus = self._now, job.gpus
            served = job.attained + gpus * (now - job.started)
            when = now + (self.thresholds[level] - served) / gpus
            # (``max(when, now)`` without the call: the later, ``when`` where equal)
            heapq.heappush(self._demotions, (now if now > when else when, job.token, job.job_id))

    def on_stopped(self, job: QueuedJob) -> None:
        job.attained += job.gpus * (self._now - job.started)  # (LAS's alone: summed here)
        self._freed += job.gpus
        self._stopped += 1
        self._last_walk = ()  # (a stop moves nodes in the buckets)
        del self._running[job.level][job.job_id]
        self._level_gpus[job.level] -= job.gpus
        # the queue its attained service puts it in (a run may cross a threshold and stop
        # before its demotion's tick)
        level = bisect.bisect_right(self.thresholds, job.attained + _EPS)
        if level > job.level:
            job.level = level
            if self.same_queue:
                self._entered(job)
        elif self.same_queue:  # ran ahead of its queue's waiting jobs: waits ahead of them
            self._fronts += 1
            self._entry[job.job_id] = -self._fronts

    def _enqueue(self, job: QueuedJob) -> None:
        if self.same_queue and job.job_id not in self._entry:
            self._entered(job)  # a new job (a preempted one keeps its place)
        super()._enqueue(job)
        if job.level > 0 and self.promote_knob > 0 and job.gpus > 0:
            ran = job.attained / job.gpus
            when = self._now + self.promote_knob * ran
            heapq.heappush(self._promotions, (when, job.token, job.job_id))

    def on_tick(self) -> None:
        now = self._now + _EPS
        heap = self._demotions
        while heap and heap[0][0] <= now:
            _, token, job_id = heapq.heappop(heap)
            job = self._jobs.get(job_id)
            if job is None or not job.running or job.token != token:
                continue
            self._demote(job)
            if self.same_queue:
                self._entered(job)
            self._plan_demotion(job)
            if job.started + self.quantum > self._now:  # newly preemptible once it matures
                heapq.heappush(self._matured, (job.started + self.quantum, job.token, job_id))
        while self._promotions and self._promotions[0][0] <= now:
            _, token, job_id = heapq.heappop(self._promotions)
            job = self._jobs.get(job_id)  # (its token unchanged: it still waits)
            if job is None or job.token != token:
                continue
            # (``requeue_waiting``, but leaving its line before its level changes: the line
            # it leaves is looked at again by the next pass, ``_kept_heads``)
            self._dequeue(job)
            job.level = 0
            job.attained = 0.0
            if self.same_queue:
                self._entered(job)  # at the top queue's end
            self._enqueue(job)

    def next_wakeup(self) -> float | None:
        """The next demotion, promotion or (while a waiting job is in a higher queue than a
        running one) end of a run's quantum; the heaps' stale entries dropped on the way.
        Asked after every decision: each heap is walked inline (a list of heaps with their
        tests, built per call, was 4% of a contended run: issue 34)."""
        jobs = self._jobs
        wake = None
        heap = self._demotions
        while heap:
            when, token, job_id = heap[0]
            job = jobs.get(job_id)
            if job is not None and job.running and job.token == token:
                wake = when
                break
            heapq.heappop(heap)
        heap = self._promotions
        if heap:  # (none without promotions, the default)
            while heap:
                when, token, job_id = heap[0]
                job = jobs.get(job_id)  # (its token unchanged: it still waits)
                if job is not None and job.token == token:
                    wake = when if wake is None or when < wake else wake
                    break
                heapq.heappop(heap)
        heap = self._matured
        now = self._now + _EPS
        while heap and heap[0][0] <= now:
            heapq.heappop(heap)  # its quantum is over: the passes since saw it
        if heap and self._groups:  # a waiting job may preempt a lower run once its quantum
            # is over (no waiting job: no top queue, nothing dropped). The top queue is asked
            # only of a live run below the top one: a run in the top queue is below none, and
            # is dropped whatever the top (a later demotion files it again while young). Why:
            # a run's entry is met most often in the top queue (a job starts there), and
            # ranking the waiting heads for it was a call and two ``_head``s per job arrived.
            # (Lines may hold only stale entries, no job waiting: ``_top_level`` says None.)
            top = -1  # (not asked yet)
            while heap:
                when, token, job_id = heap[0]
                job = jobs.get(job_id)
                if job is not None and job.running and job.token == token and job.level:
                    if top < 0:
                        found = self._top_level()
                        if found is None:  # no job waits: nothing dropped from here on
                            break
                        top = found
                    if job.level > top:
                        wake = when if wake is None or when < wake else wake
                        break
                heapq.heappop(heap)
        return wake

    def _top_level(self) -> int | None:
        """The highest queue (lowest level) a waiting job is in, or None. With backfill and
        no per-VC lines a line's key is (level, GPU count): the lines are met in level order
        and the first with a live head answers (every line's head was fetched at each call,
        4% of a contended run: issue 34)."""
        if self.backfill and not self.per_vc:
            for group in sorted(self._groups):  # type: ignore[type-var]  # (level, GPUs)
                head = self._head(group)
                if head is not None:
                    return head.level
            return None
        heads = [h for g in list(self._groups) if (h := self._head(g)) is not None]
        return min(h.level for h in heads) if heads else None

    def _forget(self, gone: QueuedJob) -> None:
        # (``_forget``, not ``_remove``: a finish reaches it from ``handle`` directly)
        super()._forget(gone)
        if self.same_queue:  # (only its order keeps them)
            self._entry.pop(gone.job_id, None)
            self._entered_at.pop(gone.job_id, None)

    def preempt_reason(self, victim: QueuedJob) -> str:
        return f"a job in a higher LAS queue needs its GPUs (it is in queue {victim.level})"

    def wait_reason(self, job: QueuedJob) -> str:
        return (
            f"in LAS queue {job.level} with {job.attained:.0f} GPU-seconds attained; needs "
            f"{job.gpus} GPUs, {self.pool.free_gpus} free"
        )


def create(config: ClusterConfig, **options: Any) -> LasPolicy | VcNodes:
    return per_vc_from_config(
        LasPolicy,
        config,
        options,
        thresholds=THRESHOLDS,
        promote_knob=PROMOTE_KNOB,
        quantum=QUANTUM,
        same_queue=False,
        per_vc=False,
    )
