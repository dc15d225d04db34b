"""Given a small cluster and a hand-written trace, expect the schedule worked out by hand."""

from __future__ import annotations

import pytest
from sim_helpers import cluster, job, simulate, spans
from sim_helpers import las as las_policy

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.core.model import Finish, Submit, Tick
from labhive.scheduler.policies import get_policy


def three_jobs() -> list:
    # one GPU; a long job first, then a medium and a short one while it runs
    return [job("a", 0, 1, 100), job("b", 1, 1, 50), job("c", 2, 1, 10)]


def test_fifo_runs_jobs_in_arrival_order() -> None:
    got = spans(simulate("fifo", cluster([1]), three_jobs()))
    assert got == {"a": (0, 100), "b": (100, 150), "c": (150, 160)}


def test_sjf_runs_the_shortest_waiting_job_first() -> None:
    jobs = simulate("sjf", cluster([1]), three_jobs())
    assert spans(jobs) == {"a": (0, 100), "c": (100, 110), "b": (110, 160)}
    jct = sorted(j.jct for j in jobs.values() if j.jct is not None)
    assert jct == [100, 108, 159]  # average 122.3 s, against FIFO's 135.7 s


def gang_trace() -> list:
    # two 2-GPU nodes: two 1-GPU jobs fill n0, a 4-GPU gang needs both nodes whole
    return [
        job("j1", 0, 1, 100),
        job("j2", 0, 1, 50),
        job("gang", 1, 4, 10),
        job("small", 2, 1, 10),
    ]


STRICT_BY_DEFAULT = ["fifo", "sjf", "drf", "capacity"]  # LAS backfills by default


@pytest.mark.parametrize("policy", STRICT_BY_DEFAULT)
def test_a_gang_waits_for_all_its_gpus_and_blocks_a_strict_queue(policy: str) -> None:
    jobs = simulate(policy, cluster([2, 2]), gang_trace())
    assert spans(jobs)["gang"] == (100, 110)  # 3 GPUs free at 50 are not enough
    assert spans(jobs)["small"] == (110, 120)  # behind the gang in a strict queue


@pytest.mark.parametrize("policy", [*STRICT_BY_DEFAULT, "las"])
def test_backfill_lets_a_small_job_pass_a_blocked_gang(policy: str) -> None:
    jobs = simulate(policy, cluster([2, 2]), gang_trace(), backfill=True)
    assert spans(jobs)["small"] == (2, 12)
    assert spans(jobs)["gang"] == (100, 110)


def test_consolidated_gang_waits_for_one_node_but_anywhere_spreads_it() -> None:
    trace = [job("x", 0, 1, 100), job("y", 0, 1, 100), job("pair", 1, 2, 10)]
    # best fit puts x and y on the same node, so a whole node stays free for the pair
    assert spans(simulate("fifo", cluster([2, 2]), trace))["pair"] == (1, 11)

    # x and z fill n0, y takes one GPU of n1; when z leaves at 5 each node has one GPU free
    def spread() -> list:
        return [job("x", 0, 1, 100), job("z", 0, 1, 5), job("y", 1, 1, 100), job("pair", 6, 2, 10)]

    consolidated = simulate("fifo", cluster([2, 2]), spread())
    anywhere = simulate("fifo", cluster([2, 2]), spread(), locality="anywhere")
    assert spans(consolidated)["pair"] == (100, 110)
    assert spans(anywhere)["pair"] == (6, 16)
    assert nodes_of_pair(spread()) == {"n0", "n1"}


def nodes_of_pair(trace: list) -> set[str]:
    """The nodes the pair lands on when spread (observed while it runs)."""
    from labhive.scheduler.sim.engine import Simulation

    config = cluster([2, 2])
    sim = Simulation(
        get_policy("fifo", config, locality="anywhere"), trace, total_gpus=config.total_gpus()
    )
    seen: set[str] = set()

    def observe(s: Simulation, label: str) -> None:
        pair = s.sim_jobs.get("pair")
        if pair is not None and pair.state == "RUNNING":
            seen.update(t.node for t in pair.tasks)

    sim.observe = observe
    sim.run()
    return seen


def capacity_trace() -> list:
    return [
        job("b1", 0, 2, 100, vc="b"),  # within b's quota (one 2-GPU node)
        job("b2", 1, 2, 100, vc="b"),  # beyond it: borrows a's idle node
        job("a1", 10, 2, 50, vc="a"),  # a wants its node back
    ]


def test_capacity_lends_idle_gpus_and_takes_them_back_by_preemption() -> None:
    config = cluster([2, 2], {"a": 1, "b": 1})
    jobs = simulate("capacity", config, capacity_trace())
    assert spans(jobs)["b2"][0] == 1  # borrowed at once
    assert spans(jobs)["a1"] == (10, 60)  # reclaimed at once
    assert jobs["b2"].preemptions == 1
    assert jobs["b2"].end == 160  # no checkpoint: reruns all 100 s from 60
    assert jobs["b1"].preemptions == 0


def test_a_checkpoint_keeps_progress_across_preemption() -> None:
    config = cluster([2, 2], {"a": 1, "b": 1})
    jobs = simulate("capacity", config, capacity_trace(), checkpoint=5)
    # b2 ran 1..10 (9 s): its checkpoint at 5 s survives, 95 s remain from 60
    assert jobs["b2"].end == 155


def test_capacity_without_borrowing_keeps_jobs_in_their_quota() -> None:
    config = cluster([2, 2], {"a": 1, "b": 1})
    jobs = simulate("capacity", config, capacity_trace(), borrow=False)
    assert spans(jobs)["b2"] == (100, 200)
    assert jobs["b2"].preemptions == 0


def las_trace() -> list:
    return [job("long", 0, 1, 10_000), job("early", 1000, 1, 100), job("late", 5000, 1, 100)]


def test_las_demotes_a_long_job_so_short_ones_preempt_it() -> None:
    jobs = simulate("las", cluster([1]), las_trace())
    # at 1000 the long job (1000 GPU-s) shares the top queue with 'early', which waits;
    # at 3250 GPU-s it drops to queue 1 and 'early' preempts it at once
    assert spans(jobs)["early"] == (3250, 3350)
    # 'late' arrives in the top queue while the long job runs in queue 1: preempts it again
    assert spans(jobs)["late"] == (5000, 5100)
    assert jobs["long"].preemptions == 2
    assert jobs["long"].end == 5100 + 10_000  # no checkpoints: each restart is from scratch
    fifo = simulate("fifo", cluster([1]), las_trace())  # fresh jobs: a run changes them
    assert spans(fifo)["early"] == (10_000, 10_100)
    assert spans(fifo)["late"] == (10_100, 10_200)


def test_las_asks_to_be_woken_when_a_job_crosses_a_threshold() -> None:
    las = las_policy(cluster([1]))
    assert las.next_wakeup() is None
    las.handle(Submit("long", job("long", 0, 1, 10_000).spec, 0))
    assert las.next_wakeup() == pytest.approx(3250)
    las.handle(Tick(3250))
    assert las.next_wakeup() == pytest.approx(7200)  # next threshold, one GPU
    assert "queue 1" in las.wait_reason(las._jobs["long"])
    las.handle(Finish("long", 4000))
    assert las.next_wakeup() is None


def test_las_starvation_guard_promotes_a_job_that_waited_too_long() -> None:
    las = las_policy(cluster([1]), promote_knob="0.5")
    las.handle(Submit("long", job("long", 0, 1, 10_000).spec, 0))
    las.handle(Tick(3250))  # demoted to queue 1
    out = las.handle(Submit("short", job("short", 4000, 1, 5000).spec, 4000))
    assert [type(d).__name__ for d in out] == ["Preempt", "Start"]
    assert las._jobs["long"].level == 1
    # it ran 4000 s, so after 0.5 x 4000 s of waiting it goes back to the top queue
    assert las.next_wakeup() == pytest.approx(6000)
    las.handle(Tick(6000))
    assert las._jobs["long"].level == 0
    assert las._jobs["long"].attained == 0


def _fields(spec: object) -> dict:
    return {f: getattr(spec, f) for f in spec.__dataclass_fields__}  # type: ignore[attr-defined]


def test_drf_serves_the_user_with_the_smallest_dominant_share() -> None:
    config = cluster([4])
    alice = [job("a0", 0, 2, 200), job("a1", 0, 2, 100), job("a2", 1, 2, 10)]
    bob = job("b1", 2, 2, 10)
    bob.spec = bob.spec.__class__(**{**_fields(bob.spec), "user": "bob"})
    got = spans(simulate("drf", config, [*alice, bob]))
    # at 100 alice still holds half the GPUs (a0), bob none: bob's job goes first
    assert got["b1"] == (100, 110)
    assert got["a2"] == (110, 120)


def test_a_job_that_can_never_fit_is_rejected_not_left_waiting() -> None:
    jobs = simulate("fifo", cluster([2]), [job("huge", 0, 4, 10), job("ok", 1, 1, 10)])
    assert jobs["huge"].state == "REJECTED"
    assert "2 GPUs" in jobs["huge"].reason
    assert spans(jobs)["ok"] == (1, 11)


def test_unknown_policy_option_is_a_clear_error() -> None:
    with pytest.raises(UserError, match="unknown option"):
        get_policy("fifo", cluster([1]), bogus="1")
    with pytest.raises(UserError, match="backfill"):
        get_policy("fifo", cluster([1]), backfill="maybe")


@pytest.mark.parametrize("policy", ["hived", "fifo", "las"])
def test_a_down_node_shows_the_reason_it_was_taken_down_for(policy: str) -> None:
    from labhive.scheduler.core.model import NodeDown, NodeUp

    sched = get_policy(policy, cluster([2, 2]))

    def reasons() -> list[tuple[bool, str]]:
        return [(n.healthy, n.reason) for n in sched.cluster().nodes]

    sched.handle(NodeDown("n0", reason="disk failure"))
    sched.handle(NodeDown("n1"))
    assert reasons() == [(False, "disk failure"), (False, "down")]
    sched.handle(NodeUp("n0"))
    assert reasons() == [(True, ""), (False, "down")]
