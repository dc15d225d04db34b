"""Given random clusters of one to three VCs and random submissions to every VC (1 to 8 GPUs in
one or two tasks), finishes, cancels, requeues, node faults, ticks and a new cluster config,
expect Capacity (borrowing on and off) to decide exactly as the Capacity whose pass ranks every
VC's head afresh at each pass and skips hopeless heads one by one (``QueuedPass._schedule``):
its pass keeps the VCs' ranked heads between passes, drops the heads left that cannot start
once its searches are spent, and makes no probe for a borrowed head's search
(``capacity_pass.py``, issue 34). A kept rank not refreshed when its VC's share changes, or a
head dropped that could still start, shows up as a different start or order.

And given eight VCs each with a 16-GPU head beyond its quota that no two nodes have room for,
expect a pass after a finish to rank only the finished job's VC again and to settle every
head by counts, asking placement nothing and building no release probe (the pass before:
eight ranked, eight weighed, two tried, three placements asked, two probes)."""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_properties import ENDINGS, PROPERTY_SETTINGS

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import (
    Event,
    Finish,
    NodeDown,
    NodeUp,
    Reconfigure,
    SpecRejected,
    Submit,
    Tick,
)
from labhive.scheduler.policies import preempt_probe
from labhive.scheduler.policies.capacity import CapacityPolicy
from labhive.scheduler.policies.queued import from_config
from labhive.scheduler.policies.queued_pass import QueuedPass


class CapacityRankingAfresh(CapacityPolicy):
    """Capacity with ``QueuedPass``'s own pass: every VC's head fetched and ranked anew at
    each pass, each head reached tried or skipped as hopeless in turn, every search made on
    paper."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._line_heads = None  # what the Capacity pass keys on: off, the plain pass runs

    def _schedule(self, out: Any, only: Any = None, groups: Any = None) -> None:
        QueuedPass._schedule(self, out, only, groups)  # a submission's pass too


class CapacityCheckingHeld(CapacityPolicy):
    """Capacity whose pass checks, at each head it reaches and before it thins, that the
    refused counts it reads (``_held``: ``SizeRefusals.held`` asked again only after a
    release) are those ``held`` would give now, asked of a copy (the pool's ``peak`` kept)."""

    def _fresh_held(self) -> dict[int, int]:
        sizes = copy.copy(self._sizes)
        sizes._refused = dict(self._sizes._refused)
        peak = self.pool.peak
        fresh = dict(sizes.held(self.pool))
        self.pool.peak = peak
        return fresh

    def _next_head(self, heads: Any, out: Any) -> None:
        assert dict(self._held()) == self._fresh_held()
        super()._next_head(heads, out)

    def _thinned(self, heads: Any) -> Any:
        assert dict(self._held()) == self._fresh_held()
        return super()._thinned(heads)


@st.composite
def squeezed(draw: Any) -> dict[str, Any]:
    """Two to six nodes of 2, 4 or 8 GPUs; two to four VCs, each guaranteed one or more whole
    nodes (a node or two may be left to no VC): every VC has a share to rank it by."""
    gpus = draw(st.sampled_from([2, 4, 8]))
    nodes = draw(st.integers(2, 6))
    vcs = draw(st.integers(2, min(4, nodes)))
    owned = draw(st.lists(st.integers(1, 2), min_size=vcs, max_size=vcs))
    while sum(owned) > nodes:
        owned[owned.index(max(owned))] -= 1
    node = {"childCellType": "GPU", "childCellNumber": gpus, "isNodeLevel": True}
    return {
        "physicalCluster": {
            "cellTypes": {"NODE": node},
            "physicalCells": [{"cellType": "NODE", "cellAddress": f"n{i}"} for i in range(nodes)],
        },
        "virtualClusters": {
            f"vc{v}": {"virtualCells": [{"cellType": "NODE", "cellNumber": n}]}
            for v, n in enumerate(owned)
        },
    }


def steps(vcs: int, gpus: int, sizes: list[int] | None = None, most: int = 90) -> Any:
    """Submissions to any of ``vcs`` VCs (more to the first, so one VC's line is deep) of one
    or two tasks of 1 GPU up to a node's ``gpus`` (two of a node's: a gang wider than a node),
    endings, node faults, ticks and a new cluster config, each with whether it shares the
    instant of the one before."""
    submit = st.fixed_dictionaries(
        {
            "vc": st.sampled_from([f"vc{v}" for v in range(vcs)] + ["vc0"]),
            "tasks": st.integers(1, 2),
            "gpus": st.sampled_from(sizes or [1, 1, 2, max(1, gpus // 2), gpus]),
        }
    ).map(lambda d: ("submit", d))
    other = st.tuples(
        st.sampled_from(
            ["finish"] * 6 + ["cancel", "requeue", "node_down", "node_up", "tick", "reconfigure"]
        ),
        st.integers(0, 1000),
    )
    step = st.tuples(st.one_of(submit, submit, other), st.booleans())
    return st.lists(step, min_size=30, max_size=most)


def batches(
    policy: CapacityPolicy, nodes: list[str], drawn: list[Any], other: Callable[[], Any]
) -> Iterator[list[Event]]:
    """The drawn steps as batches of one instant's events, each built when due (an ending
    picks among the jobs ``policy`` holds then); a reconfigure goes to ``other()``'s config."""
    down: set[str] = set()
    now, batch, used = 0.0, list[Event](), set[str | None]()
    for i, ((kind, arg), same) in enumerate(drawn):
        if batch and not same:
            yield batch
            now, batch, used = now + 60.0, [], set()
        event: Event | None = None
        if kind == "submit":
            spec = parse_job({"name": f"j{i}", **arg})
            try:
                policy.check(spec)
            except SpecRejected:
                continue
            event = Submit(f"j{i}", spec, now)
        elif kind in ENDINGS:
            views = [v for v in policy.jobs() if (v.state == "WAITING") == (kind == "cancel")]
            if views:
                event = ENDINGS[kind](views[arg % len(views)].job_id, now)
        elif kind == "node_down":
            down.add(node := nodes[arg % len(nodes)])
            event = NodeDown(node, now, "fault")
        elif kind == "node_up" and down:
            down.discard(node := sorted(down)[arg % len(down)])
            event = NodeUp(node, now)
        elif kind == "reconfigure":  # alone in its instant (submissions are checked on it)
            if batch:
                yield batch
                now, batch, used = now + 60.0, [], set()
            yield [Reconfigure(other(), now)]
            now, down = now + 60.0, set()
            continue
        else:
            event = Tick(now)
        job_id = getattr(event, "job_id", None)
        if event is not None and (job_id is None or job_id not in used):
            batch.append(event)
            used.add(job_id)
    if batch:
        yield batch


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), borrow=st.booleans(), searches=st.sampled_from([1, 2]))
def test_the_capacity_pass_decides_as_one_ranking_every_head_afresh(
    data: Any, borrow: bool, searches: int
) -> None:
    """(With one search a pass, as well as two: its heads left are dropped sooner.)"""
    configs = [load_cluster_config(data.draw(squeezed())) for _ in range(2)]
    config = configs[0]
    nodes = sorted({n.name for n in config.nodes()})
    kept = from_config(CapacityCheckingHeld, config, {}, borrow=borrow)
    afresh = from_config(CapacityRankingAfresh, config, {}, borrow=borrow)
    assert kept._line_heads is not None and afresh._line_heads is None
    kept.SEARCHES_PER_PASS = afresh.SEARCHES_PER_PASS = searches
    drawn = data.draw(steps(len(config.vcs), max(len(n.gpus) for n in config.nodes())))

    def another_config() -> Any:  # the other of the two: other nodes and quotas, same VCs
        configs.reverse()
        return configs[0]

    for batch in batches(kept, nodes, drawn, another_config):
        if len(batch) == 1:
            assert kept.handle(batch[0]) == afresh.handle(batch[0]), batch
        else:
            assert kept.handle_batch(batch) == afresh.handle_batch(batch), batch
        assert kept.jobs() == afresh.jobs()
        assert kept.cluster() == afresh.cluster()
        # the kept counts by GPU count are those of the kept heads, with no count of none
        assert kept._kept_sizes == Counter(j.gpus for j in kept._kept_jobs.values())
        assert kept._inert_sizes == Counter(g for g in kept._inert.values() if g)
        assert 0 not in kept._kept_counts.values() and 0 not in kept._inert_sizes.values()
        assert set(kept._live) == set(kept._kept_jobs) - set(kept._inert)  # the heads not inert
        if isinstance(batch[0], Reconfigure):
            nodes = sorted({n.name for n in batch[0].config.nodes()})


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), searches=st.sampled_from([1, 2]))
def test_fragmented_8_gpu_nodes_skip_only_passes_that_change_nothing(
    data: Any, searches: int
) -> None:
    """Given the cluster squeezed as the contended one is (8-GPU nodes, jobs of 3 to 7 GPUs
    on a node or two that leave nodes part-used, wide borrowers refused by free counts),
    expect the same decisions as the Capacity ranking every head afresh: the passes not made
    as dry (``_dry_pass``) were those that would start and preempt nothing."""
    config = load_cluster_config(data.draw(squeezed().filter(lambda c: _node_gpus(c) == 8)))
    nodes = sorted({n.name for n in config.nodes()})
    kept = from_config(CapacityCheckingHeld, config, {})
    afresh = from_config(CapacityRankingAfresh, config, {})
    kept.SEARCHES_PER_PASS = afresh.SEARCHES_PER_PASS = searches
    drawn = data.draw(steps(len(config.vcs), 8, [1, 3, 5, 6, 7, 8], most=150))
    for batch in batches(kept, nodes, drawn, lambda: config):
        assert kept.handle_batch(batch) == afresh.handle_batch(batch), batch
        assert kept.jobs() == afresh.jobs()


def _node_gpus(raw: dict[str, Any]) -> int:
    return int(raw["physicalCluster"]["cellTypes"]["NODE"]["childCellNumber"])


def eight_vcs_of_a_node() -> Any:
    """Eight 8-GPU nodes; VCs vc0 to vc7, each guaranteed one node's worth (8 GPUs)."""
    node = {"childCellType": "GPU", "childCellNumber": 8, "isNodeLevel": True}
    return load_cluster_config(
        {
            "physicalCluster": {
                "cellTypes": {"NODE": node},
                "physicalCells": [{"cellType": "NODE", "cellAddress": f"n{i}"} for i in range(8)],
            },
            "virtualClusters": {
                f"vc{v}": {"virtualCells": [{"cellType": "NODE", "cellNumber": 1}]}
                for v in range(8)
            },
        }
    )


class Counted:
    """What a Capacity policy's passes ask from now on: heads ranked (``group_priority``),
    heads weighed as hopeless (``_hopeless``), tries (``_try``), placement's answers
    (``NodePool.may_fit`` and ``place``), release probes built."""

    def __init__(self, policy: CapacityPolicy, monkeypatch: Any) -> None:
        self.ranked = self.weighed = self.tried = self.placements = self.probes = 0

        def counting(owner: Any, name: str, field: str) -> None:
            real = getattr(owner, name)

            def counted(*args: Any) -> Any:
                setattr(self, field, getattr(self, field) + 1)
                return real(*args)

            monkeypatch.setattr(owner, name, counted)

        counting(policy, "group_priority", "ranked")
        counting(policy, "_hopeless", "weighed")
        counting(policy, "_try", "tried")
        counting(policy.pool, "may_fit", "placements")
        counting(policy.pool, "place", "placements")
        probe = preempt_probe.ReleaseProbe

        class CountedProbe(probe):  # type: ignore[misc,valid-type]
            def __init__(inner, *args: Any) -> None:
                self.probes += 1
                super().__init__(*args)

        monkeypatch.setattr("labhive.scheduler.policies.queued_pass.ReleaseProbe", CountedProbe)

    def asked(self) -> tuple[int, int, int, int, int]:
        return (self.ranked, self.weighed, self.tried, self.placements, self.probes)


def a_pass_after_a_finish(cls: type[CapacityPolicy], monkeypatch: Any) -> Counted:
    """Eight 8-GPU nodes, each running a 6-GPU job of its own VC (guaranteed), and vc7 a
    1-GPU job beside its six; each VC's head wants 16 GPUs (two tasks of 8), beyond its
    quota (borrowed). vc7's 1-GPU job ends: 16 GPUs free, 2 on each node, so no 16-GPU gang
    fits; what does the pass after it ask?"""
    policy = from_config(cls, eight_vcs_of_a_node(), {})
    now = 0.0

    def submit(job_id: str, vc: str, gpus: int, tasks: int = 1) -> None:
        nonlocal now
        now += 1.0
        spec = parse_job({"name": job_id, "vc": vc, "gpus": gpus // tasks, "tasks": tasks})
        policy.check(spec)
        policy.handle(Submit(job_id, spec, now))

    for v in range(8):
        submit(f"six{v}", f"vc{v}", 6)
    submit("one", "vc7", 1)
    for v in range(8):
        submit(f"wide{v}", f"vc{v}", 16, tasks=2)
    assert [v.job_id for v in policy.jobs() if v.state == "WAITING"] == [
        f"wide{v}" for v in range(8)
    ]
    assert policy.handle(Tick(now + 1.0)) == []  # a full pass: the heads ranked and kept
    counted = Counted(policy, monkeypatch)
    assert policy.handle(Finish("one", now + 2.0)) == []
    return counted


@pytest.mark.sources
def test_a_pass_ranks_only_the_vc_that_changed_and_asks_placement_nothing(
    monkeypatch: Any,
) -> None:
    """The kept pass ranks vc7's head again (its 1-GPU job ended: its share fell) and settles
    the eight heads by counts: each may only borrow, and placement refused 16 GPUs at the
    pass before, which a release leaving 2 GPUs on a node cannot undo (``SizeRefusals``);
    the first two spend the pass's two searches (16 GPUs free, enough by count; a borrowed
    head preempts nobody) and the six left are dropped at once. Before, the pass ranked all
    eight heads, weighed each one by one but the first (``_hopeless`` is asked only once a
    head has blocked), tried two, asked placement three times (each try, then the refusal it
    keeps) and built a release probe for each of the two searches."""
    kept = a_pass_after_a_finish(CapacityPolicy, monkeypatch)
    assert kept.asked() == (1, 0, 0, 0, 0)
    afresh = a_pass_after_a_finish(CapacityRankingAfresh, monkeypatch)
    assert afresh.asked() == (8, 7, 2, 3, 2)


def test_a_job_joining_behind_a_kept_head_leaves_a_changed_share_to_be_ranked() -> None:
    """Given eight VCs of one node each, all busy, and vc0's 8-GPU head waiting and kept by a
    pass, a job joining behind that head need not rank vc0 again (its head and share stand:
    the line is taken off ``_touched``), unless vc0's share changed since the pass (as a
    preemption's stop within a pass leaves it), when it stays to be ranked again."""
    policy = from_config(CapacityPolicy, eight_vcs_of_a_node(), {})
    now = 0.0

    def submit(job_id: str, vc: str) -> None:
        spec = parse_job({"name": job_id, "vc": vc, "gpus": 8})
        policy.check(spec)
        policy.handle(Submit(job_id, spec, now))

    for v in range(8):
        submit(f"run{v}", f"vc{v}")
    submit("head", "vc0")
    assert policy.handle(Tick(1.0)) == []  # a full pass: vc0's head kept
    submit("behind", "vc0")
    assert "vc0" not in policy._touched
    policy._share_changed("vc0")  # (what a stop of one of vc0's jobs marks)
    submit("behind2", "vc0")
    assert "vc0" in policy._touched
