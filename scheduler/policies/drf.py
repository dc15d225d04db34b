"""DRF: Dominant Resource Fairness over GPUs, CPU and memory, between users.

A user's dominant share is the largest of their running jobs' shares of the cluster's GPUs,
CPU and memory (dimensions the cluster config gives no size for are left out). The user with
the smallest dominant share starts their next job first; each user's jobs keep submission
order, and a user whose next job cannot be placed is passed over until resources free up.
Non-preemptive. Jobs without a user count as one anonymous user.

Kept ranked by ``HeadIndex`` (``head_index.py``). With backfill a user has a line per GPU
count, and re-filing them all at each start and stop grew with the backlog (issue 34). So a
user's share that *rises* (a job starts) re-files none of them: the index meets a line ranked
too early at its kind's top and re-files it then (``lazy``), with the share its user had
when the pass began (``_armed``: within a pass a user's other lines keep the rank the pass
found them at, as a scan ranking every line at the pass's start would). One that *falls* (a
job stops, between passes) re-files before the next pass only the lines filed above the
share now (``touch``; typically the line whose job started, re-filed then); those filed at
or below it are ranked too early or right, so ``lazy`` as after a rise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from functools import partial
from itertools import repeat
from operator import add, attrgetter, sub
from typing import TYPE_CHECKING, Any, Final

from mypy_extensions import mypyc_attr

from labhive.scheduler.core.model import Decision
from labhive.scheduler.policies.head_index import Entry, HeadIndex
from labhive.scheduler.policies.queued import QueuedJob, QueuedPolicy, from_config

if TYPE_CHECKING:
    from labhive.scheduler.core.config import ClusterConfig
    from labhive.scheduler.policies.node_pool import NodePool

#: A gang's GPUs, CPU and memory, the order of a user's usage (``DrfPolicy._add``).
_DEMAND = attrgetter("gpus", "cpu", "memory_mb")


#: ``DrfPolicy._mode``: the general hooks (pure Python binds the mode's on the instance), or
#: compiled, where an instance has no dict to bind them in, the mode's, asked by the general
#: hooks: with the index, without backfill (a line per user) or with it (lines split by size).
_GENERAL: Final = 0
_LINE: Final = 1
_SPLIT: Final = 2


# open to subclasses written in Python, as QueuedPolicy is (docs/policies.md)
@mypyc_attr(allow_interpreted_subclasses=True)
class DrfPolicy(QueuedPolicy):
    name = "drf"
    HEAD_INDEX = True  # a line per user: a pass must not rank every waiting user afresh
    _mode = _GENERAL  # (set by ``_bind_hooks`` where compiled)

    def __init__(
        self,
        pool: NodePool,
        vc_gpus: dict[str, int],
        *,
        backfill: bool | None = None,
        per_vc: bool = False,
        pool_factory: Any = None,
    ) -> None:
        # (each argument named: mypyc passes ``*args`` and ``**kwargs`` on to ``super()`` whole)
        super().__init__(pool, vc_gpus, backfill=backfill, per_vc=per_vc, pool_factory=pool_factory)
        self._usage: dict[str, list[float]] = {}
        self._share: dict[str, float] = {}  # dominant_share per user, kept by ``_add``
        self._sizes_of_pool: tuple[float, float, float] = (0.0, 0.0, 0.0)  # those shares are of
        self._gpus_only: float = 0.0  # its GPUs, where a share counts them alone (else 0)
        # with backfill, per user: a share at or above the key of each of its lines filed and
        # not touched since (``_stopped_split``)
        self._peak: dict[str, float] = {}
        self._reshare(self.pool)
        factory = self._pool_factory
        if factory is not None:
            # a reconfigured cluster's pool: every share of its size as it is made (before it
            # replaces the old one), not checked for at every start, stop and filing
            self._pool_factory = lambda config: self._reshare(factory(config))
        # users whose lines may be filed below their rank since the last pass began
        self._risen: set[str] = set()
        self._armed: dict[str, float] = {}  # their shares when the pass began (``rekey``)
        if self._index is not None:
            self._index.rekey = self._rekey
            self._bind_hooks()

    def line_key(self, job: QueuedJob) -> Hashable:
        return job.user

    def group_priority(self, head: QueuedJob) -> Any:
        if self._mode == _SPLIT:  # (compiled: ``_bind_hooks``)
            return self._peaked_priority(head)
        return (self._share.get(head.user, 0.0), head.seq)

    def _peaked_priority(self, head: QueuedJob) -> Any:
        """``group_priority`` with backfill (``_bind_hooks``): every key filed is one (or a
        ``_rekey``), so the user's ``_peak`` is raised to its share here."""
        user = head.user
        share = self._share.get(user, 0.0)
        if share > self._peak.get(user, -1.0):
            self._peak[user] = share
        return (share, head.seq)

    def dominant_share(self, user: str) -> float:
        return _share_of(self._usage.get(user, (0.0, 0.0, 0.0)), _sizes(self.pool))

    def _bind_hooks(self) -> None:
        """With the index, the start and stop hooks of this policy's mode, bound once: a
        start without backfill is ``_add`` alone (its line was touched as the job left it), a
        pass without backfill arms nothing (no user is ever ``_risen``). Why: the general
        hooks asked for the index and backfill at every start and stop, and ``_add`` was a
        second frame under each; the pass's override was a frame a pass (issue 34: about 25
        bytecodes per arrival of a contended DRF run). The index and backfill are fixed for
        a policy's life (``QueuedPolicy.__init__``)."""
        assert self._index is not None
        self._touch = self._index.touch  # (the dirty set's own ``add``, never replaced)
        try:
            hooks: dict[str, Any] = vars(self)
        except TypeError:  # compiled (mypyc): no instance dict; the general hooks ask the mode
            self._mode = _SPLIT if self.backfill else _LINE
            return
        if self.backfill:
            hooks["on_started"] = self._started_risen
            hooks["on_stopped"] = self._stopped_split
            hooks["group_priority"] = self._peaked_priority
        else:
            hooks["on_started"] = partial(self._add, add)
            hooks["on_stopped"] = self._stopped_line
            hooks["_indexed_pass"] = partial(QueuedPolicy._indexed_pass, self)

    def _add(self, op: Callable[[float, float], float], job: QueuedJob) -> str:
        """Add (``op`` ``add``, at a start) or take away (``sub``, at a stop) the job's GPUs,
        CPU and memory to or from its user's usage, and work out the user's share again: the
        user.

        The three sums in one ``map`` over the gang's (``_DEMAND``), not three statements
        ``usage[i] += sign * x``: the same floats (``u - x`` is ``u + -1 * x`` exactly), and
        the three were half of ``_add``'s cost, at every start and stop (issue 34)."""
        user = job.user
        try:
            usage = self._usage[user]
        except KeyError:
            usage = self._usage[user] = [0.0, 0.0, 0.0]
        usage[:] = map(op, usage, _DEMAND(job.gang))
        # Over the pool's sizes kept by ``_reshare``, not read afresh (at every start and
        # stop, issue 34); where the cluster gives CPU and memory no size, the GPUs' share
        # inline, as ``_share_of`` works it out (the same division): a call at every start
        # and stop was a fifth of DRF's own cost.
        gpus = self._gpus_only
        self._share[user] = usage[0] / gpus if gpus else _share_of(usage, self._sizes_of_pool)
        return user

    def _reshare(self, pool: NodePool) -> NodePool:
        """The pool that shares are of (a reconfigured cluster's, as it is made): every user's
        share of its size."""
        sizes = self._sizes_of_pool = _sizes(pool)
        self._gpus_only = sizes[0] if not sizes[1] and not sizes[2] else 0
        self._share = {user: _share_of(usage, sizes) for user, usage in self._usage.items()}
        # the keys filed are of the old sizes: each user's next stop walks its lines
        self._peak = dict.fromkeys(self._peak, math.inf)
        return pool

    def on_started(self, job: QueuedJob) -> None:
        """Without the index (with it, the mode's own hook: ``_bind_hooks``; compiled, this
        one calls it)."""
        mode = self._mode
        if mode == _SPLIT:
            self._started_risen(job)
        elif mode == _LINE:
            self._add(add, job)
        else:
            self._add(add, job)
            self.priority_changed(job)

    def on_stopped(self, job: QueuedJob) -> None:
        """Without the index (with it, the mode's own hook: ``_bind_hooks``; compiled, this
        one calls it)."""
        mode = self._mode
        if mode == _SPLIT:
            self._stopped_split(job)
        elif mode == _LINE:
            self._stopped_line(job)
        else:
            self._add(sub, job)
            self.priority_changed(job)

    def _started_risen(self, job: QueuedJob) -> None:
        """A start with backfill: the user's lines are re-filed when met (``_arm``)."""
        self._risen.add(self._add(add, job))

    def _stopped_line(self, job: QueuedJob) -> None:
        """A stop without backfill: the user's line, ranked too late now, is re-filed before
        the next pass. Only a line that waits: one the user has not (no live entry, or one
        already touched as it emptied, which ``_head`` forgets only after) has nothing to
        re-file. Why: on a contended cluster many stops are of users with nothing waiting, and
        each re-filed a line to find it empty (issue 34)."""
        user = self._add(sub, job)
        if user in self._groups:
            self._touch(user)  # (the line is the user's: ``line_key``, no per-VC)

    def _stopped_split(self, job: QueuedJob) -> None:
        """A stop with backfill: the user's lines filed above its share now are re-filed before
        the next pass (``touch``), the others when met (``_risen``).

        Its lines are walked only where its ``_peak`` is above its share now: the peak is at
        or above the key of each of its lines filed and not touched since (raised at every key
        made, ``_peaked_priority`` and ``_rekey``; set to the share at a walk, which touches
        those above it), so where it is not, none is filed above the share and the walk would
        touch none. (A line touched stays so until re-filed, by a key that raises the peak.)
        Why: on a contended run the walk touched nothing at 12 of 13 stops, and was, with
        backfill, the largest of DRF's own costs with a deep queue (issue 34)."""
        user = self._add(sub, job)
        split = self._split.get(user)
        if split:
            index = self._index
            assert index is not None  # (bound with the index alone: ``_bind_hooks``)
            filed = index.filed
            # Lines neither filed nor waiting leave the user's lines: nothing of theirs to
            # re-file or mark (a job that joins one again adds it back and touches it: it
            # heads it). Why: a user's lines of every GPU count ever asked stayed, about five
            # a user where one waits, each met at every stop and at ``_arm`` (issue 34).
            # (Told by two set differences, iterating the user's few lines in C.)
            unfiled = split.difference(filed)
            if unfiled:
                split.difference_update(unfiled.difference(self._groups))
            share = self._share[user]
            if self._peak.get(user, -1.0) > share:
                self._peak[user] = share
                for group in split:
                    entry = filed.get(group)  # (None: not filed; a waiting line is filed anyway)
                    if entry is not None and entry[0][0] > share:
                        index.touch(group)  # filed too late: re-filed before the next pass
                        self._settled = None  # (it may rank before the blocked head)
        self._risen.add(user)  # the others filed at or below its share: when met
        if self._settled is not None and self._blocked is not None and self._blocked.user == user:
            self._settled = None  # the blocked head's line is re-filed when met (``_block_asleep``)

    def _indexed_pass(self, index: HeadIndex, out: list[Decision]) -> None:
        self._arm(index)
        super()._indexed_pass(index, out)

    def _block_asleep(self, head: QueuedJob, out: list[Decision]) -> None:
        """The asleep pass's end (``QueuedPass._block_asleep``), kept as ``_settled`` where the
        passes after it would be the same until a release reaches the least level parked, a
        head changes (``_enqueue``, ``_dequeue`` forget it), a stop re-files a line before the
        next pass (``touch``) or re-ranks the blocked head's (a stop of its user: both forget it
        in ``on_stopped``). Exact: such a pass arms the users risen since (their lines are
        ``lazy``: filed after the blocked head, they only move later when met), re-files
        nothing, unparks nothing, finds no head ``best`` may start, and blocks the same first
        parked head (not lazy: met by ``first_parked``, and its user neither started, else it
        is in ``_risen`` now, nor stopped since). What it skips is re-done by the next pass:
        ``_arm`` of every user risen since (the shares then, as the skipped pass's would be for
        a user not risen after it), ``unpark`` with every release since (``peak``). Why: a
        third of the asleep passes of a contended DRF run with backfill followed a finish that
        changed no head and no rank (issue 34)."""
        super()._block_asleep(head, out)
        index = self._index
        if index is not None and self._blocked is head and head.user not in self._risen:
            wake = index.asleep_past()
            if wake is not None:
                self._settled = (self.pool, wake)

    def _arm(self, index: HeadIndex) -> None:
        """A pass begins: each waiting line of a user whose share rose (or fell, above) since
        the last pass began is ``lazy``, re-filed when met by the user's share now
        (``_rekey``). Those the pass re-files anyway (``dirty``) leave ``lazy`` as they are
        filed. (Lines of the user no longer waiting are marked too, unread: they hold no live
        entry, and one that waits again is touched, so filed before any pass reads it.)"""
        risen = self._risen
        if not risen:
            return
        # (in two bulk updates, not a loop of two per user: a pass follows most starts and
        # stops, and the loop was, with backfill, 60 bytecodes per job: issue 34)
        self._armed.update(zip(risen, map(self._share.__getitem__, risen), strict=True))
        index.lazy.update(*map(self._split.get, risen, repeat(())))
        risen.clear()

    def _rekey(self, group: Hashable, entry: Entry) -> Any:
        """A lazy line's key now: its user's share when the pass began, its head's seq (a
        line with backfill is (user, GPU count))."""
        share = self._armed[user := group[0]]  # type: ignore[index]
        if share > self._peak.get(user, -1.0):  # (a key made: ``_stopped_split``)
            self._peak[user] = share
        return (share, entry[1])

    def wait_reason(self, job: QueuedJob) -> str:
        return (
            f"needs {job.gpus} GPUs, {self.pool.free_gpus} free; user {job.user or '(none)'} "
            f"holds a dominant share of {self.dominant_share(job.user):.1%}"
        )


def create(config: ClusterConfig, **options: Any) -> DrfPolicy:
    return from_config(DrfPolicy, config, options)


def _sizes(pool: NodePool) -> tuple[float, float, float]:
    """The pool's GPUs, CPU and memory that a share is of (0: a dimension left out, as the
    cluster config gives it no size)."""
    return (
        pool.total_gpus,
        pool.total_cpu if 0 < pool.total_cpu < math.inf else 0,
        pool.total_memory if 0 < pool.total_memory < math.inf else 0,
    )


def _share_of(usage: Sequence[float], sizes: tuple[float, float, float]) -> float:
    """The dominant share of ``usage`` (GPUs, CPU, memory) of a pool of ``sizes``."""
    gpus, cpu, memory = sizes
    share = usage[0] / gpus if gpus else 0.0
    if cpu:
        share = max(share, usage[1] / cpu)
    if memory:
        share = max(share, usage[2] / memory)
    return share
