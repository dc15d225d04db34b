"""Fair share as cheap as first come, first served: given a loaded cluster, 20 users with jobs
of every shape waiting, and a stream of ends and submissions, expect the fair-share pass to
look at about as many classes as FIFO's (one class per shape, not one per user and shape: a
shape that does not fit fails for every user), and the usage ranks to stay right without a
``pow`` per comparison (``hived/fairshare.py``'s scaled form, its sweep and its rebase)."""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Hashable
from dataclasses import replace
from pathlib import Path

import pytest

from labhive.scheduler.core.config import FairShare, load_cluster_config
from labhive.scheduler.core.jobs import JobSpec, RoleSpec
from labhive.scheduler.core.model import Finish, Start, Submit
from labhive.scheduler.hived.base import account
from labhive.scheduler.hived.core import HivedScheduler
from labhive.scheduler.hived.fairshare import Ledger
from labhive.scheduler.hived.queue import JobClass
from labhive.scheduler.hived.queueing import ClassQueue

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_scheduler import cluster, job

USERS = 20


class Counting(ClassQueue):
    """HiveD's class queue, counting the classes its passes found blocked or failed
    (``_block``)."""

    blocks = 0

    def _block(self, cls: JobClass, stamp: Hashable = None) -> None:
        self.blocks += 1
        super()._block(cls, stamp)


def drive(fair: bool, waiting: int = 1500, events: int = 300) -> tuple[HivedScheduler, Counting]:
    """The benchmark's workload, small: 512 GPUs filled, ``waiting`` jobs queued, then
    ``events`` pairs of one running job ending and a new one arriving, a second apart."""
    rng, who = random.Random(3), random.Random(4)
    config = load_cluster_config(cluster(512))
    if fair:
        config = replace(config, fair_share=FairShare(7 * 86400))
    sched = HivedScheduler(config)
    counting = sched.queue = Counting(sched, sched.turns)  # (nothing is queued yet)
    counting.load(config)  # (as ``_load`` loads the queue it made)
    running: list[str] = []
    n = 0

    def feed(event: object) -> None:
        for d in sched.handle(event):  # type: ignore[arg-type]
            if isinstance(d, Start) and d.job_id not in running:
                running.append(d.job_id)

    while sum(1 for j in sched._jobs.values() if not j.placed) < waiting:
        n += 1
        feed(Submit(f"j{n}", job(rng, n, f"u{who.randrange(USERS)}")))
    counting.blocks = 0
    for t in range(1, events + 1):
        victim = running.pop(rng.randrange(len(running)))
        if victim in sched._jobs and sched._jobs[victim].placed:
            feed(Finish(victim, float(t)))
        n += 1
        feed(Submit(f"j{n}", job(rng, n, f"u{who.randrange(USERS)}"), float(t)))
    return sched, counting


def test_fair_share_keeps_one_class_per_shape_and_blocks_as_few_as_fifo() -> None:
    """Given 20 users' jobs of six shapes and three priorities in four VCs, expect as many
    classes with fair share as without (before: one per user, 20 times as many) and the
    passes to block at most 1.5 times the classes FIFO's do (before: about 20 times)."""
    (_, fifo), (_, fair) = drive(fair=False), drive(fair=True)
    assert len(fair.classes) <= len(fifo.classes)
    assert fair.blocks <= 1.5 * fifo.blocks + 50, (fair.blocks, fifo.blocks)
    users = {u for cls in fair.classes.values() for u in (cls.users or {})}
    assert len(users) > USERS  # (accounts are per VC and user: the classes hold them all)


class Checked(HivedScheduler):
    """HiveD whose incremental fair-share order is held, after every event, to the
    straightforward one: each class's head is the least (rank key, submission) of its jobs,
    the key read from the ledger afresh, and each scope's accounts sorted by that key."""

    def handle(self, event: object) -> list:  # type: ignore[override]
        out = super().handle(event)  # type: ignore[arg-type]
        ledger = self._ledger
        assert ledger is not None
        self.turns.refile()  # (what the next pass does first: the keys it would order by)
        for scope, order in self.turns.orders.items():
            assert order == sorted((ledger.key(a), a) for a in self.turns.vc_accounts[scope])
        for cls in self.queue.classes.values():
            if cls.entries:
                jobs = [self._jobs[job_id] for _, job_id in cls.entries]
                want = min((ledger.key(account(j)), j.seq, j.job_id) for j in jobs)
                assert self.turns.fair_head(cls) == want, (cls.key, want)
        return out


@pytest.mark.parametrize("seed", range(4))
def test_the_incremental_order_is_the_straightforward_one(seed: int) -> None:
    """Given random workloads (the benchmark's mix on 512 GPUs, 6 users of whom one weighs
    double, a short half-life so that keys move, sweeps; then two users who never ran, the
    later-named one submitting first: equal keys), expect every class's head to be the one a
    full sort of its jobs gives."""
    rng, who = random.Random(seed), random.Random(seed + 100)
    config = load_cluster_config(cluster(512))
    fair = FairShare(rng.choice([60.0, 3600.0]), shares={"u1": 2.0})
    sched = Checked(replace(config, fair_share=fair))
    running: list[str] = []
    for n in range(1, 400):
        t = n * rng.choice([0.5, 5.0, 40.0])
        if running and n > 150 and rng.random() < 0.5:
            victim = running.pop(rng.randrange(len(running)))
            if victim in sched._jobs and sched._jobs[victim].placed:
                sched.handle(Finish(victim, t))
        out = sched.handle(Submit(f"j{n}", job(rng, n, f"u{who.randrange(6)}"), t))
        running += [d.job_id for d in out if isinstance(d, Start) and d.job_id not in running]
    for n, user in enumerate(["zb", "za"] * 3):  # never ran: equal keys, zb submitted first
        role = RoleSpec("main", 2, gpu=8)
        sched.handle(Submit(f"z{n}", JobSpec(f"z{n}", "vc0", 10, (role,), user=user), 2e4))
    assert sum(1 for j in sched._jobs.values() if not j.placed) > 50  # (a queue was there)
    tied = [
        c
        for c in sched.queue.classes.values()
        if c.users is not None and {("vc0", "za"), ("vc0", "zb")} <= set(c.users)
    ]
    assert tied  # (the tie was there to break)


def test_a_running_users_rank_catches_up_at_the_sweep() -> None:
    """Given ann running 4 GPUs since 0 and bob who ran 1,000 GPU-s before and runs nothing,
    expect ann's key to pass bob's once the sweep has counted her running GPUs, though none
    of her jobs started or ended, and keys to order accounts as the exact ranks do."""
    config = replace(load_cluster_config(cluster(1024)), fair_share=FairShare(3600.0))
    ledger = Ledger(config)
    ann, bob = ("vc0", "ann"), ("vc0", "bob")
    ledger.started("b", bob, {("main", 0): 1})
    ledger.advance(1000.0)
    ledger.stopped("b")
    ledger.started("a", ann, {("main", 0): 4})
    assert ledger.key(ann) < ledger.key(bob)
    ledger.advance(1000.0 + ledger.accrue_every)  # ann: 4 x 300 s > bob's 1,000 decayed
    assert ledger.rank("vc0", "ann") > ledger.rank("vc0", "bob")
    assert ledger.key(ann) < ledger.key(bob)  # (not counted yet)
    assert ledger.now >= ledger.next_sweep
    ledger.sweep([ann, bob])  # (what a pass does then, for the accounts that wait)
    assert ledger.key(ann) > ledger.key(bob)
    assert ann in ledger.changed  # (the scheduler re-files her)


def test_usage_stays_right_past_the_rebase() -> None:
    """Given a half-life of 1 s and 1,000 s of events, expect the scaled values to be moved
    to a new reference time (2^1000 is past a float) and usage to decay as before."""
    config = replace(load_cluster_config(cluster(1024)), fair_share=FairShare(1.0))
    ledger = Ledger(config)
    ledger.started("j", ("vc0", "ann"), {("main", 0): 2})
    for t in range(1, 1001):
        ledger.advance(float(t))
    assert ledger.usage(("vc0", "ann")) == pytest.approx(2 / math.log(2), rel=1e-9)
    ledger.stopped("j")
    ledger.advance(1003.0)
    assert ledger.usage(("vc0", "ann")) == pytest.approx(2 / math.log(2) / 8, rel=1e-9)
    assert math.isfinite(ledger.key(("vc0", "ann")))
