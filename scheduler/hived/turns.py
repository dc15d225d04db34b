"""Whose turn it is inside a VC: fair share, per-user caps and the reservation of an overdue
job, as the scheduling pass (``queueing``) asks about them.

Only when the config tells users apart (``ClusterConfig.per_user``): a class of identical
waiting jobs then keeps its jobs per account (VC, user) too (``JobClass.users``), and its head
is the first job of its best account: the lowest rank (``fairshare.Ledger.key``), then the
earliest submission. The pass orders classes of one priority by their head's rank, then its
submission: the order of one class per user, at the cost of one class per shape, as without
users (a shape that fails to fit fails for every user: the class is blocked once, not once per
user). ``fair_head`` picks the head, passing over accounts that may not go now:

- not while its user holds the VC's ``maxRunningGpus``: the class waits in ``capped`` for
  that user's GPUs to be freed (never blocked on capacity: room may be there, the cap is not),
  and meanwhile its other users' jobs go;
- not, for the rest of the pass, when an attempt of that account's job in this class stopped
  at the cap on a later unit (an incremental job's next task, a gang's next group:
  ``cap_stopped``): the class is tried again at once for its other accounts, so a user at
  the cap never holds back another's job of the same shape until the next event, and the
  stopped job is not tried again and again;
- not while an overdue job (one that waited ``reserveAfter``) holds its VC and priority: the
  reservation that keeps a gang from being starved by a stream of small jobs that always fit
  first. Only the holder's job may go; the held-back classes are tried again when it starts.

GPUs are counted from the decisions the pass makes, as it makes them (``count_decisions``), so a cap
holds inside one pass too.
"""

from __future__ import annotations

import operator

from labhive.scheduler.core.jobs import RoleSpec
from labhive.scheduler.core.model import (
    Adopt,
    Cancel,
    Decision,
    Event,
    Finish,
    Requeue,
    Submit,
    TasksEnded,
)
from labhive.scheduler.hived.base import HivedBase, account
from labhive.scheduler.hived.fair_line import FairLine
from labhive.scheduler.hived.fairshare import Account, Ledger
from labhive.scheduler.hived.job import Job
from labhive.scheduler.hived.queue import JobClass


class Turns:
    """The per-user checks of a pass, over the scheduler's ledger (``_ledger``, set only when
    ``per_user``).

    A part ``core.HivedScheduler`` holds (``self.turns``; the class queue holds it too), not a
    base it inherits. Its state is who may go: keys, caps, the reservation; the ledger (usage,
    GPUs held) is the scheduler's, which the views read too; the classes are the queue's
    (``_sched.queue``)."""

    def __init__(self, sched: HivedBase) -> None:
        #: The scheduler: its jobs, its ledger, its sizing, its class queue (``queue``).
        self._sched = sched
        #: This event's decisions (``handle`` sets it), and how many of them the ledger has
        #: counted (``count_decisions``).
        self.out: list[Decision] = []
        #: How many of ``out`` the ledger has counted so far.
        self.counted = 0
        #: Whether the last attempt stopped at its user's cap (``capped_unit``).
        self.cap_hit = False
        #: Classes waiting for an account to fall under its VC's cap, by account.
        self.capped: dict[Account, set[JobClass]] = {}
        #: Per pass: (class, account) pairs whose attempt stopped at the account's cap.
        self.cap_stopped: set[tuple[JobClass, Account]] = set()
        #: Per pass: whether caps or a reservation may pass over an account (``_gated_head``).
        self.gated = False
        #: Per pass: who holds a VC's priority (the class and account of the overdue job).
        self.holders: dict[tuple[str, int], tuple[JobClass, Account] | None] = {}
        #: Classes an overdue job holds back, per (VC, priority): tried again when the holder
        #: starts or a waiting job of the VC leaves, or when the VC frees GPUs
        #: (``_collect_ready`` marks all its classes then), not at every event.
        self.held: dict[tuple[str, int], set[JobClass]] = {}
        #: Per event: each VC's line (``fair_line``), built when first asked.
        self.fair_lines: dict[str, FairLine] = {}
        #: Per scope (a VC, or None: the opportunistic classes shared by all VCs), the
        #: accounts with jobs in its classes and the key each is filed under (``Ledger.key``
        #: as of the pass's start: ``refile``).
        self.keys: dict[str | None, dict[Account, float]] = {}
        #: Per scope, how many of its classes each such account has jobs in.
        self.vc_accounts: dict[str | None, dict[Account, int]] = {}

    def load(self) -> None:
        """A (new) config: its classes are made anew, so is what was filed about them."""
        self.held, self.capped, self.cap_stopped = {}, {}, set()
        self.vc_accounts, self.keys = {}, {}

    def account_joins(self, cls: JobClass, owner: Account) -> None:
        """The account's first job in the class was queued: file it in its scope."""
        scope = cls.scope
        accounts = self.vc_accounts.get(scope)
        if accounts is None:
            accounts = self.vc_accounts[scope] = {}
            self.keys[scope] = {}
        n = accounts.get(owner, 0)
        accounts[owner] = n + 1
        if not n:
            ledger = self._sched._ledger
            assert ledger is not None
            self.keys[scope][owner] = ledger.fresh_key(owner)

    def account_leaves(self, cls: JobClass, owner: Account) -> None:
        """The account's last job in the class left it; out of its scope with its last."""
        scope = cls.scope
        accounts = self.vc_accounts[scope]
        n = accounts[owner] - 1
        if n:
            accounts[owner] = n
            return
        del accounts[owner]
        del self.keys[scope][owner]

    @property
    def orders(self) -> dict[str | None, list[tuple[float, Account]]]:
        """Per scope, its accounts in the order their keys give (what a head is the first
        of); for tests and views: the pass reads ``keys``."""
        return {scope: sorted((k, a) for a, k in keys.items()) for scope, keys in self.keys.items()}

    def refile(self) -> None:
        """At a pass's start: file anew the accounts whose key changed since the last pass
        (``Ledger.changed``: their user's GPUs changed, or a sweep): an event costs the
        accounts it changed, not every account, and the keys hold still during the pass.
        Keys only grow (usage in the ledger's scaled form), so a moved account can only have
        been passed over by others, and only the heads it held are stale (``fair_head``
        checks that); a key that went down (a rebase, a new config) forgets every head."""
        ledger = self._sched._ledger
        assert ledger is not None
        if ledger.fair is None:  # (caps alone: every key is 0)
            ledger.changed.clear()
            return
        # (``Ledger.key`` written out: a changed account has its usage stored)
        # (without shares every inverse is 1.0, and x * 1.0 is x: no look-up per account)
        usage, inverse = ledger.scaled_usage, ledger.inverse_shares or None
        scopes = self.keys
        mine = scopes.get(None)
        lowered = False
        for owner in ledger.changed:
            keys = scopes.get(owner[0])
            if keys is not None:
                old = keys.get(owner)
                if old is not None:
                    key = usage[owner][0]
                    if inverse is not None:
                        key *= inverse.get(owner[1], 1.0)
                    keys[owner] = key
                    lowered |= key < old
                    if mine is not None and owner in mine:
                        mine[owner] = key
                    continue
            if mine is not None:
                old = mine.get(owner)
                if old is not None:
                    key = usage[owner][0]
                    if inverse is not None:
                        key *= inverse.get(owner[1], 1.0)
                    mine[owner] = key
                    lowered |= key < old
        ledger.changed.clear()
        if lowered:
            for cls in self._sched.queue.classes.values():
                cls.head = None

    def fair_head(self, cls: JobClass) -> tuple[float, int, str] | None:
        """The (rank key, seq, job id) of the class's job to try next: the reservation's
        holder if it holds the class's VC and priority, else the first job of the class's
        best-ranked account whose user's cap lets it start; None when none may go (the class
        is then filed where a freed cap or the holder's start gives it back: ``capped``,
        ``held``)."""
        head = cls.head  # (found without caps or a reservation: classes are new per config)
        if head is not None and self.keys[cls.scope][cls.head_owner] == head[0]:
            return head  # (the class and its head's key unchanged: ``refile``)
        users: dict[Account, list[tuple[int, str]]] = cls.users  # type: ignore[assignment]
        if not self.gated:  # (fair share alone: the least key, then the earliest submission)
            if not users:
                return None
            keys = self.keys[cls.scope]
            # (in C: the accounts are few, but this runs for every class a pass collects)
            key, (seq, job_id), cls.head_owner = min(
                zip(map(keys.__getitem__, users), map(_first, users.values()), users, strict=True)
            )
            head = cls.head = (key, seq, job_id)
            return head
        return self._gated_head(cls, users)

    def _gated_head(
        self, cls: JobClass, users: dict[Account, list[tuple[int, str]]]
    ) -> tuple[float, int, str] | None:
        """``fair_head`` under caps or a reservation: accounts that may not go are passed
        over (and their class filed where a freed cap or the holder's start gives it back)."""
        ledger = self._ledger_now()
        self.count_decisions()  # (GPUs counted as started: a cap holds inside one pass)
        if cls.priority >= 0 and ledger.reserve_after is not None:
            holder = self._holder(cls.vc, cls.priority)
            if holder is not None:
                if holder[0] is not cls:
                    self.held.setdefault((cls.vc, cls.priority), set()).add(cls)
                    return None
                seq, job_id = users[holder[1]][0]
                return self.keys[cls.scope][holder[1]], seq, job_id
        capped = bool(ledger.caps)
        best: tuple[float, int, str] | None = None
        keys = self.keys.get(cls.scope, {})
        for key, owner in sorted(zip(map(keys.__getitem__, users), users, strict=True)):
            if best is not None and key > best[0]:
                break  # (equal keys: the earlier submission goes first)
            seq, job_id = users[owner][0]
            if best is not None and seq > best[1]:
                continue
            if capped and ((cls, owner) in self.cap_stopped or self._over_cap(owner, job_id)):
                self.capped.setdefault(owner, set()).add(cls)
                continue
            best = (key, seq, job_id)
        return best

    def _over_cap(self, owner: Account, job_id: str) -> bool:
        """Whether the job's next unit would take its user past the VC's cap."""
        s = self._sched
        unit = s.sizing.units(s._jobs[job_id])[0]
        return self._ledger_now().over_cap(owner[0], owner[1], _gpus(unit)) is not None

    def _ledger_now(self) -> Ledger:
        ledger = self._sched._ledger
        assert ledger is not None
        return ledger

    def before_event(self, event: Event) -> None:
        """What an event tells the ledger before it is applied: the time, and GPUs freed by
        a job that ended or goes back to waiting."""
        s = self._sched
        ledger = s._ledger
        assert ledger is not None
        if event.time > ledger.now:
            ledger.advance(event.time)
        if self.fair_lines:
            self.fair_lines = {}
        kind = type(event)
        if kind is Submit:  # (the usual event with an end: nothing freed)
            return
        if kind is Finish or kind is Cancel or kind is Requeue:
            job_id: str = event.job_id  # type: ignore[union-attr]
            freed = ledger.stopped(job_id)
            if kind is Requeue:
                ledger.waiting_since[job_id] = ledger.now
            else:
                ledger.waiting_since.pop(job_id, None)
            if self.capped:
                self._uncap(freed)
            if self.held:  # it may have been a holder
                job = s._jobs.get(job_id)
                if job is not None:
                    for key in [k for k in self.held if k[0] == job.vc]:
                        self._release_held(key)
        elif kind is TasksEnded:
            assert isinstance(event, TasksEnded)
            self._uncap(ledger.stopped(event.job_id, event.tasks))

    def after_event(self, event: Adopt) -> None:
        """An adopted job holds its GPUs again (``handle`` calls it for an Adopt; a Submit's
        one step, the new job waiting from now, it takes inline)."""
        s = self._sched
        ledger = s._ledger
        assert ledger is not None
        job = s._jobs.get(event.job_id)
        if job is not None and job.placed and not ledger.holds(job.job_id):
            gpus: dict[tuple[str, int], float] = {
                k: job.share / 1000 if job.share else len(p.gpus)
                for k, (p, _) in job.placed.items()
            }
            ledger.started(job.job_id, account(job), gpus)

    def fair_line(self, vc: str) -> FairLine:
        """The VC's waiting jobs in the pass's order of classes (priority, their user's rank
        key, submission): what positions and standings are read from; built once per VC
        until the next event."""
        s = self._sched
        line = self.fair_lines.get(vc)
        if line is None:
            ledger = s._ledger
            assert ledger is not None
            jobs, key = s._jobs, ledger.key
            queue = self._sched.queue.queues.get(vc)
            line = FairLine(
                (neg, key((vc, jobs[job_id].spec.user or "")), seq, job_id)
                for neg, seq, job_id in (queue.order if queue is not None else ())
            )
            self.fair_lines[vc] = line
        return line

    def fair_position(self, job: Job) -> int:
        """The job's place (from 1) in its VC's line under fair share (``fair_line``)."""
        ledger = self._sched._ledger
        assert ledger is not None
        line = self.fair_line(job.vc)
        return line.ahead(-job.spec.priority, ledger.key(account(job)), job.seq, job.job_id) + 1

    def wait_key(self, job: Job) -> tuple[int, float, int, str]:
        """``jobs()``'s order of waiting jobs: priority, then (under fair share) rank."""
        ledger = self._sched._ledger
        rank = 0.0 if ledger is None else ledger.key(account(job))
        return (-job.spec.priority, rank, job.seq, job.spec.name)

    def pass_begins(self, out: list[Decision]) -> None:
        ledger = self._sched._ledger
        assert ledger is not None
        gated = self.gated = ledger.gated
        if gated:  # (only caps and reservations fill these)
            if self.holders:
                self.holders = {}
            if self.cap_stopped:
                self.cap_stopped = set()
        if self.counted != len(out):
            self.count_decisions()
        if ledger.now >= ledger.next_sweep:  # (only accounts that wait: the others are
            for accounts in self.vc_accounts.values():  # brought up when they join)
                ledger.sweep(accounts)
        if ledger.changed:
            self.refile()

    def _release_held(self, key: tuple[str, int]) -> None:
        held = self.held.pop(key, None)
        if held:
            self._sched.queue.ready.update(c for c in held if c.entries)

    def count_decisions(self) -> None:
        """Count the decisions made since the last count; classes whose user freed GPUs may
        go again."""
        out = self.out
        if self.counted == len(out):
            return
        ledger = self._sched._ledger
        assert ledger is not None
        freed = ledger.account_decisions(out, self.counted, self._about)
        self.counted = len(out)
        for owner in freed:
            self._uncap(owner)

    def _about(self, job_id: str) -> tuple[Account, int]:
        """A started job's account and GPU share in thousandths (0: whole GPUs), for the
        ledger's count."""
        job = self._sched._jobs[job_id]
        return (job.vc, job.spec.user or ""), job.share  # (``base.account``, written out)

    def _uncap(self, owner: Account | None) -> None:
        classes = self.capped.pop(owner, None) if owner is not None else None
        if classes:
            self._sched.queue.ready.update(c for c in classes if c.entries)

    def gate(self, cls: JobClass, job: Job) -> bool:
        """Whether a job that arrived to an empty class may be tried now (as ``fair_head``
        would say of its class once it is queued)."""
        if not self.gated:
            return True
        self.count_decisions()
        ledger = self._ledger_now()
        self.cap_hit = False
        owner = account(job)
        if ledger.over_cap(owner[0], owner[1], _gpus(self._sched.sizing.units(job)[0])) is not None:
            self.capped.setdefault(owner, set()).add(cls)
            return False
        held = cls.priority >= 0 and ledger.reserve_after is not None
        if held and self._holder(cls.vc, cls.priority) is not None:  # (not it: not queued)
            self.held.setdefault((cls.vc, cls.priority), set()).add(cls)
            return False
        return True

    def capped_unit(self, job: Job, unit: list[tuple[RoleSpec, int]]) -> bool:
        """Whether the next unit of a job would take its user past the VC's cap (the
        attempt then stops: an incremental job starts at most up to the cap)."""
        self.count_decisions()
        owner = account(job)
        if self._ledger_now().over_cap(owner[0], owner[1], _gpus(unit)) is None:
            return False
        self.cap_hit = True
        return True

    def stopped_at_cap(self, job: Job) -> bool:
        """After an attempt: whether a cap stopped it; its class then waits for the user's
        GPUs (``capped``), not for capacity."""
        hit, self.cap_hit = self.cap_hit, False
        if not hit:
            return False
        q = self._sched.queue
        if job.queued_key is not None:
            cls = q.classes[job.queued_key]
            owner = account(job)
            self.capped.setdefault(owner, set()).add(cls)
            # Its account is passed over in this class for the rest of the pass (tried
            # again, a job whose first unit fits under the cap but a later one does not
            # would be tried again and again), and the class is tried again at once for its
            # other accounts (left out, it held their jobs until the next event).
            self.cap_stopped.add((cls, owner))
            q.ready.add(cls)
            # A stopped holder holds its VC and priority no longer in this pass: the pair's
            # reservation passes to the next overdue job (kept, the holder would be tried
            # again and again, each time stopping at the cap: the pass never ended).
            key = (cls.vc, cls.priority)
            if self.holders.get(key) == (cls, owner):
                del self.holders[key]
                self._release_held(key)
        return True

    def started_whole(self, cls: JobClass) -> None:
        """The class's head started: count it (now only where a cap or a reservation asks:
        else the pass's end counts it), and who holds its VC and priority may change."""
        if not self.gated:
            return
        self.count_decisions()
        key = (cls.vc, cls.priority)
        holder = self.holders.pop(key, None)
        if holder is not None and holder[0] is cls:
            self._release_held(key)

    def _holder(self, vc: str, priority: int) -> tuple[JobClass, Account] | None:
        """The class and account whose first job is the VC's earliest overdue job at this
        priority that its user's cap lets start (once per pass; None: no reservation)."""
        key = (vc, priority)
        if key in self.holders:
            found = self.holders[key]
            # (kept unless the holder's job left its class: an incremental job that started
            # some tasks waits on in the class of the rest, and is looked for anew)
            if found is None or found[1] in (found[0].users or ()):
                return found
        ledger = self._ledger_now()
        best: tuple[JobClass, Account] | None = None
        best_seq = 0
        for cls in self._sched.queue.vc_classes.get(vc, {}).values():
            if cls.priority != priority or not cls.users or cls.never is not None:
                continue
            for owner, line in cls.users.items():
                seq, job_id = line[0]
                if (best is not None and seq >= best_seq) or not ledger.overdue(job_id):
                    continue
                if (cls, owner) in self.cap_stopped or self._over_cap(owner, job_id):
                    continue
                best, best_seq = (cls, owner), seq
        self.holders[key] = best
        return best


def _gpus(unit: list[tuple[RoleSpec, int]]) -> int:
    return sum(role.gpu for role, _ in unit)


#: A class's account's first job: (seq, job id).
_first = operator.itemgetter(0)
