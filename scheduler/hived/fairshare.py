"""Who used how much of each VC lately: the ledger behind fair share and per-user caps.

Slurm's fair-share factor, per VC: a user's usage is the GPU-seconds their jobs ran in the VC,
each second's worth decaying by 2^(-age/half_life); a waiting job's rank is its user's usage
divided by the user's share, and a lower rank goes first. Ranks only compare users at one
moment, so usage is kept in Slurm's "decayed to a reference time" form: an account's
usage times 2^((now - ref)/half_life), a value that stays put while the account runs nothing
and grows by GPUs x (E(now) - E(then)) while it runs (E: the integral of 2^((t - ref)/h)).

What orders the queue (``key``) is that scaled value as of the account's last change: when
its user's GPUs in the VC change (a job of theirs starts or stops), when it gets waiting jobs
again, and for every account that runs and has jobs waiting, at the first pass at least
``accrue_every`` after the last such sweep (``sweep``; Slurm's PriorityCalcPeriod: 5 minutes,
less for short half-lives). Between those moments an account's
key does not move, so the scheduler keeps its accounts sorted and re-files only the ones the
ledger lists in ``changed`` (no ``pow``, and no key per account per event); ``usage`` and
``rank`` stay exact at ``now``.

Pure: time arrives with the events (``advance``), GPUs with the decisions the scheduler made
and the events that ended jobs (``started``, ``stopped``). The same events give the same
ranks in the live service, ``labhive replay`` and ``labhive simulate``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from labhive.scheduler.core.config import ClusterConfig, FairShare
from labhive.scheduler.core.model import Decision, Preempt, Start, Stop, StopTasks

#: A (VC, user) pair; a job without a user counts as user "".
Account = tuple[str, str]
TaskKey = tuple[str, int]
#: Scaled values grow by 2 each half-life: past 2^this the reference time moves to ``now``.
_REBASE_AFTER = 256.0
_INF, _LN2, _pow = math.inf, math.log(2), math.pow  # (``advance`` runs at every event)
#: The longest a running account's key waits for its usage (Slurm's PriorityCalcPeriod).
ACCRUE_EVERY = 300.0


class Ledger:
    """Per (VC, user): GPU-seconds used lately and GPUs running now; per job, what it holds."""

    def __init__(self, config: ClusterConfig) -> None:
        self.now = 0.0
        # -> (usage scaled to ``_ref``, E when it was stored): see the module's docstring; read by
        # ``turns.Turns.refile``, which works out changed keys as ``key`` does
        self.scaled_usage: dict[Account, tuple[float, float]] = {}
        self._ref = 0.0  # the reference time of the stored values
        self._scale = 1.0  # 2^((now - ref)/half_life): scaled usage / usage at ``now``
        self._e = 0.0  # E(now), the scaled GPU-seconds one GPU has added since ``_ref``
        self.half_life = math.inf
        self.next_sweep = 0.0  # when running accounts' keys are brought up to date next
        #: Accounts whose ``key`` changed since the scheduler last re-filed them.
        self.changed: set[Account] = set()
        # GPUs held now (a GPU share counts as its fraction: 0.25 of a GPU-second a second)
        self.running: dict[Account, float] = {}
        self._held: dict[str, tuple[Account, dict[TaskKey, float]]] = {}  # job -> its GPUs
        #: A job -> when it last began to wait (submitted, requeued, preempted): ``overdue``.
        self.waiting_since: dict[str, float] = {}
        self.configure(config)

    def configure(self, config: ClusterConfig) -> None:
        """Take a (new) config's parameters; what was used so far is kept."""
        fair = config.fair_share
        self.fair: FairShare | None = fair
        used = {account: self.usage(account) for account in self.scaled_usage}
        self.half_life = fair.half_life if fair is not None else math.inf
        self._rebase(used)  # (the scaled form depends on the half-life)
        self.inverse_shares = {} if fair is None else {u: 1.0 / s for u, s in fair.shares.items()}
        self.accrue_every = min(ACCRUE_EVERY, self.half_life / 16)
        self.reserve_after = fair.reserve_after if fair is not None else None
        # whether caps or a reservation may pass over an account (``turns``' heads)
        self.caps = {
            name: vc.user_max_running_gpus
            for name, vc in config.vcs.items()
            if vc.user_max_running_gpus is not None
        }
        self.gated = bool(self.caps) or self.reserve_after is not None

    def advance(self, t: float) -> None:
        """Time moved on to ``t`` (an event's); it never goes back."""
        if t <= self.now:
            return
        self.now = t
        if self.half_life == _INF:
            self._e = t - self._ref
        else:
            exponent = (t - self._ref) / self.half_life
            if exponent > _REBASE_AFTER:  # before the scaled values leave the floats' range
                self._rebase({account: self.usage(account) for account in self.scaled_usage})
            else:
                self._scale = _pow(2.0, exponent)
                self._e = self._scale * self.half_life / _LN2

    def _rebase(self, used: dict[Account, float]) -> None:
        """Make ``now`` the reference time, the accounts' usage as ``used`` says."""
        self._ref, self._scale = self.now, 1.0
        self._e = 0.0 if self.half_life == math.inf else self.half_life / math.log(2)
        self.scaled_usage = {account: (u, self._e) for account, u in used.items()}
        self.changed.update(self.scaled_usage)  # (every key was scaled anew)

    # ---- usage -------------------------------------------------------------------------------

    def _scaled(self, account: Account) -> float:
        """The account's usage at ``now`` in the scaled form: what it had when it last
        changed plus what its running GPUs added since (each second decayed by its age)."""
        stored = self.scaled_usage.get(account)
        if stored is None:
            return 0.0
        used, at = stored
        gpus = self.running.get(account, 0)
        return used + gpus * (self._e - at) if gpus else used

    def usage(self, account: Account) -> float:
        """The account's decayed GPU-seconds at ``now`` (the integral of its GPUs at s times
        2^(-(now-s)/half_life) ds)."""
        return self._scaled(account) / self._scale

    def reading(self) -> tuple[float, dict[Account, tuple[float, float]]]:
        """``now``, and per (VC, user) with usage or GPUs held: its decayed GPU-seconds at
        ``now`` and the GPUs it runs. Read-only: what ``hived.standing`` shows users (its one
        use of this module; keep it when the ledger's insides change)."""
        accounts = self.scaled_usage.keys() | self.running.keys()
        return self.now, {a: (self.usage(a), self.running.get(a, 0)) for a in accounts}

    def rank(self, vc: str, user: str) -> float:
        """Usage over share: lower goes first (0 for a user who ran nothing lately)."""
        fair = self.fair
        if fair is None:
            return 0.0
        return self.usage((vc, user)) / fair.shares.get(user, 1.0)

    def key(self, account: Account) -> float:
        """What orders accounts as ``rank`` does (times one factor common to all accounts),
        as of the account's last change or sweep (the module's docstring)."""
        stored = self.scaled_usage.get(account)
        if stored is None or self.fair is None:  # (caps alone: first come, first served)
            return 0.0
        return stored[0] * self.inverse_shares.get(account[1], 1.0)

    def sweep(self, accounts: Iterable[Account]) -> None:
        """Bring the keys of those of ``accounts`` that run up to ``now``."""
        self.next_sweep = self.now + self.accrue_every
        running = self.running
        for account in accounts:
            if account in running:
                self._settle(account)

    def fresh_key(self, account: Account) -> float:
        """``key`` brought up to ``now`` (an account that starts waiting again)."""
        if account in self.running:
            self._settle(account)
        return self.key(account)

    def _settle(self, account: Account) -> None:
        """Bring the account's usage to ``now`` before its running GPUs change (``_scaled``,
        written out: this runs at every start and stop)."""
        stored = self.scaled_usage.get(account)
        if stored is None:
            self.scaled_usage[account] = (0.0, self._e)
            return  # (its key stays 0: nothing to re-file)
        used, at = stored
        gpus = self.running.get(account, 0)
        if gpus:
            self.scaled_usage[account] = (used + gpus * (self._e - at), self._e)
            self.changed.add(account)
        else:  # (nothing ran since: the key stays)
            self.scaled_usage[account] = (used, self._e)

    # ---- GPUs held ---------------------------------------------------------------------------

    def holds(self, job_id: str) -> bool:
        return job_id in self._held

    def started(self, job_id: str, account: Account, tasks: Mapping[TaskKey, float]) -> None:
        held = self._held.get(job_id)
        if held is None:  # (the usual start: all of a job's tasks at once; ``_settle`` inline)
            running, usage, e = self.running, self.scaled_usage, self._e
            gpus = running.get(account, 0)
            stored = usage.get(account)
            if stored is None:
                usage[account] = (0.0, e)
            elif gpus:
                usage[account] = (stored[0] + gpus * (e - stored[1]), e)
                self.changed.add(account)
            else:
                usage[account] = (stored[0], e)
            self._held[job_id] = (account, dict(tasks))
            running[account] = gpus + sum(tasks.values())
            return
        self._settle(held[0])
        mine = held[1]
        added: float = 0  # (a share is a half, quarter or eighth: exact in floats)
        for key, gpus in tasks.items():
            added += gpus - mine.get(key, 0)
            mine[key] = gpus
        self.running[held[0]] = self.running.get(held[0], 0) + added

    def stopped(self, job_id: str, tasks: tuple[TaskKey, ...] | None = None) -> Account | None:
        """The job's ``tasks`` (all when None) stopped; the account they freed GPUs of."""
        held = self._held.get(job_id)
        if held is None:
            return None
        account, mine = held
        self._settle(account)
        freed: float = 0
        if tasks is None:  # (the usual end: the whole job, its GPUs summed in insertion order)
            if not mine:
                return None
            freed = sum(mine.values())
            del self._held[job_id]
        else:
            keys = [k for k in tasks if k in mine]
            if not keys:
                return None
            for key in keys:
                freed += mine.pop(key)
            if not mine:
                del self._held[job_id]
        left = self.running.get(account, 0) - freed
        if left:
            self.running[account] = left
        else:
            self.running.pop(account, None)
        return account

    def over_cap(self, vc: str, user: str, gpus: int) -> int | None:
        """The VC's cap when ``gpus`` more for the user would pass it, else None."""
        cap = self.caps.get(vc)
        if cap is None or self.running.get((vc, user), 0) + gpus <= cap:
            return None
        return cap

    def account_decisions(
        self, decisions: list[Decision], start: int, about: Callable[[str], tuple[Account, int]]
    ) -> set[Account]:
        """Count what ``decisions[start:]`` started and stopped; the accounts that freed GPUs.
        ``about``: a started job's account and GPU share in thousandths (0: whole GPUs)."""
        freed: set[Account] = set()
        for d in decisions[start:]:
            if type(d) is Start:
                owner, share = about(d.job_id)
                if len(d.tasks) == 1 and not share:  # (the usual start: one whole-GPU task)
                    p = d.tasks[0]
                    self.started(d.job_id, owner, {(p.role, p.index): len(p.gpus)})
                    continue
                if share:  # a GPU share holds its fraction of its one GPU
                    tasks: dict[TaskKey, float] = {(p.role, p.index): share / 1000 for p in d.tasks}
                else:
                    tasks = {(p.role, p.index): len(p.gpus) for p in d.tasks}
                self.started(d.job_id, owner, tasks)
                continue
            if type(d) is StopTasks:
                account = self.stopped(d.job_id, tuple((p.role, p.index) for p in d.tasks))
                self.waiting_since[d.job_id] = self.now  # (those tasks wait again)
            elif type(d) is Preempt or type(d) is Stop:
                account = self.stopped(d.job_id)
                self.waiting_since[d.job_id] = self.now
            else:  # a Downgrade: the job runs on, on the same GPUs
                continue
            if account is not None:
                freed.add(account)
        return freed

    def overdue(self, job_id: str) -> bool:
        """Whether the job has waited long enough to hold its VC and priority for itself."""
        after = self.reserve_after
        if after is None:
            return False
        since = self.waiting_since.get(job_id)
        return since is not None and self.now - since >= after
