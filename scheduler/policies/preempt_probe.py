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

from labhive.scheduler.policies.node_pool import Gang, NodePool


class ReleaseProbe:
    """The pool as it would be with the released jobs' GPUs free, kept as counts. ``may_fit``
    is False only where ``NodePool.place`` would refuse the gang on that pool: a gang within
    a node needs a node with as many free GPUs; a wider one needs them on its ``need``
    most-free nodes (``NodePool._most_free``); ``anywhere`` placement is not bounded here."""

    __slots__ = ("_counts", "_extra", "_maybe", "_need", "_pool", "_total", "_wide")

    def __init__(self, pool: NodePool, gang: Gang) -> None:
        self._pool = pool
        self._total = total = gang.gpus
        self._extra: dict[str, int] = {}  # node -> GPUs the released jobs hold there
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
        """Count the job's GPUs as free on its nodes (a gang's tasks on one node come in a
        row: counted once per row)."""
        nodes, extra, counts, wide = self._pool.nodes, self._extra, self._counts, self._wide
        tasks = self._pool._jobs[job_id][0]
        last = len(tasks) - 1
        gpus = 0
        for i, t in enumerate(tasks):
            gpus += len(t.gpus)
            name = t.node
            if i < last and tasks[i + 1].node == name:
                continue
            node = nodes[name]
            if node.healthy:  # (one down is in no bucket: placement never sees it)
                had = extra.get(name, 0)
                extra[name] = had + gpus
                before = len(node.free) + had
                if wide:
                    counts[before] -= 1
                    counts[before + gpus] += 1
                elif before + gpus >= self._total:
                    self._maybe = True
            gpus = 0

    def may_fit(self) -> bool:
        """False: ``place`` would refuse the gang after these releases."""
        if self._maybe or not self._wide:
            return self._maybe
        nodes, total, counts, goal = self._need, 0, self._counts, self._total
        # as NodePool._most_free_reaches: stop once the nodes left, each at most as free as
        # the count reached, cannot make up the rest (on a busy cluster the first steps)
        for f in range(len(counts) - 1, 0, -1):
            if total + nodes * f < goal:
                return False
            n = counts[f]
            if n >= nodes:
                return True  # total + nodes * f >= goal, just seen
            total += n * f
            nodes -= n
        return total >= goal


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
