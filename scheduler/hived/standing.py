"""Where each user stands in each VC under fair share: what ``labhive queue``, the notebook
widget and the spawn page show ("you have used 3.2 GPU-h of vc1 in the last 7 days (decayed),
your share is 1/12; 5 jobs of users with less usage are ahead of yours").

Read-only and pure: it reads the fair-share ledger through ``Ledger.reading()`` (usage and
GPUs held) and ``Ledger.key`` (the order the scheduler files users in), and the VCs' queues,
and takes the time to show the usage at as an argument. The driver calls it while it holds
the policy (the service: under the loop's lock, once per pass; ``service/pass_views.py``).

The order shown is the scheduler's own line (``fair_line.FairLine``, from
``turns.fair_line``): waiting jobs by priority, their user's key (usage over share as of the
user's last change or sweep), then submission, so a user's first position here is the
position their job shows. The usage shown is decayed
further to ``now`` (between events the ledger is not touched: GPUs held meanwhile are added
here, by the same integral the ledger uses).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from labhive.scheduler.hived.fair_line import FairLine
    from labhive.scheduler.hived.state import HivedState

#: A user counts among a VC's users while their decayed usage is at least this (GPU-seconds),
#: or while they run or wait there: usage decays but never reaches 0, and a user of a year ago
#: should not dilute everyone's share.
ACTIVE_GPU_S = 1.0


@dataclass(frozen=True, slots=True)
class UserStanding:
    """One user in one VC."""

    vc: str
    user: str
    usage_gpu_s: float  # decayed GPU-seconds used in the VC, at ``VCStanding.at``
    running_gpus: float
    share: float  # the user's weight (``fairShare.shares``; 1 unless named)
    share_of_vc: float  # the weight over all the VC's users' weights
    users: int  # the VC's users counted (those with usage, running or waiting, and this one)
    rank: int  # 1 goes first: 1 + the users whose usage over share is lower
    waiting: int  # the user's waiting jobs in the VC
    position: int | None  # the place of the user's first waiting job in the VC's line
    ahead: int  # jobs ahead of that job
    ahead_less_used: int  # of those, jobs of users whose usage over share is lower


@dataclass(frozen=True, slots=True)
class VCStanding:
    """Every counted user of one VC; ``of`` answers for anyone, counted or not."""

    vc: str
    half_life_s: float
    at: float  # the time the usage is shown at
    by_user: dict[str, UserStanding]
    shares: Mapping[str, float]  # ``fairShare.shares``: a user not named has 1
    _weights: float  # the counted users' weights together

    def share_of(self, user: str) -> float:
        return self.shares.get(user, 1.0)

    def of(self, user: str) -> UserStanding:
        """The user's standing; one with no usage and no jobs here is shown as if they
        submitted now: no usage, first in rank, and counted among the users."""
        found = self.by_user.get(user)
        if found is not None:
            return found
        share = self.share_of(user)
        users = len(self.by_user) + 1
        return UserStanding(
            self.vc, user, 0.0, 0, share, share / (self._weights + share), users, 1, 0, None, 0, 0
        )


def standings(sched: HivedState[Any], now: float) -> dict[str, VCStanding] | None:
    """Per VC, every counted user's standing with usage decayed to ``now``; None when the
    cluster has no fair share (first come, first served: there is no standing to show)."""
    ledger = sched._ledger
    fair = sched.config.fair_share
    if ledger is None or fair is None:
        return None
    at, accounts = ledger.reading()
    used: dict[str, dict[str, tuple[float, float]]] = {vc: {} for vc in sched.vcs.by_name}
    for (vc, user), value in accounts.items():
        used.setdefault(vc, {})[user] = value
    out = {}
    for vc, users in used.items():
        queue = sched.queue.queues.get(vc)
        order = queue.order if queue is not None else []
        line = [
            (neg, seq, job_id, sched._jobs[job_id].spec.user or "") for neg, seq, job_id in order
        ]
        keys = {user: ledger.key((vc, user)) for user in users.keys() | {e[3] for e in line}}
        fair_line = sched.fair_line(vc)
        out[vc] = _vc_standing(
            vc, users, keys, line, fair_line, fair.shares, fair.half_life, now - at, now
        )
    return out


def _vc_standing(
    vc: str,
    users: dict[str, tuple[float, float]],
    keys: Mapping[str, float],
    line: list[tuple[int, int, str, str]],
    fair_line: FairLine,
    shares: Mapping[str, float],
    half_life: float,
    dt: float,
    now: float,
) -> VCStanding:
    """``users``: (GPU-seconds at the ledger's time, GPUs running) per user; ``line``: the
    VC's waiting jobs as (-priority, submission, job id, user) in queue order (priority,
    submission); ``dt``: from the ledger's time to now; ``keys``: what the scheduler orders
    users by (``Ledger.key``: usage over share as of each user's last change or sweep);
    ``fair_line``: the scheduler's line (``turns.fair_line``), so the place shown is the
    place the scheduler gives."""
    waiting: dict[str, int] = {}
    first: dict[str, tuple[int, int, str]] = {}  # user -> their first job in queue order
    for neg, seq, job_id, user in line:
        waiting[user] = waiting.get(user, 0) + 1
        first.setdefault(user, (neg, seq, job_id))

    def share_of(user: str) -> float:
        return shares.get(user, 1.0)

    counted = {u for u, (gpu_s, gpus) in users.items() if gpu_s >= ACTIVE_GPU_S or gpus}
    counted |= first.keys()
    rank_value = {u: keys.get(u, 0.0) for u in counted}
    values = sorted(rank_value.values())
    weights = sum(share_of(u) for u in counted)
    by_user = {}
    for user in counted:
        gpu_s, gpus = users.get(user, (0.0, 0))
        mine = first.get(user)
        ahead = less = 0
        if mine is not None:  # (the user's first in queue order is their first in the line)
            neg, seq, job_id = mine
            ahead = fair_line.ahead(neg, rank_value[user], seq, job_id)
            less = fair_line.ahead_less_used(neg, rank_value[user])
        by_user[user] = UserStanding(
            vc,
            user,
            decayed(gpu_s, gpus, dt, half_life),
            gpus,
            share_of(user),
            share_of(user) / weights,
            len(counted),
            1 + bisect.bisect_left(values, rank_value[user]),
            waiting.get(user, 0),
            None if mine is None else ahead + 1,
            ahead,
            less,
        )
    return VCStanding(vc, half_life, now, by_user, shares, weights)


def decayed(gpu_s: float, gpus: float, dt: float, half_life: float) -> float:
    """GPU-seconds ``dt`` later: the old ones decayed, plus ``gpus`` held meanwhile, each
    second decayed by its own age (``fairshare.Ledger.usage``'s integral)."""
    if dt <= 0:
        return gpu_s
    if half_life == math.inf:
        return gpu_s + gpus * dt
    decay = math.pow(2.0, -dt / half_life)
    return gpu_s * decay + gpus * half_life / math.log(2) * (1.0 - decay)


def sentence(s: UserStanding, half_life_s: float) -> str:
    """The standing in words, as every view shows it: "you have used 3.2 GPU-h of vc1
    (decayed: a GPU-hour counts half after 7d); your share is 1/12, rank 3 of 12; 5 jobs of
    users with less usage are ahead of yours"."""
    used = f"you have used {s.usage_gpu_s / 3600:.1f} GPU-h of {s.vc}"
    used += f" (decayed: a GPU-hour counts half after {span(half_life_s)})"
    if s.running_gpus:
        used += f", {s.running_gpus:g} GPUs running now"
    share = f"your share is {share_text(s.share_of_vc)}, rank {s.rank} of {s.users}"
    if s.position is None:
        ahead = "you have no job waiting here"
    elif not s.ahead:
        ahead = "your next job is first in line"
    else:
        ahead = (
            f"{_jobs(s.ahead_less_used)} of users with less usage and "
            f"{_jobs(s.ahead - s.ahead_less_used)} of others are ahead of yours"
            if s.ahead_less_used and s.ahead > s.ahead_less_used
            else f"{_jobs(s.ahead)} of users with less usage are ahead of yours"
            if s.ahead_less_used
            else f"{_jobs(s.ahead)} are ahead of yours (higher priority or earlier, none of "
            "users with less usage)"
        )
    return f"{used}; {share}; {ahead}"


def _jobs(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"


def share_text(fraction: float) -> str:
    """1/12 when the fraction is one over a whole number (equal shares), else a percentage."""
    if fraction <= 0:
        return "0%"
    whole = round(1 / fraction)
    if whole >= 1 and abs(1 / whole - fraction) < 1e-9:
        return f"1/{whole}"
    return f"{fraction * 100:.0f}%"


def span(seconds: float) -> str:
    """7d, 12h, 30m, 45s: the half-life as configs write it."""
    if seconds == math.inf:
        return "never"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
