"""Where a user stands under fair share, as a course's lab would ask it: given this cluster and
these submissions in virtual time, expect each user's decayed usage, share, rank and the jobs
ahead of theirs (``hived.standing``), and expect the place it gives a user's next job to be
the place the scheduler's own queue gives it. The live service's ``/me/standing``, ``/queue``
and ``/metrics`` are in ``test_fair_share_standing_service.py``."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from test_fair_share import PROD, TEST, course, spec
from test_properties import hived_policy

from labhive.scheduler.core.model import Finish, Start, Submit
from labhive.scheduler.hived.core import HivedScheduler
from labhive.scheduler.hived.standing import VCStanding, sentence, share_text, standings

HOUR = 3600.0


def vc_standing(policy: HivedScheduler, at: float, vc: str = "default") -> VCStanding:
    """The standing of ``vc``'s users at ``at``, on a cluster that has fair share."""
    found = standings(policy, at)
    assert found is not None, "the cluster has no fair share"
    return found[vc]


def test_an_hour_on_one_gpu_decays_as_slurms_fair_share_factor_says() -> None:
    """Given halfLife 1h and bob running one GPU for an hour: expect the integral of
    2^(-age/h) over that hour, h/ln 2 x (1 - 1/2) = 0.72 GPU-h, and half of it an hour later."""
    policy = hived_policy(course([2], fair={"halfLife": "1h"}))
    starts = policy.handle(Submit("b1", spec("bob"), 0.0))
    assert [type(d) for d in starts] == [Start]
    policy.handle(Finish("b1", HOUR))
    at_end = vc_standing(policy, HOUR).of("bob")
    later = vc_standing(policy, 2 * HOUR).of("bob")
    expected = HOUR / math.log(2) * 0.5
    assert at_end.usage_gpu_s == pytest.approx(expected)
    assert later.usage_gpu_s == pytest.approx(expected / 2)
    assert (at_end.running_gpus, at_end.users, at_end.rank) == (0, 1, 1)


def test_running_gpus_count_up_to_the_time_shown_between_events() -> None:
    """Given bob's job still running and no event since its start: expect his usage to grow
    with the time it is read at (the ledger is not touched between events; the standing
    decays it to the time asked)."""
    policy = hived_policy(course([2], fair={"halfLife": "1h"}))
    policy.handle(Submit("b1", spec("bob", gpus=2), 0.0))
    shown = vc_standing(policy, HOUR).of("bob")
    assert shown.usage_gpu_s == pytest.approx(2 * HOUR / math.log(2) * 0.5)
    assert shown.running_gpus == 2


def test_a_flood_puts_the_quiet_users_jobs_ahead_and_says_so() -> None:
    """Given 2 GPUs, bob's 2 jobs running for 10 min, then bob queues 5 more and carol and
    dave 1 each: expect carol and dave (no usage) first in line with rank 1 of 3, bob third in
    rank with both their jobs ahead of his, and the sentence to say it."""
    policy = hived_policy(course([2], fair={"halfLife": "7d"}))
    for i in range(2):
        policy.handle(Submit(f"run{i}", spec("bob"), 0.0))
    t = 600.0
    for i in range(5):
        policy.handle(Submit(f"bob{i}", spec("bob"), t + i))
    policy.handle(Submit("carol", spec("carol"), t + 10))
    policy.handle(Submit("dave", spec("dave"), t + 11))
    found = vc_standing(policy, t + 20)
    bob, carol, dave = found.of("bob"), found.of("carol"), found.of("dave")
    assert bob.usage_gpu_s == pytest.approx(2 * (t + 20), rel=1e-3)  # (7 d: barely decayed)
    assert (bob.rank, bob.users, bob.waiting, bob.running_gpus) == (3, 3, 5, 2)
    assert (bob.position, bob.ahead, bob.ahead_less_used) == (3, 2, 2)
    assert (carol.rank, carol.position, carol.ahead) == (1, 1, 0)
    assert (dave.rank, dave.position, dave.ahead, dave.ahead_less_used) == (1, 2, 1, 0)
    assert bob.share_of_vc == pytest.approx(1 / 3)
    words = sentence(bob, found.half_life_s)
    assert "you have used 0.3 GPU-h of default" in words
    assert "counts half after 7d" in words
    assert "your share is 1/3, rank 3 of 3" in words
    assert "2 jobs of users with less usage are ahead of yours" in words
    assert "first in line" in sentence(carol, found.half_life_s)


def test_weights_in_shares_set_the_share_and_the_rank() -> None:
    """Given ``shares: {alice: 3}`` and alice and bob with the same usage: expect alice's share
    3/4 (shown as 75%), bob's 1/4, and alice first in rank (her usage counts a third)."""
    policy = hived_policy(course([2], fair={"halfLife": "1h", "shares": {"alice": 3}}))
    policy.handle(Submit("a", spec("alice"), 0.0))
    policy.handle(Submit("b", spec("bob"), 0.0))
    policy.handle(Finish("a", 600.0))
    policy.handle(Finish("b", 600.0))
    found = vc_standing(policy, 600.0)
    alice, bob = found.of("alice"), found.of("bob")
    assert alice.usage_gpu_s == pytest.approx(bob.usage_gpu_s)
    assert (alice.share_of_vc, bob.share_of_vc) == (0.75, 0.25)
    assert (alice.rank, bob.rank) == (1, 2)
    assert share_text(alice.share_of_vc) == "75%" and share_text(bob.share_of_vc) == "1/4"


def test_a_user_with_nothing_here_is_shown_as_if_they_submitted_now() -> None:
    """Given only bob in the VC: expect a newcomer counted as a second user with no usage,
    rank 1 and half the share, and no job waiting."""
    policy = hived_policy(course([2], fair={"halfLife": "1h"}))
    policy.handle(Submit("b", spec("bob"), 0.0))
    newcomer = vc_standing(policy, 60.0).of("erin")
    assert (newcomer.users, newcomer.rank, newcomer.share_of_vc) == (2, 1, 0.5)
    assert (newcomer.waiting, newcomer.position, newcomer.usage_gpu_s) == (0, None, 0.0)


def test_without_fair_share_there_is_no_standing() -> None:
    """Given a cluster without ``fairShare``: expect no standing (first come, first served)."""
    assert standings(hived_policy(course([2])), 0.0) is None


@pytest.mark.parametrize("seed", range(6))
def test_the_place_shown_is_the_place_the_scheduler_gives(seed: int) -> None:
    """Given random submissions and ends of 5 users at two priorities on 4 GPUs: expect each
    user's first waiting job's place in the standing to be that job's queue position in the
    scheduler's own view, and the counts of jobs ahead to add up, after every event."""
    rng = random.Random(seed)
    policy = hived_policy(course([2, 2], fair={"halfLife": "1h"}))
    users = ["ann", "bob", "cy", "di", "ed"]
    running: list[str] = []
    t = 0.0
    for n in range(120):
        t += rng.uniform(0, 120)
        if running and rng.random() < 0.35:
            done = running.pop(rng.randrange(len(running)))
            out = policy.handle(Finish(done, t))
        else:
            user = rng.choice(users)
            job = spec(user, gpus=rng.choice([1, 1, 2]), priority=rng.choice([PROD, TEST]))
            out = policy.handle(Submit(f"j{n}", replace(job, name=f"j{n}"), t))
        running += [d.job_id for d in out if isinstance(d, Start)]
        _check_against_views(policy, t)


def _check_against_views(policy: HivedScheduler, t: float) -> None:
    found = vc_standing(policy, t)
    views = [v for v in policy.jobs() if v.state == "WAITING"]
    first: dict[str, int] = {}
    for v in views:
        user = policy._jobs[v.job_id].spec.user
        assert user is not None and v.queue_position is not None, "a waiting job has both"
        first[user] = min(first.get(user, 1 << 30), v.queue_position)
    for user, mine in found.by_user.items():
        assert mine.position == first.get(user), (user, mine, first)
        if mine.position is not None:
            assert mine.ahead == mine.position - 1
            assert 0 <= mine.ahead_less_used <= mine.ahead
        assert mine.waiting == sum(1 for v in views if policy._jobs[v.job_id].spec.user == user)
