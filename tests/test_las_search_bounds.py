"""Given a contended cluster where gangs wider than a node wait and the free GPUs already reach
a preemption search's bound (so it meets one victim), expect LAS to settle the search by a
bound (``LasPolicy._fails_by_bound``: the most-free nodes the gang needs, kept while only
starts happen, short of the gang even with that victim's GPUs) and to move the victim as the
search would, or not at all where the last search met it alone and nothing moved since;
deciding exactly as LAS making every search on paper, with the same pool after every event,
the order of its buckets, nodes' ``used`` and jobs included (issue 34: 2.9 searches per job
arrived on the contended replay, each meeting one victim and failing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_las_quiet_passes import LasEveryPass
from test_pass_skips import LAS, eight_nodes_of_eight
from test_preempt_probe import pool_state
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Cancel, Finish, NodeDown, NodeUp, Submit, Tick
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.queued import QueuedJob, from_config


class LasEverySearch(LasPolicy):
    """LAS making every search on paper (``fails_on_paper``), as before the bound."""

    def _fails_by_bound(self, job: QueuedJob, opp: bool) -> tuple[str, ...] | None:
        return None


class LasCounting(LasPolicy):
    """LAS counting the searches its bound settled, and those of them that moved nothing."""

    bounded = 0

    def _fails_by_bound(self, job: QueuedJob, opp: bool) -> tuple[str, ...] | None:
        walk = super()._fails_by_bound(job, opp)
        self.bounded += walk is not None
        return walk


def nodes_of(count: int, gpus: int) -> Any:
    node = {"childCellType": "GPU", "childCellNumber": gpus, "isNodeLevel": True}
    return load_cluster_config(
        {
            "physicalCluster": {
                "cellTypes": {"NODE": node},
                "physicalCells": [
                    {"cellType": "NODE", "cellAddress": f"n{i}"} for i in range(count)
                ],
            },
            "virtualClusters": {
                "vc0": {"virtualCells": [{"cellType": "NODE", "cellNumber": count}]}
            },
        }
    )


Policies = Sequence[LasPolicy]


def each(policies: Policies, event: Any) -> list[Any]:
    return [policy.handle(event) for policy in policies]


def submit(policies: Policies, job_id: str, at: float, gpus: int, tasks: int = 1) -> list[Any]:
    spec = parse_job({"name": job_id, "vc": "vc0", "gpus": gpus, "tasks": tasks})
    for policy in policies:
        policy.check(spec)
    return each(policies, Submit(job_id, spec, at))


def full_then_freed(policies: Policies, freed_per_node: int = 5) -> None:
    """Eight 8-GPU nodes filled with 1-GPU jobs at 0 s, all demoted by a tick at 100 s; then
    ``freed_per_node`` of them finish on each node at 110 s."""
    for i in range(64):
        submit(policies, f"one{i}", 0.0, 1)
    each(policies, Tick(100.0))
    for i in range(64):
        if i % 8 < freed_per_node:
            each(policies, Finish(f"one{i}", 110.0))


def crowded() -> tuple[LasCounting, LasEverySearch]:
    """Eight 8-GPU nodes, each full of 1-GPU jobs, all demoted at 100 s; five finish on each
    node at 110 s: 40 GPUs free, five on each node; LAS with the bound, and without."""
    policies: Policies = [
        from_config(cls, eight_nodes_of_eight(), {}, **{**LAS, "thresholds": (60.0,)})
        for cls in (LasCounting, LasEverySearch)
    ]
    for i in range(64):
        started = submit(policies, f"one{i}", 0.0, 1)
        assert [[d.job_id for d in out] for out in started] == [[f"one{i}"]] * 2
    each(policies, Tick(100.0))
    for i in range(64):
        if i % 8 < 5:
            each(policies, Finish(f"one{i}", 110.0))
    bounded, every = policies
    assert isinstance(bounded, LasCounting) and isinstance(every, LasEverySearch)
    assert bounded.pool.free_gpus == 40
    return bounded, every


@settings(PROPERTY_SETTINGS)
@given(
    data=st.data(),
    shape=st.sampled_from([(12, 2), (16, 4), (10, 8), (24, 8)]),
    options=st.sampled_from([{}, {"backfill": False}, {"quantum": 0.0}]),
    plain=st.sampled_from([LasEverySearch, LasEveryPass]),
)
def test_a_las_settling_searches_by_a_bound_decides_and_leaves_the_pool_as_one_searching(
    data: Any, shape: tuple[int, int], options: dict[str, Any], plain: type[LasPolicy]
) -> None:
    """A cluster full of 1-GPU jobs (all demoted at 100 s: each a victim, of one GPU, as a
    contended run's most often are), some of them finished (free GPUs spread over the nodes),
    then gangs of 1 or 2 GPUs a task wider than a node, more 1-GPU jobs, finishes, cancels,
    node faults and ticks, in any order: LAS with the bound decides as LAS making every
    search on paper, and as LAS running every full pass (a quiet pass replayed after starts,
    ``_replays``, included), and leaves the same pool, order included, after every event."""
    nodes, gpus = shape
    config = nodes_of(nodes, gpus)
    policies: Policies = [
        from_config(cls, config, dict(options), **{**LAS, "thresholds": (60.0, 6000.0)})
        for cls in (LasPolicy, plain)
    ]
    bounded, every = policies
    for i in range(nodes * gpus):
        submit(policies, f"one{i}", 0.0, 1)
    each(policies, Tick(100.0))
    now = 100.0
    ends = data.draw(st.lists(st.booleans(), min_size=nodes * gpus, max_size=nodes * gpus))
    for i in (i for i, end in enumerate(ends) if end):
        each(policies, Finish(f"one{i}", now))
    names = [n.name for n in config.nodes()]
    event = st.one_of(
        st.tuples(st.just("wide"), st.integers(1, 2), st.integers(gpus + 1, 3 * gpus)),
        st.tuples(st.sampled_from(["one", "finish", "finish", "tick", "cancel", "fault"]),
                  st.integers(0, 10**6), st.just(0)),
    )  # fmt: skip
    for n, (kind, arg, width) in enumerate(data.draw(st.lists(event, max_size=60))):
        now += 7.0
        if kind == "wide":
            out = submit(policies, f"w{n}", now, arg, tasks=-(-width // arg))
        elif kind == "one":
            out = submit(policies, f"o{n}", now, 1)
        elif kind == "tick":
            out = each(policies, Tick(now))
        elif kind == "fault":
            node = names[arg % len(names)]
            up = bounded.pool.nodes[node].healthy
            out = each(policies, NodeDown(node, now, "fault") if up else NodeUp(node, now))
        else:
            views = [v for v in bounded.jobs() if (v.state == "WAITING") == (kind == "cancel")]
            if not views:
                continue
            job_id = views[arg % len(views)].job_id
            out = each(policies, (Cancel if kind == "cancel" else Finish)(job_id, now))
        assert out[0] == out[1], (kind, arg, width)
        assert pool_state(bounded.pool) == pool_state(every.pool)
        assert bounded.jobs() == every.jobs()


def test_searches_the_bound_settles_move_the_victim_as_searching_would() -> None:
    """``crowded``: a 24-GPU gang (three nodes) arrives; its search's bound (24 + 2 x 8 = 40)
    is reached, it meets one victim of one GPU, and 15 + 1 is not 24: the bound settles it,
    moving the victim's node, GPU and job to their ends. A 23-GPU gang then meets the same
    victim: settled with nothing moved, as a tick's pass searching for both. LAS making
    every search on paper decides the same, pool included."""
    bounded, every = policies = crowded()
    before = pool_state(bounded.pool)
    assert submit(policies, "wide", 120.0, 1, tasks=24) == [[], []]
    assert bounded.bounded == 1
    after = pool_state(bounded.pool)
    assert after != before and after == pool_state(every.pool)  # the victim moved, as searched
    assert submit(policies, "wider", 121.0, 1, tasks=23) == [[], []]
    assert bounded.bounded == 2
    assert pool_state(bounded.pool) == after == pool_state(every.pool)  # nothing moved
    assert each(policies, Tick(130.0)) == [[], []]
    assert bounded.bounded == 4
    assert pool_state(bounded.pool) == pool_state(every.pool)


def test_a_release_since_the_bound_was_found_is_counted() -> None:
    """``crowded``, a 24-GPU gang waiting (its search settled by the bound: 15 + 1 < 24).
    Jobs finish until its victim's node has 7 GPUs free and two others 8: the most-free three
    nodes hold 23, placement still refuses, but preempting the victim makes 24: the pass
    after the last finish preempts it and starts the gang (the bound kept from before the
    finishes, 15 + 1, would have said the search fails)."""
    bounded, every = policies = crowded()
    assert submit(policies, "wide", 120.0, 1, tasks=24) == [[], []]
    victim = next(iter(bounded.victims(bounded._jobs["wide"], False)))
    node = bounded.pool._jobs[victim.job_id][1][0][0].name
    here = [j for j in bounded.pool._jobs if bounded.pool._jobs[j][1][0][0].name == node]
    others = sorted({bounded.pool._jobs[j][1][0][0].name for j in bounded.pool._jobs} - {node})
    emptied = [j for j in bounded.pool._jobs if bounded.pool._jobs[j][1][0][0].name in others[:2]]
    last: list[Any] = []
    for job_id in [j for j in here if j != victim.job_id] + emptied:
        last = each(policies, Finish(job_id, 130.0))
        assert last[0] == last[1]
        assert pool_state(bounded.pool) == pool_state(every.pool)
    assert [(type(d).__name__, d.job_id) for d in last[0]] == [
        ("Preempt", victim.job_id),
        ("Start", "wide"),
    ]


class LasReplaying(LasPolicy):
    """LAS counting the quiet passes it replayed after starts (``_replays``)."""

    replayed = 0

    def _replays(self, pool: Any, log: Any, stops: bool) -> bool:
        replayed = super()._replays(pool, log, stops)
        self.replayed += replayed
        return replayed


def test_a_pass_after_starts_only_replays_the_quiet_passs_searches() -> None:
    """Eight 8-GPU nodes full of 1-GPU jobs, all demoted at 100 s, six finished on each
    node at 110 s (48 free), a 24-GPU gang waiting: a tick's pass searches for it (settled
    by the bound, 18 + 1 < 24) and starts nothing: kept as quiet. A 1-GPU job arrives and
    starts at once (a start, no stop); the next tick's pass would try the same heads and
    make the same search, which fails again: it is not run, but its search's victim is
    moved, as it would move it (the start moved a node in the buckets). LAS running every
    pass decides the same and leaves the same pool, after each event."""
    config = eight_nodes_of_eight()
    options = {**LAS, "thresholds": (60.0,)}
    policies: Policies = [
        from_config(cls, config, {}, **options) for cls in (LasReplaying, LasEveryPass)
    ]
    replaying, every = policies
    assert isinstance(replaying, LasReplaying)
    full_then_freed(policies, 6)  # 48 free, six on each node: 18 + 1 short of 24, 40 to the bound
    assert submit(policies, "wide", 120.0, 1, tasks=24) == [[], []]
    assert each(policies, Tick(130.0)) == [[], []]
    assert replaying._quiet is not None
    for n, at in enumerate((140.0, 150.0, 160.0)):
        started = submit(policies, f"late{n}", at, 1)
        assert [[d.job_id for d in out] for out in started] == [[f"late{n}"]] * 2
        assert pool_state(replaying.pool) == pool_state(every.pool)
        assert each(policies, Tick(at + 5.0)) == [[], []]
        assert pool_state(replaying.pool) == pool_state(every.pool)
    assert replaying.replayed == 3
