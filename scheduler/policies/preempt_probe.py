"""A preemption search tried on paper first: what releasing running jobs one by one would free,
without releasing them, and what a failed search leaves behind in the pool.

Why: on a contended cluster nearly every search fails (issue 34: 45,784 of 45,973 LAS searches
over the first 20,000 jobs of the contended replay, nearly all for gangs wider than a node),
and a failed search released its victims one by one, asked for a placement after each, and
claimed them all back: most of a contended LAS run. ``ReleaseProbe`` answers "could the gang
fit now?" from counts alone, exactly where placement would refuse (the same bounds
``NodePool._plan`` refuses by), and "maybe" otherwise; only a "maybe" runs the real search.

A failed search is not free of effects, though: releasing a job and claiming it back moves each
node it holds to the end of its free-count bucket (placement reads buckets in order), its GPUs
to the end of the node's ``used`` and the job to the end of the pool's jobs. ``undo_order``
makes exactly those moves, so the decisions that follow are byte-identical to the search
that mutated and undid (``tests/test_preempt_probe.py`` holds the two to the same pool, order
included, after every event).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Protocol

from labhive.scheduler.policies.node_pool import Gang, NodePool, PoolNode, Span


class Victim(Protocol):
    """What a search reads of a running job it may preempt (a ``QueuedJob``)."""

    @property
    def job_id(self) -> str: ...

    @property
    def gpus(self) -> int: ...


class ReleaseProbe:
    """The pool as it would be with the released jobs' GPUs free, kept as counts. ``may_fit``
    is False only where ``NodePool.place`` would refuse the gang on that pool: a gang within
    a node needs a node with as many free GPUs; a wider one needs them on its ``need``
    most-free nodes (``NodePool._most_free``); ``anywhere`` placement is not bounded here."""

    __slots__ = ("_counts", "_extra", "_maybe", "_need", "_pool", "_total", "_wide")

    def __init__(self, pool: NodePool, gang: Gang) -> None:
        self._pool = pool
        self._total = total = gang.gpus
        self._extra: dict[PoolNode, int] = {}  # node -> GPUs the released jobs hold there
        most = pool.max_node_gpus
        consolidated = pool.locality == "consolidated"
        self._wide = consolidated and total > most
        self._need = math.ceil(total / most) if self._wide else 0
        # wide: nodes per free-GPU count, as the releases would leave them
        self._counts = list(map(len, pool._buckets)) if self._wide else []
        buckets = pool._buckets
        # within a node: some node has the GPUs already (untouched nodes never change)
        self._maybe = not consolidated or (
            not self._wide and any(buckets[f] for f in range(max(total, 1), most + 1))
        )

    def release(self, job_id: str) -> None:
        """Count the job's GPUs as free on its nodes, a span (a row of its tasks on one node)
        at a time, as ``NodePool.release`` frees them (task by task, a trace gang of N one-GPU
        tasks cost N steps here: issue 34)."""
        extra, total = self._extra, self._total
        counts = self._counts if self._wide else None
        for node, gpus, _, _ in self._pool._jobs[job_id][1]:
            if node.healthy:  # (one down is in no bucket: placement never sees it)
                n = len(gpus)
                had = extra.get(node, 0)
                extra[node] = had + n
                before = len(node.free) + had
                if counts is not None:
                    counts[before] -= 1
                    counts[before + n] += 1
                elif before + n >= total:
                    self._maybe = True

    def may_fit(self) -> bool:
        """False: ``place`` would refuse the gang after these releases."""
        if self._maybe or not self._wide:
            return self._maybe
        return _reaches(self._counts, self._need, self._total)


def surely_refused(pool: NodePool, gang: Gang) -> bool:
    """Would ``pool.place`` refuse the gang now? True only where ``NodePool._plan`` would, by
    GPU counts alone: no node with as many free GPUs (a gang within a node), or too few on
    its ``need`` most-free nodes (a wider one); False where it cannot tell (CPU, memory,
    ``anywhere`` placement)."""
    total = gang.gpus
    if total > pool.free_gpus:
        return True
    if pool.locality != "consolidated":
        return False
    most = pool.max_node_gpus
    if total > most:
        return pool._most_free(math.ceil(total / most)) < total
    buckets = pool._buckets
    return not any(buckets[f] for f in range(max(total, 1), most + 1))


def undo_order(pool: NodePool, job_ids: list[str]) -> None:
    """What ``pool.release`` of each job in turn, then ``pool.claim`` of each back in the same
    order, leaves changed: each task's node moved to the end of its bucket (in claim order),
    its GPUs to the end of the node's ``used``, the job to the end of the pool's jobs, and
    finite CPU and memory counters added to then taken from in that order (floats: the same
    sums, rounded alike)."""
    jobs, buckets = pool._jobs, pool._buckets
    held = [(job_id, jobs.pop(job_id)) for job_id in job_ids]
    for _, (_, spans) in held:  # the releases' CPU and memory, in their order
        for node, _, cpus, mems in spans:  # (empty where the node has no limit)
            for cpu in cpus:
                node.cpu_free += cpu
            for mem in mems:
                node.memory_free += mem
    for job_id, (tasks, spans) in held:  # the claims: a span is a row of tasks on one node
        for node, gpus, cpus, mems in spans:
            if node.healthy:  # one move per span, as claim's unfile and file
                bucket = buckets[len(node.free)]
                del bucket[node.name]
                bucket[node.name] = node
            for cpu in cpus:
                node.cpu_free -= cpu
            for mem in mems:
                node.memory_free -= mem
            used = node.used
            for g in gpus:
                del used[g]
                used[g] = job_id
        jobs[job_id] = (tasks, spans)  # the spans claim would build from the same tasks


def to_ends(pool: NodePool, job_id: str) -> None:
    """``undo_order`` of one job on a pool without CPU or memory limits: its nodes to the
    ends of their buckets, its GPUs to the end of their nodes' ``used``, the job to the end
    of the pool's jobs (a failed search meeting one victim, most often of one GPU)."""
    jobs, buckets = pool._jobs, pool._buckets
    held = jobs.pop(job_id)
    jobs[job_id] = held
    for node, gpus, _, _ in held[1]:
        if node.healthy:
            bucket = buckets[len(node.free)]
            del bucket[node.name]
            bucket[node.name] = node
        used = node.used
        for g in gpus:
            del used[g]
            used[g] = job_id


def fails_on_paper(
    pool: NodePool,
    gang: Gang,
    victims: Iterable[Victim],
    freed: int,
    limit: int,
    walked: list[str] | None = None,
) -> bool:
    """``QueuedPass._fails_on_paper`` without a per-VC quota, in one loop: the victims walked
    in their order, what each frees counted as ``ReleaseProbe`` counts it, and each moved as
    ``undo_order`` moves it (its nodes to the end of their buckets, its GPUs to the end of
    their nodes' ``used``, itself to the end of the pool's jobs) as it is met, not after.
    True where every placement the search would ask for is refused; the pool is then left
    as release and claim-back leave it. False ("the search may succeed: make it"), with the
    victims met so far moved already: harmless, as the real search releases each of them
    (placement refuses, by counts alone, at every step before the one that said "may"), and
    a release takes a node out of its bucket, a GPU out of ``used`` and a job out of the
    pool's jobs wherever they stood. Finite CPU and memory counters are added to and taken
    from only once the search is shown to fail, all the adds first, as ``undo_order`` (the
    same float sums). ``walked``, if given, gets the ids of the victims met, in order.

    Why: on the contended replay a search walks one victim (the free GPUs already reach the
    search's bound) and fails, four times per job arrived; the probe object, its calls and
    ``undo_order``'s second walk were most of its cost (issue 34)."""
    total = gang.gpus
    most = pool.max_node_gpus
    buckets = pool._buckets
    consolidated = pool.locality == "consolidated"
    counts: list[int] | None = None
    need = 0
    if consolidated and total > most:  # wide: nodes per free count, as the releases leave them
        counts = list(map(len, buckets))
        need = -(-total // most)
        maybe = False
    else:  # within a node: some node has the GPUs already (untouched nodes never change)
        maybe = not consolidated or any(buckets[f] for f in range(max(total, 1), most + 1))
    extra: dict[PoolNode, int] = {}  # node -> GPUs the victims met hold there
    jobs = pool._jobs
    met: list[tuple[Span, ...]] = []  # their spans, for finite CPU and memory
    finite = False
    for victim in victims:
        job_id = victim.job_id
        if walked is not None:
            walked.append(job_id)
        held = jobs.pop(job_id)
        jobs[job_id] = held  # where claim would put it back
        spans = held[1]
        met.append(spans)
        for node, gpus, cpus, mems in spans:
            if node.healthy:  # (one down is in no bucket: placement never sees it)
                n = len(gpus)
                had = extra.get(node, 0)
                extra[node] = had + n
                free = len(node.free)
                if counts is not None:
                    counts[free + had] -= 1
                    counts[free + had + n] += 1
                elif free + had + n >= total:
                    maybe = True
                bucket = buckets[free]  # claim's unfile and file
                del bucket[node.name]
                bucket[node.name] = node
            if cpus or mems:
                finite = True
            used = node.used
            for g in gpus:
                del used[g]
                used[g] = job_id
        freed += victim.gpus
        if freed >= total:
            if maybe or (counts is not None and _reaches(counts, need, total)):
                return False
            if freed >= limit:
                break
    if finite:
        _add_and_take(met)
    return True


def _reaches(counts: list[int], nodes: int, goal: int) -> bool:
    """A wide gang's test after releases: do the ``nodes`` most-free nodes, by ``counts``
    (nodes per free-GPU count), hold ``goal`` GPUs? As ``NodePool._most_free_reaches``, it
    stops once the nodes left, each at most as free as the count reached, cannot make up
    the rest (on a busy cluster the first steps)."""
    total = 0
    for f in range(len(counts) - 1, 0, -1):
        if total + nodes * f < goal:
            return False
        n = counts[f]
        if n >= nodes:
            return True
        total += n * f
        nodes -= n
    return total >= goal


def _add_and_take(met: list[tuple[Span, ...]]) -> None:
    """The releases' CPU and memory added back, all of them first, then the claims' taken,
    in ``undo_order``'s order (floats: the same sums, rounded alike)."""
    for spans in met:
        for node, _, cpus, mems in spans:
            for cpu in cpus:
                node.cpu_free += cpu
            for mem in mems:
                node.memory_free += mem
    for spans in met:
        for node, _, cpus, mems in spans:
            for cpu in cpus:
                node.cpu_free -= cpu
            for mem in mems:
                node.memory_free -= mem
