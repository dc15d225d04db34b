"""Whose turn it is inside a VC: fair share, per-user caps and the reservation of an overdue
job, as the scheduling pass (``queueing``) asks about them.

Only when the config tells users apart (``ClusterConfig.per_user``): waiting jobs are then in
classes per user, and the pass orders classes of one priority by their user's rank
(``fairshare.Ledger.rank``), then by submission. Before an attempt, ``_gate`` says whether the
class may go now:

- not while its user holds the VC's ``maxRunningGpus``: the class waits in ``_capped`` until
  that user's GPUs are freed (never blocked on capacity: room may be there, the cap is not);
- not while an overdue job of another class (one that waited ``reserveAfter``) holds its VC
  and priority: the reservation that keeps a gang from being starved by a stream of small
  jobs that always fit first. The held-back classes are tried again in the next pass.

GPUs are counted from the decisions the pass makes, as it makes them (``_account``), so a cap
holds inside one pass too.
"""

from __future__ import annotations

import bisect

from labhive.scheduler.hived.base import account
from labhive.scheduler.hived.fairshare import Account, Ledger
from labhive.scheduler.hived.job import Job
from labhive.scheduler.hived.queue import JobClass
from labhive.scheduler.hived.sizing import Sizing
from labhive.scheduler.jobs import RoleSpec
from labhive.scheduler.model import (
    Adopt,
    Cancel,
    Decision,
    Event,
    Finish,
    Requeue,
    Submit,
    TasksEnded,
)


class Turns(Sizing):
    """The per-user checks of a pass, over ``_ledger`` (set only when ``per_user``)."""

    _out: list[Decision]  # this event's decisions (``handle``)
    _holders: dict[tuple[str, int], JobClass | None]  # per pass: who holds a VC's priority
    # Classes an overdue job holds back, per (VC, priority): tried again when the holder
    # starts or a waiting job of the VC leaves, or when the VC frees GPUs (``_collect_ready``
    # marks all its classes then), not at every event.
    _held: dict[tuple[str, int], set[JobClass]]
    _fair_lines: dict[str, list[tuple[int, float, int, str]]]  # per event: ``fair_position``

    def _ledger_now(self) -> Ledger:
        ledger = self._ledger
        assert ledger is not None
        return ledger

    def _before_event(self, event: Event) -> None:
        """What an event tells the ledger before it is applied: the time, and GPUs freed by
        a job that ended or goes back to waiting."""
        ledger = self._ledger_now()
        ledger.advance(event.time)
        self._fair_lines = {}
        kind = type(event)
        if kind is Finish or kind is Cancel or kind is Requeue:
            assert isinstance(event, Finish | Cancel | Requeue)
            freed = ledger.stopped(event.job_id)
            if kind is Requeue:
                ledger.waiting_since[event.job_id] = ledger.now
            else:
                ledger.waiting_since.pop(event.job_id, None)
            self._uncap(freed)
            job = self._jobs.get(event.job_id)
            if job is not None and self._held:  # it may have been a holder
                for key in [k for k in self._held if k[0] == job.vc]:
                    self._release_held(key)
        elif kind is TasksEnded:
            assert isinstance(event, TasksEnded)
            self._uncap(ledger.stopped(event.job_id, event.tasks))

    def _after_event(self, event: Event) -> None:
        """A new job starts waiting now; an adopted one holds its GPUs again."""
        ledger = self._ledger_now()
        job = self._jobs.get(getattr(event, "job_id", ""))
        if job is None:
            return
        if type(event) is Submit:
            ledger.waiting_since[job.job_id] = ledger.now
        elif type(event) is Adopt and job.placed and not ledger.holds(job.job_id):
            gpus: dict[tuple[str, int], float] = {
                k: job.share / 1000 if job.share else len(p.gpus)
                for k, (p, _) in job.placed.items()
            }
            ledger.started(job.job_id, account(job), gpus)

    def _share_of(self, job_id: str) -> int:
        """A started job's GPU share in thousandths (0: whole GPUs), for the ledger."""
        job = self._jobs.get(job_id)
        return 0 if job is None else job.share

    def fair_position(self, job: Job) -> int:
        """The job's place (from 1) in its VC's line under fair share: the VC's waiting jobs
        by priority, their user's rank, submission (the pass's order of classes); built once
        per VC until the next event."""
        ledger = self._ledger_now()
        line = self._fair_lines.get(job.vc)
        if line is None:
            line = []
            for neg, seq, job_id in self._queues[job.vc].order:
                user = self._jobs[job_id].spec.user or ""
                line.append((neg, ledger.rank(job.vc, user), seq, job_id))
            line.sort()
            self._fair_lines[job.vc] = line
        key = (-job.spec.priority, ledger.rank(job.vc, job.spec.user or ""), job.seq, job.job_id)
        return bisect.bisect_left(line, key) + 1

    def wait_key(self, job: Job) -> tuple[int, float, int, str]:
        """``jobs()``'s order of waiting jobs: priority, then (under fair share) rank."""
        ledger = self._ledger
        rank = 0.0 if ledger is None else ledger.rank(job.vc, job.spec.user or "")
        return (-job.spec.priority, rank, job.seq, job.spec.name)

    def _pass_begins(self, out: list[Decision]) -> None:
        self._holders = {}
        self._account()

    def _pass_ends(self) -> None:
        self._account()

    def _release_held(self, key: tuple[str, int]) -> None:
        held = self._held.pop(key, None)
        if held:
            self._ready.update(c for c in held if c.entries)

    def _account(self) -> None:
        """Count the decisions made since the last count; classes whose user freed GPUs may
        go again."""
        out = self._out
        if self._counted == len(out):
            return
        freed = self._ledger_now().account_decisions(
            out, self._counted, self._account_of, self._share_of
        )
        self._counted = len(out)
        for owner in freed:
            self._uncap(owner)

    def _account_of(self, job_id: str) -> Account:
        return account(self._jobs[job_id])

    def _uncap(self, owner: Account | None) -> None:
        classes = self._capped.pop(owner, None) if owner is not None else None
        if classes:
            self._ready.update(c for c in classes if c.entries)

    def _gate(self, cls: JobClass, job: Job) -> bool:
        """Whether the class's head may be tried now (the module's docstring)."""
        self._account()
        ledger = self._ledger_now()
        self._cap_hit = False
        if ledger.over_cap(cls.vc, cls.user, _gpus(self._units(job)[0])) is not None:
            self._capped.setdefault((cls.vc, cls.user), set()).add(cls)
            return False
        if cls.priority >= 0 and ledger.reserve_after is not None:
            holder = self._holder(cls.vc, cls.priority)
            if holder is not None and holder is not cls:
                self._held.setdefault((cls.vc, cls.priority), set()).add(cls)
                return False
        return True

    def _capped_unit(self, job: Job, unit: list[tuple[RoleSpec, int]]) -> bool:
        """Whether the next unit of a job would take its user past the VC's cap (the
        attempt then stops: an incremental job starts at most up to the cap)."""
        self._account()
        owner = account(job)
        if self._ledger_now().over_cap(owner[0], owner[1], _gpus(unit)) is None:
            return False
        self._cap_hit = True
        return True

    def _stopped_at_cap(self, job: Job) -> bool:
        """After an attempt: whether a cap stopped it; its class then waits for the user's
        GPUs (``_capped``), not for capacity."""
        hit, self._cap_hit = self._cap_hit, False
        if not hit:
            return False
        if job.queued_key is not None:
            cls = self._classes[job.queued_key]
            self._capped.setdefault((cls.vc, cls.user), set()).add(cls)
            self._ready.discard(cls)
        return True

    def _started_whole(self, cls: JobClass) -> None:
        """The class's head started: count it, and who holds its VC and priority may change."""
        self._account()
        key = (cls.vc, cls.priority)
        if self._holders.pop(key, None) is cls:
            self._release_held(key)

    def _holder(self, vc: str, priority: int) -> JobClass | None:
        """The class whose head is the VC's earliest overdue job at this priority that its
        user's cap lets start (once per pass; None: no reservation)."""
        key = (vc, priority)
        if key in self._holders:
            return self._holders[key]
        ledger = self._ledger_now()
        best: JobClass | None = None
        best_seq = 0
        for cls in self._vc_classes.get(vc, {}).values():
            if cls.priority != priority or not cls.entries or cls.never is not None:
                continue
            seq, job_id = cls.entries[0]
            if (best is not None and seq >= best_seq) or not ledger.overdue(job_id):
                continue
            head = self._jobs[job_id]
            if ledger.over_cap(vc, cls.user, _gpus(self._units(head)[0])) is not None:
                continue
            best, best_seq = cls, seq
        self._holders[key] = best
        return best


def _gpus(unit: list[tuple[RoleSpec, int]]) -> int:
    return sum(role.gpu for role, _ in unit)
