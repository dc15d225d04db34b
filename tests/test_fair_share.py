"""Fair share inside a VC, as a course's lab would ask it: given this cluster and these
submissions, expect this order. A VC is a course or a lab group; one member's flood must not
decide everyone else's wait (``fairShare``), one member must not hold the whole VC
(``userLimits``), and a gang must not be starved by a stream of small jobs (``reserveAfter``).
The simulator drives the pure HiveD policy here; the live service is in
``test_fair_share_service.py``."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any

import pytest
from sim_helpers import simulate

from labhive.scheduler.core.config import ConfigError, load_cluster_config
from labhive.scheduler.core.errors import UserError
from labhive.scheduler.core.jobs import PRIORITY_CLASSES, JobSpec, RoleSpec
from labhive.scheduler.core.model import (
    Finish,
    JobView,
    Reconfigure,
    Scheduler,
    SpecRejected,
    Start,
    Submit,
)
from labhive.scheduler.drivers.replay import replay
from labhive.scheduler.drivers.scenario import load_scenario
from labhive.scheduler.hived.fairshare import Ledger
from labhive.scheduler.policies import get_policy
from labhive.scheduler.sim.engine import SimJob
from labhive.scheduler.sim.machines import Machine, cluster_dict

PROD, TEST = PRIORITY_CLASSES["prod"], PRIORITY_CLASSES["test"]


def course(
    gpus: list[int], fair: dict[str, Any] | None = None, limits: dict[str, int] | None = None
) -> Any:
    """One VC ``default`` of nodes with these GPUs; ``fairShare`` and ``userLimits`` as given."""
    raw = cluster_dict([Machine(f"n{i}", g) for i, g in enumerate(gpus)])
    if fair is not None:
        raw["fairShare"] = fair
    if limits is not None:
        raw["virtualClusters"]["default"]["userLimits"] = limits
    return load_cluster_config(raw)


def spec(user: str, gpus: int = 1, tasks: int = 1, priority: int = PROD, **kw: Any) -> JobSpec:
    role = RoleSpec("main", tasks, gpu=gpus)
    return JobSpec(
        name=f"{user}-job", vc="default", priority=priority, roles=(role,), user=user, **kw
    )


def view(sched: Scheduler, job_id: str) -> JobView[str]:
    """What the scheduler shows of a job it must know."""
    found = sched.job(job_id)
    assert found is not None, f"the scheduler does not know {job_id}"
    return found


def job(name: str, user: str, submit: float, duration: float, **kw: Any) -> SimJob:
    return SimJob(job_id=name, spec=spec(user, **kw), submit=submit, duration=duration)


def flood(extra: list[SimJob]) -> list[SimJob]:
    """bob's 40 one-GPU jobs of 6 s, all at 0, and ``extra``."""
    return [job(f"bob{i}", "bob", 0.0, 6.0) for i in range(40)] + extra


# ---- the flood ------------------------------------------------------------------------------


def test_without_fair_share_a_flood_decides_the_wait_of_everyone_else() -> None:
    """The measurement on main, as a baseline: dave waits behind all of bob's 40 jobs."""
    ran = simulate("hived", course([4]), flood([job("dave", "dave", 1.0, 6.0)]))
    assert ran["dave"].first_start == 60.0


def test_with_fair_share_another_user_starts_in_the_next_freed_slot() -> None:
    """Given 4 GPUs, bob's 40 jobs of 6 s and then one of dave's, expect dave's to start when
    bob's first four end (6 s), not after bob's whole queue (60 s)."""
    ran = simulate("hived", course([4], {"halfLife": "7d"}), flood([job("dave", "dave", 1.0, 6.0)]))
    assert ran["dave"].first_start == 6.0
    assert max(j.end or 0 for j in ran.values()) == 66.0  # nothing lost: the same makespan


def test_the_lighter_user_goes_first_each_time_a_slot_frees() -> None:
    """Given bob's flood and carol's 4 jobs submitted later, carol's start as bob's free GPUs:
    each freed slot goes to whoever used the VC least lately."""
    carol = [job(f"carol{i}", "carol", 2.0, 6.0) for i in range(4)]
    ran = simulate("hived", course([4], {"halfLife": "1h"}), flood(carol))
    assert [ran[f"carol{i}"].first_start for i in range(4)] == [6.0] * 4


def test_shares_weigh_usage() -> None:
    """alice's share is 4: her usage counts a quarter, so she goes before erin though she
    used twice as much."""
    config = course([2], {"halfLife": "7d", "shares": {"alice": 4}})
    sched = get_policy("hived", config)
    out = sched.handle(Submit("a1", spec("alice", gpus=2), 0.0))
    assert [d.job_id for d in out if isinstance(d, Start)] == ["a1"]
    sched.handle(Finish("a1", 10.0))  # alice: 20 GPU-s
    sched.handle(Submit("e1", spec("erin"), 10.0))
    sched.handle(Submit("z", spec("zed", gpus=1), 10.0))
    sched.handle(Finish("e1", 20.0))  # erin: 10 GPU-s; zed keeps running
    sched.handle(Finish("z", 20.0))
    sched.handle(Submit("blocker", spec("zed", gpus=2), 20.0))
    sched.handle(Submit("e2", spec("erin", gpus=2), 21.0))
    sched.handle(Submit("a2", spec("alice", gpus=2), 22.0))
    out = sched.handle(Finish("blocker", 30.0))
    assert [d.job_id for d in out if isinstance(d, Start)] == ["a2"]


def test_priority_still_goes_before_fair_share() -> None:
    """bob used the VC all along, dave not at all: bob's prod jobs still go before dave's test
    job (fair share orders jobs inside one priority class only), and it does not preempt."""
    jobs = flood([job("dave", "dave", 1.0, 6.0, priority=TEST)])
    ran = simulate("hived", course([4], {"halfLife": "7d"}), jobs)
    assert ran["dave"].first_start == 60.0
    assert all(j.stops == 0 for j in ran.values())


# ---- per-user caps ----------------------------------------------------------------------


def test_a_user_at_the_running_cap_waits_and_is_told_why() -> None:
    """Given a VC of 4 GPUs that lets one user run 2, bob's 4 jobs: 2 run, 2 wait saying the
    cap; dave's job takes a free GPU at once; bob's third starts when his first ends."""
    sched = get_policy("hived", course([4], limits={"maxRunningGpus": 2}))
    started: list[str] = []
    for i in range(4):
        out = sched.handle(Submit(f"bob{i}", spec("bob"), 0.0))
        started += [d.job_id for d in out if isinstance(d, Start)]
    assert started == ["bob0", "bob1"]
    why = view(sched, "bob2").why
    assert why is not None and "bob already runs 2 GPUs in default" in why
    assert "at most 2 at once (userLimits.maxRunningGpus)" in why
    out = sched.handle(Submit("dave", spec("dave"), 1.0))
    assert [d.job_id for d in out if isinstance(d, Start)] == ["dave"]
    out = sched.handle(Finish("bob0", 5.0))
    assert [d.job_id for d in out if isinstance(d, Start)] == ["bob2"]


def capped_course(
    gpus: int, cap: int, fair: dict[str, Any] | None, jobs: list[tuple[str, int, int, float]]
) -> dict[str, Any]:
    """A scenario: one VC of ``gpus`` GPUs on one node that lets a user run ``cap``; ``jobs``
    (name, GPUs per task, tasks, duration; the user is the name's first part) submitted one a
    second in that order, a job of several tasks incremental (it starts what the cap allows)."""
    raw = cluster_dict([Machine("n0", gpus)])
    raw["virtualClusters"]["default"]["userLimits"] = {"maxRunningGpus": cap}
    if fair is not None:
        raw["fairShare"] = fair
    events = [
        {
            "at": i,
            "submit": {
                "name": name,
                "user": name.split("-")[0],
                "gpus": per_task,
                "tasks": tasks,
                "gang": tasks == 1,
                "duration": duration,
            },
        }
        for i, (name, per_task, tasks, duration) in enumerate(jobs)
    ]
    return {"cluster": raw, "events": events}


@pytest.mark.parametrize("fair", [None, {"halfLife": "7d"}], ids=["caps alone", "fair share"])
def test_a_user_waiting_at_the_cap_does_not_hold_back_anothers_job(fair: Any) -> None:
    """Given a VC of 2 GPUs, bob capped at 1 and running 1, bob's second job waiting at the
    cap: dave's job, submitted after it, starts at once on the free GPU."""
    jobs = [("bob-1", 1, 1, 100.0), ("bob-2", 1, 1, 100.0), ("dave-1", 1, 1, 100.0)]
    scenario = capped_course(2, 1, fair, jobs)
    scenario["expect"] = [
        {"at": 2, "job": "bob-2", "state": "WAITING", "reason": "userLimits.maxRunningGpus"},
        {"at": 2, "job": "dave-1", "state": "RUNNING"},
    ]
    assert replay(load_scenario(scenario)).failures == []


@pytest.mark.parametrize("fair", [None, {"halfLife": "7d"}], ids=["caps alone", "fair share"])
def test_a_job_stopped_at_the_cap_mid_pass_lets_the_same_shape_behind_it_go(fair: Any) -> None:
    """Given a VC of 4 GPUs that lets a user run 2, dave and bob running 1 each (bob from 1 s:
    under fair share he used less) and carol's 2-GPU job until 10 s, then bob's incremental
    job of 2 one-GPU tasks and dave's of the same shape waiting: when carol's ends, bob's
    starts one task (his cap) and dave's takes the last GPU in the same pass, not at the next
    event (bob's stop at the cap held the class, dave's job in it, until a job ended at 100 s)."""
    jobs = [
        ("dave-0", 1, 1, 100.0),
        ("bob-1", 1, 1, 100.0),
        ("carol-1", 2, 1, 8.0),
        ("bob-2", 1, 2, 100.0),
        ("dave-1", 1, 2, 100.0),
    ]
    scenario = capped_course(4, 2, fair, jobs)
    scenario["expect"] = [
        {"at": 10, "job": "bob-2", "state": "RUNNING", "reason": "userLimits.maxRunningGpus"},
        {"at": 10, "job": "dave-1", "state": "RUNNING", "reason": "userLimits.maxRunningGpus"},
    ]
    assert replay(load_scenario(scenario)).failures == []


def test_an_incremental_job_starts_tasks_only_up_to_the_cap() -> None:
    sched = get_policy("hived", course([4], limits={"maxRunningGpus": 3}))
    out = sched.handle(Submit("wide", spec("bob", tasks=4, gang=False), 0.0))
    assert sum(len(d.tasks) for d in out if isinstance(d, Start)) == 3
    assert "userLimits.maxRunningGpus" in (view(sched, "wide").why or "")
    out = sched.handle(Finish("wide", 1.0))
    assert sched.job("wide") is None


def test_a_gang_larger_than_the_cap_is_refused_at_admission() -> None:
    sched = get_policy("hived", course([4], limits={"maxRunningGpus": 2}))
    with pytest.raises(SpecRejected, match=r"needs 4 GPUs at once, but default lets one user"):
        sched.check(spec("bob", tasks=4))
    sched.check(spec("bob", tasks=2))  # at the cap: fine


# ---- gangs and the reservation ---------------------------------------------------------------


def stream(until: float) -> list[SimJob]:
    """One-GPU jobs of 3.9 s, one a second from users a and b in turn: on 4 GPUs a freed GPU
    is always taken again before all four are free."""
    return [job(f"s{i}", "ab"[i % 2], float(i), 3.9) for i in range(int(until))]


def test_without_a_reservation_a_gang_starves_behind_small_jobs() -> None:
    jobs = [*stream(600), job("gang", "carl", 5.0, 10.0, tasks=4)]
    ran = simulate("hived", course([4], {"halfLife": "1h", "reserveAfter": "never"}), jobs)
    assert ran["gang"].first_start is not None and ran["gang"].first_start >= 599


def test_an_overdue_gang_holds_its_vc_until_it_starts() -> None:
    """Given the stream and a 4-GPU gang at 5 s, expect the gang to start within reserveAfter
    (60 s) and the longest small job (3.9 s) of its submission: once overdue, no small job of
    its VC and priority starts before it."""
    jobs = [*stream(600), job("gang", "carl", 5.0, 10.0, tasks=4)]
    ran = simulate("hived", course([4], {"halfLife": "1h", "reserveAfter": 60}), jobs)
    start = ran["gang"].first_start
    assert start is not None and 65.0 <= start <= 5.0 + 60.0 + 3.9
    assert all(j.end is not None for j in ran.values())


# ---- the ledger --------------------------------------------------------------------------


def test_usage_decays_by_half_each_half_life() -> None:
    ledger = Ledger(course([4], {"halfLife": 100}))
    ledger.started("j", ("default", "bob"), {("main", 0): 2})
    ledger.advance(50.0)
    ran = 2 * 100 / math.log(2) * (1 - 2**-0.5)  # 2 GPUs for 50 s, each second decayed
    assert ledger.usage(("default", "bob")) == pytest.approx(ran)
    ledger.stopped("j")
    ledger.advance(150.0)
    assert ledger.usage(("default", "bob")) == pytest.approx(ran / 2)
    assert ledger.rank("default", "nobody") == 0.0


# ---- the config ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fair", "limits", "message"),
    [
        ({"halfLife": "soon"}, None, "fairShare.halfLife: must be seconds or a duration"),
        ({"halfLife": "1d", "shares": {"bob": 0}}, None, "fairShare.shares.bob: must be a"),
        ({"half_life": "1d"}, None, "half_life"),
        ("7d", None, "fairShare: must be a mapping such as {halfLife: 7d}"),
        (None, {"maxRunningGpus": 0}, "userLimits.maxRunningGpus: must be a whole number >= 1"),
        (None, {"maxGpus": 2}, "maxGpus"),
    ],
)
def test_a_bad_setting_is_refused_saying_what_to_write(
    fair: Any, limits: Any, message: str
) -> None:
    raw = cluster_dict([Machine("n0", 4)])
    if fair is not None:
        raw["fairShare"] = fair
    if limits is not None:
        raw["virtualClusters"]["default"]["userLimits"] = limits
    with pytest.raises(ConfigError, match=message.replace("{", r"\{").replace("}", r"\}")):
        load_cluster_config(raw)


def test_fair_share_is_off_unless_the_config_asks() -> None:
    config = course([4])
    assert config.fair_share is None and not config.per_user
    on = course([4], {"halfLife": "2h"})
    assert on.fair_share is not None and on.fair_share.half_life == 7200
    assert on.fair_share.reserve_after is None  # no reservation unless asked (its cost)
    assert replace(on, fair_share=None).per_user is False


def test_the_simulator_turns_fair_share_on_as_a_policy_option() -> None:
    """``labhive simulate --policy hived:fair_share=1h`` on a cluster config without it."""
    jobs = flood([job("dave", "dave", 1.0, 6.0)])
    ran = simulate("hived", course([4]), jobs, fair_share="1h", reserve_after="never")
    assert ran["dave"].first_start == 6.0
    jobs = flood([job("dave", "dave", 1.0, 6.0)])
    off = simulate("hived", course([4], {"halfLife": "1h"}), jobs, fair_share="off")
    assert off["dave"].first_start == 60.0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"half_life": "1h"}, "policy hived takes fair_share=HALF_LIFE"),
        ({"fair_share": "soon"}, "policy hived: fair_share must be seconds or a duration"),
        ({"reserve_after": "1h"}, "reserve_after needs fair_share=HALF_LIFE"),
    ],
)
def test_a_bad_policy_option_says_what_to_write(options: dict[str, str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        get_policy("hived", course([4]), **options)


def test_caps_turned_on_by_a_new_config_count_the_jobs_already_running() -> None:
    """Given bob's 2 running jobs and a third waiting on a full VC, a Reconfigure that caps a
    user at 2 GPUs: bob's third waits for the cap when GPUs free, and dave's job starts."""
    sched = get_policy("hived", course([3]))
    for i in range(4):
        sched.handle(Submit(f"bob{i}", spec("bob"), float(i)))
    assert view(sched, "bob3").state == "WAITING"
    sched.handle(Reconfigure(course([3], limits={"maxRunningGpus": 2}), 10.0))
    sched.handle(Submit("dave", spec("dave"), 11.0))
    out = sched.handle(Finish("bob0", 12.0))  # bob still runs 2: at his cap
    assert [d.job_id for d in out if isinstance(d, Start)] == ["dave"]
    assert "userLimits.maxRunningGpus" in (view(sched, "bob3").why or "")


def test_a_holder_that_started_some_tasks_does_not_break_the_pass() -> None:
    """Given 12 GPUs, users capped at 5, ``reserveAfter`` 40 s and 150 jobs of 5 users
    (gangs and incremental jobs, three priorities) a second or two apart: expect the replay
    to run to its end. Before, an overdue incremental job that held its VC and priority and
    started some tasks moved to the class of its other tasks, and the pass, asked its old
    class's head, looked the holder up there: KeyError, the scheduler down."""
    rng = random.Random(3)
    raw = cluster_dict([Machine(f"n{i}", 4) for i in range(3)])
    raw["fairShare"] = {"halfLife": "1h", "reserveAfter": 40}
    raw["virtualClusters"]["default"]["userLimits"] = {"maxRunningGpus": 5}
    events = []
    for i in range(150):
        tasks = rng.randrange(4) + 1
        submit = {
            "name": f"j{i}",
            "user": f"u{rng.randrange(5)}",
            "gpus": rng.choice([1, 1, 2, 4]),
            "tasks": tasks,
            "gang": rng.random() < 0.7,
            "priority": rng.choice(["prod", "test", "oppo"]),
            "duration": rng.randrange(5, 60),
        }
        events.append({"at": i * 2 + rng.random(), "submit": submit})
    result = replay(load_scenario({"cluster": raw, "events": events}))
    assert result.failures == []
    assert len(result.steps) >= 150  # (every submission replayed, and the ends)
