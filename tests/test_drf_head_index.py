"""Given random submissions by several users (some with time limits), finishes, cancels,
requeues, node faults and instants with several events, expect DRF with its heads kept ranked
between passes (``head_index.py``) to decide exactly what a naive DRF decides: one that, at
every start of a pass, ranks every waiting user's first job afresh by the user's dominant
share. A stale entry (a share, a head or a shape not re-filed) shows up as a different start
or order. With backfill (a line per user and GPU count, time limits deciding which heads may
jump the blocked one), the index decides as the scan it replaced, which ranks every line's head
at each pass; and the blocked head's shadow kept within a pass decides as one computed afresh
for each line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_properties import ENDINGS, PROPERTY_SETTINGS, clusters

from labhive.scheduler.core.config import ClusterConfig, load_cluster_config
from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import (
    Decision,
    Event,
    Finish,
    NodeDown,
    NodeUp,
    Reconfigure,
    Requeue,
    SpecRejected,
    Start,
    Submit,
    Tick,
)
from labhive.scheduler.policies.backfill import shadow
from labhive.scheduler.policies.drf import DrfPolicy
from labhive.scheduler.policies.head_index import (
    NOT_THIS_PASS,
    START,
    TIDY_EVERY,
    HeadIndex,
    Kind,
)
from labhive.scheduler.policies.queued import QueuedJob, from_config


class NaiveDrf(DrfPolicy):
    """DRF whose full pass rescans every waiting job for each start it makes."""

    HEAD_INDEX = False

    def _schedule(
        self, out: list[Decision], only: QueuedJob | None = None, groups: Any = None
    ) -> None:
        if only is not None or groups is not None:
            super()._schedule(out, only, groups)
            return
        self._no_room.clear()
        self._blocked = None
        passed: set[str] = set()  # users whose first job failed this pass
        while self.pool.free_gpus > 0:
            heads: dict[str, QueuedJob] = {}
            for job in self._waiting_jobs():
                first = heads.get(job.user)
                if first is None or job.seq < first.seq:
                    heads[job.user] = job
            ready = [
                (self.dominant_share(user), head.seq, head)
                for user, head in heads.items()
                if user not in passed and head.gpus <= self.pool.free_gpus
            ]
            if not ready:
                return
            head = min(ready, key=lambda r: (r[0], r[1]))[2]
            if not self._try(head, out):
                passed.add(head.user)


def ops(gpus: list[int] | None = None) -> Any:
    submit = st.fixed_dictionaries(
        {
            "user": st.sampled_from(["ann", "bob", "cy", "dee", ""]),
            "tasks": st.integers(1, 2),
            "gpus": st.sampled_from(gpus or [1, 1, 2, 4]),
            "time_limit": st.sampled_from([None, 100, 300, 1000]),
        }
    ).map(lambda d: ("submit", {k: v for k, v in d.items() if v is not None}))
    other = st.tuples(
        st.sampled_from(["finish"] * 4 + ["cancel", "requeue", "node_down", "node_up"]),
        st.integers(0, 1000),
    )
    step = st.tuples(st.one_of(submit, other), st.booleans())  # (op, same instant)
    return st.lists(step, min_size=30, max_size=80)


def batches(sched: Any, nodes: list[str], steps: list[Any]) -> Any:
    """The steps as batches of events of one instant, each built when due."""
    down: set[str] = set()
    used: set[str | None]
    batch: list[Event]
    now, batch, used = 0.0, [], set()  # a batch ends or cancels a job once
    for i, ((kind, arg), same) in enumerate(steps):
        if batch and not same:
            yield batch
            now, batch, used = now + 60.0, [], set()
        event: Event | None = None
        if kind == "submit":
            spec = parse_job({"name": f"j{i}", "vc": "vc0", **arg})
            try:
                sched.check(spec)
            except SpecRejected:
                continue
            event = Submit(f"j{i}", spec, now)
        elif kind in ("finish", "cancel", "requeue"):
            views = [v for v in sched.jobs() if (v.state == "WAITING") == (kind == "cancel")]
            if views:
                job_id = views[arg % len(views)].job_id
                event = ENDINGS[kind](job_id, now)
        elif kind == "node_down":
            down.add(node := nodes[arg % len(nodes)])
            event = NodeDown(node, now, "fault")
        elif down:
            down.discard(node := sorted(down)[arg % len(down)])
            event = NodeUp(node, now)
        else:
            event = Tick(now)
        job_id = getattr(event, "job_id", None)
        if event is not None and (job_id is None or job_id not in used):
            batch.append(event)
            used.add(job_id)
    if batch:
        yield batch


class UncachedDrf(DrfPolicy):
    """DRF whose backfill walks the running jobs for every jump it weighs."""

    def _reserved(self, head: QueuedJob) -> tuple[float, int] | None:
        running = [
            (j.gpus, j.started + j.spec.time_limit if j.spec.time_limit else None)
            for j in self._jobs.values()
            if j.running
        ]
        return shadow(head.gpus, self.pool.free_gpus, running)


def files_asked(index: HeadIndex) -> list[Any]:
    """The lines ``index.file`` is asked to file from now on, in order."""
    filed: list[Any] = []
    file = index.file

    def counted(group: Any, *args: Any) -> None:
        filed.append(group)
        file(group, *args)

    index.file = counted  # type: ignore[method-assign, assignment]
    return filed


def check_index(drf: DrfPolicy) -> None:
    """Every line the index holds clean is filed as a rescan would rank it now."""
    index = drf._index
    assert index is not None
    assert not index._aside  # a pass files again what it passed over
    assert not index._off  # and ranks again the kinds it set aside
    ranked = {(id(first), kind) for first, kind in index._tops}
    for kind, (_, heap) in index._heaps.items():
        # each kind's first is ranked, but for a kind parked until a release makes room
        assert not heap or kind in index._parked or (id(heap[0]), kind) in ranked, kind
    live = {
        entry[3]: (entry[0], entry[1], kind)
        for kind, (_, heap) in index._heaps.items()
        for entry in heap
        if index.filed.get(entry[3]) is entry
    }
    assert set(live) == set(index.filed)
    for group in set(drf._groups) | set(live):
        if group in index.dirty:
            continue
        head = drf._head(group)
        filed = None
        if head is not None:
            kind = (head.gang.shape, head.spec.time_limit if drf.backfill else None)
            filed = (drf.group_priority(head), head.seq, kind)
        got = live.get(group)
        if head and filed and got and got != filed and rose(drf, head):
            # a share that rose is re-filed when met (``lazy``): ranked early, never late
            assert got[1:] == filed[1:] and got[0] < filed[0], group
            continue
        assert got == filed, group


def rose(drf: DrfPolicy, head: QueuedJob) -> bool:
    """May the head's line be filed below its rank now: its user's share rose since the last
    pass began, or the line is marked to be re-filed when met?"""
    index = drf._index
    assert index is not None
    return head.user in drf._risen or drf.group_key(head) in index.lazy


@settings(PROPERTY_SETTINGS)
@given(data=st.data())
def test_drf_with_its_head_index_decides_as_a_naive_rescan(data: Any) -> None:
    config = load_cluster_config(data.draw(clusters()))
    nodes = sorted({n.name for n in config.nodes()})
    indexed = from_config(DrfPolicy, config, {})
    naive = from_config(NaiveDrf, config, {})
    assert indexed._index is not None and naive._index is None
    for batch in batches(indexed, nodes, data.draw(ops())):
        if len(batch) == 1:
            assert indexed.handle(batch[0]) == naive.handle(batch[0]), batch
        else:
            assert indexed.handle_batch(batch) == naive.handle_batch(batch), batch
        assert indexed.jobs() == naive.jobs()
        check_index(indexed)


def test_a_share_that_falls_reorders_the_users() -> None:
    """Bob's first job ends, so his share falls below Ann's: his next job goes before hers,
    though a pass had ranked him after her (the finish re-ranks his line)."""
    config = one_node(4)
    drf = from_config(DrfPolicy, config, {})

    def submit(job_id: str, user: str, gpus: int, now: float) -> list[Decision]:
        spec = parse_job({"name": job_id, "vc": "vc0", "user": user, "gpus": gpus})
        return drf.handle(Submit(job_id, spec, now))

    assert submit("a1", "ann", 1, 0)
    assert submit("b1", "bob", 2, 1)
    assert submit("c1", "cy", 1, 2)
    assert not submit("a2", "ann", 2, 3)  # 0 free
    assert not submit("b2", "bob", 2, 4)
    assert not drf.handle(Finish("c1", 5))  # 1 free: ann (1/4) ranked before bob (2/4)
    started = drf.handle(Finish("b1", 6))  # bob 0 GPUs now, ann 1: bob first
    assert [d.job_id for d in started] == ["b2"]


def test_a_reconfigured_cluster_gives_each_user_the_share_of_its_new_size() -> None:
    """Ann runs 1 GPU and Bob 2 on one 4-GPU node (shares 1/4 and 2/4); the cluster grows to
    two such nodes: their shares are 1/8 and 2/8 (DRF keeps each user's share between starts
    and stops, so a share kept for the old pool would rank users by the old totals)."""
    node = {"childCellType": "GPU", "childCellNumber": 4, "isNodeLevel": True}

    def cluster(nodes: int) -> Any:
        cells = [{"cellType": "NODE", "cellAddress": f"n{i}"} for i in range(nodes)]
        vcs = {"vc0": {"virtualCells": [{"cellType": "NODE", "cellNumber": nodes}]}}
        return load_cluster_config(
            {
                "physicalCluster": {"cellTypes": {"NODE": node}, "physicalCells": cells},
                "virtualClusters": vcs,
            }
        )

    drf = from_config(DrfPolicy, cluster(1), {})
    for job_id, user, gpus in (("a1", "ann", 1), ("b1", "bob", 2)):
        spec = parse_job({"name": job_id, "vc": "vc0", "user": user, "gpus": gpus})
        assert drf.handle(Submit(job_id, spec, 0.0))
    assert (drf.dominant_share("ann"), drf.dominant_share("bob")) == (1 / 4, 2 / 4)
    assert not drf.handle(Reconfigure(cluster(2), 1.0))  # both keep running
    assert (drf.dominant_share("ann"), drf.dominant_share("bob")) == (1 / 8, 2 / 8)
    # and the shares the index ranks lines by (kept per user between starts and stops)
    ranks = [drf.group_priority(drf._jobs[job_id])[0] for job_id in ("a1", "b1")]
    assert ranks == [1 / 8, 2 / 8]


@settings(PROPERTY_SETTINGS)
@given(data=st.data())
def test_backfill_keeps_the_shadow_only_while_it_holds(data: Any) -> None:
    """DRF with backfill and time limits decides the same with the blocked head's shadow kept
    between the lines a pass tries (and none sought while no running job has a limit) as
    when it is computed afresh for each."""
    config = load_cluster_config(data.draw(clusters()))
    nodes = sorted({n.name for n in config.nodes()})
    cached = from_config(DrfPolicy, config, {"backfill": True})
    fresh = from_config(UncachedDrf, config, {"backfill": True})
    for batch in batches(cached, nodes, data.draw(ops())):
        if len(batch) == 1:
            assert cached.handle(batch[0]) == fresh.handle(batch[0]), batch
        else:
            assert cached.handle_batch(batch) == fresh.handle_batch(batch), batch


class ScanDrf(DrfPolicy):
    """DRF whose full pass ranks every line's head afresh (as before the index took backfill)."""

    HEAD_INDEX = False


@settings(PROPERTY_SETTINGS)
@given(data=st.data())
def test_drf_with_backfill_and_its_head_index_decides_as_the_scan(data: Any) -> None:
    """Jobs of 1 to 8 GPUs in one or two tasks, some with time limits, so the blocked head's
    shadow binds and a head may jump it by its limit, by its GPU count, or by ranking before it
    once its user's share rose in the pass: every start, its order, and the blocked head as
    the scan's."""
    backfill_index_decides_as_the_scan(data.draw(clusters()), data.draw(ops(gpus=[1, 1, 2, 3, 4])))


def backfill_index_decides_as_the_scan(cluster: Any, drawn: Any) -> None:
    config = load_cluster_config(cluster)
    nodes = sorted({n.name for n in config.nodes()})
    indexed = from_config(DrfPolicy, config, {"backfill": True})
    scan = from_config(ScanDrf, config, {"backfill": True})
    assert indexed._index is not None and scan._index is None
    for batch in batches(indexed, nodes, drawn):
        if len(batch) == 1:
            assert indexed.handle(batch[0]) == scan.handle(batch[0]), batch
        else:
            assert indexed.handle_batch(batch) == scan.handle_batch(batch), batch
        assert blocked(indexed) == blocked(scan)
        assert indexed.jobs() == scan.jobs()
        check_index(indexed)


def test_a_parked_kinds_head_blocks_after_a_head_started_in_the_same_pass() -> None:
    """Two racks of three 4-GPU nodes, one user's 1-GPU jobs, then 3-GPU and 2x1-GPU ones,
    finishes between (the case CI's random draw found): at a pass whose first head starts,
    the next in rank order is a kind parked at an earlier pass (no node had room for it); the
    scan tries it, it fails and blocks, and the index must find the same blocked head (it
    looked at parked kinds only at a pass's first try, and left none blocked)."""
    node = {"childCellType": "GPU", "childCellNumber": 4, "isNodeLevel": True}
    rack = {"childCellType": "NODE", "childCellNumber": 3}
    cluster = {
        "physicalCluster": {
            "cellTypes": {"NODE": node, "RACK": rack},
            "physicalCells": [
                {
                    "cellType": "RACK",
                    "cellChildren": [{"cellAddress": f"r{r}n{n}"} for n in range(3)],
                }
                for r in range(2)
            ],
        },
        "virtualClusters": {
            "vc0": {
                "virtualCells": [
                    {"cellType": "RACK.NODE", "cellNumber": 6},
                    {"cellType": "RACK", "cellNumber": 0},
                    {"cellType": "RACK.NODE.GPU", "cellNumber": 0},
                ]
            }
        },
    }

    def sub(tasks: int, gpus: int) -> Any:
        return (("submit", {"user": "ann", "tasks": tasks, "gpus": gpus}), False)

    fin, cancel = (("finish", 0), False), (("cancel", 0), False)
    drawn = [
        *[sub(1, 1)] * 9, fin, fin, cancel, *[sub(1, 1)] * 8, sub(1, 3), *[sub(2, 1)] * 3,
        (("finish", 2), False), sub(1, 3), fin, sub(1, 1), fin, fin,
    ]  # fmt: skip
    backfill_index_decides_as_the_scan(cluster, drawn)


def blocked(drf: DrfPolicy) -> str | None:
    return None if drf._blocked is None else drf._blocked.job_id


def test_a_pass_meets_each_kind_too_big_for_the_free_gpus_once() -> None:
    """Given 200 users each waiting with a job too big for the one free GPU (200 kinds: 2 to
    201 GPUs) and 50 users each with a 1-GPU job, expect a pass that starts the 1-GPU jobs one
    by one to ask about each big kind once, not once per start: before the kinds were ranked,
    ``best`` visited every kind at every call (a fifth of a contended DRF run, issue 34)."""
    index = HeadIndex()
    for n in range(200):
        index.file(f"big{n}", (((n + 2, 1.0, 0, 1),), None), n + 2, (0.0, n), n)
    for n in range(50):
        index.file(f"small{n}", (((1, 1.0, 0, 1),), None), 1, (0.5, 1000 + n), 1000 + n)
    asked: list[int] = []

    def may_start(kind: Kind, gpus: int, key: Any) -> int:
        asked.append(gpus)
        return START if gpus <= 1 else NOT_THIS_PASS

    started, tried = [], None
    while (entry := index.best(may_start, tried)) is not None:
        tried = entry
        started.append(entry[3])
        index.file(entry[3], None, 0, None, 0)  # its line emptied by the start
    index.restore()
    assert started == [f"small{n}" for n in range(50)]
    assert sorted(g for g in asked if g > 1) == list(range(2, 202))  # each big kind once
    assert len(asked) <= 200 + 2 * 50
    # the next pass asks about the big kinds again (more may be free by then)
    asked.clear()
    assert index.best(lambda kind, gpus, key: START) == ((0.0, 0), 0, 1, "big0")


def nodes_of_eight(n: int) -> ClusterConfig:
    """``n`` 8-GPU nodes, n0, n1, ..., all in one VC, vc0."""
    return load_cluster_config(
        {
            "physicalCluster": {
                "cellTypes": {
                    "NODE": {"childCellType": "GPU", "childCellNumber": 8, "isNodeLevel": True}
                },
                "physicalCells": [{"cellType": "NODE", "cellAddress": f"n{i}"} for i in range(n)],
            },
            "virtualClusters": {"vc0": {"virtualCells": [{"cellType": "NODE", "cellNumber": n}]}},
        }
    )


def eight_busy_nodes() -> DrfPolicy:
    """DRF on eight 8-GPU nodes, each running a 7-GPU and a 1-GPU job; ann waits with a job of
    16 one-GPU tasks (two empty nodes)."""
    config = nodes_of_eight(8)
    drf = from_config(DrfPolicy, config, {})
    for n, (job_id, gpus) in enumerate(
        [*((f"big{i}", 7) for i in range(8)), *((f"one{i}", 1) for i in range(8)), ("a", 16)]
    ):
        tasks, gpus = (16, 1) if gpus == 16 else (1, gpus)  # ann's: 16 one-GPU tasks
        spec = parse_job(
            {"name": job_id, "vc": "vc0", "user": job_id[:3], "tasks": tasks, "gpus": gpus}
        )
        drf.check(spec)
        drf.handle(Submit(job_id, spec, float(n)))
    return drf


def asking_may_fit(drf: DrfPolicy) -> tuple[list[int], Callable[[str, float], list[str]]]:
    """The GPU counts ``drf`` asks placement about (``may_fit``), cleared at each ``finish``,
    and ``finish(job_id, now)``: the jobs a finish starts."""
    asked: list[int] = []
    may_fit = drf.pool.may_fit

    def counted(gpus: int) -> bool:
        asked.append(gpus)
        return may_fit(gpus)

    drf.pool.may_fit = counted  # type: ignore[method-assign]

    def finish(job_id: str, now: float) -> list[str]:
        asked.clear()
        return [d.job_id for d in drf.handle(Finish(job_id, now)) if isinstance(d, Start)]

    return asked, finish


def decide_alike(
    fast: Any, plain: Any, nodes: list[str], steps: list[Any], *, check: Any = None
) -> None:
    """Give ``fast`` and ``plain`` the same batches of ``steps`` and expect the same decisions
    and jobs after each (and ``check(fast, plain)``, where given, to pass)."""
    for batch in batches(fast, nodes, steps):
        if len(batch) == 1:
            assert fast.handle(batch[0]) == plain.handle(batch[0]), batch
        else:
            assert fast.handle_batch(batch) == plain.handle_batch(batch), batch
        assert fast.jobs() == plain.jobs()
        if check is not None:
            check(fast, plain)


@pytest.mark.sources
def test_a_kind_no_node_has_room_for_is_asked_again_only_once_a_release_could_make_room() -> None:
    """Eight 8-GPU nodes, each running a 7-GPU and a 1-GPU job; ann waits with a 16-GPU job
    (two empty nodes). Each 1-GPU job that ends leaves its node 1 GPU free: no pass asks about
    ann's job again (before, every pass did: on a contended cluster most of a DRF pass was
    such questions, issue 34). A 7-GPU job that ends leaves a node empty: the pass asks again
    (one empty node is not enough), and once a second node is empty her job starts."""
    drf = eight_busy_nodes()
    asked, finish = asking_may_fit(drf)

    assert finish("one0", 100) == [] and asked == [16]  # parked: a node must be left empty
    for i in range(1, 8):
        assert finish(f"one{i}", 100 + i) == [] and asked == [], i  # 1 GPU freed: not asked
    assert finish("big0", 200) == [] and asked == [16]  # n0 empty: asked (one is not enough)
    # it starts: the index asks once, and _try, told so, not again (it asked too, before)
    assert finish("big1", 201) == ["a"] and asked == [16]
    check_index(drf)


class ShareModel:
    """Users' shares and their lines (user, GPU count) filed in a ``HeadIndex`` two ways:
    ``lazy``, where a share that rises marks the user's lines to be re-filed when met (as DRF
    with backfill does), and ``eager``, where every line of a user whose share changed is
    re-filed at once."""

    def __init__(self) -> None:
        self.share: dict[str, int] = {}
        self.heads: dict[tuple[str, int], int] = {}  # line -> its head's seq
        self.lazy, self.eager = HeadIndex(), HeadIndex()
        self.lazy.rekey = lambda group, entry: (self.share[group[0]], entry[1])  # type: ignore[index]
        self.seq = 0
        self.rekeyed = 0

    def file(self, line: tuple[str, int], index: HeadIndex) -> None:
        seq = self.heads.get(line)
        if seq is None:
            index.file(line, None, 0, None, 0)
        else:
            kind = (((line[1], 1.0, 0, 1),), None)
            index.file(line, kind, line[1], (self.share[line[0]], seq), seq)

    def both(self, line: tuple[str, int]) -> None:
        self.file(line, self.lazy)
        self.file(line, self.eager)

    def submit(self, user: str, gpus: int) -> None:
        self.share.setdefault(user, 0)
        line = (user, gpus)
        if line not in self.heads:  # a line's head stays until it starts
            self.heads[line] = self.seq
            self.both(line)
        self.seq += 1

    def change(self, user: str, by: int) -> None:
        self.share[user] = max(0, self.share[user] + by)
        lines = [line for line in self.heads if line[0] == user]
        for line in lines:
            self.file(line, self.eager)
            if by < 0:
                self.file(line, self.lazy)  # a fall is re-filed at once
            else:
                self.lazy.lazy.add(line)  # a rise when met

    def run_pass(self, free: int, refused: set[int]) -> None:
        """``best`` until nothing may start: the GPU counts in ``refused`` found no room (not
        again this pass), each answer started (its line emptied, its user's share risen, as
        DRF re-files a started line at once and its user's other lines at the next pass)."""
        tried: dict[str, Any] = {"lazy": None, "eager": None}
        risen: list[str] = []

        def may_start(kind: Kind, gpus: int, key: Any) -> int:
            return NOT_THIS_PASS if gpus > free or gpus in refused else START

        while True:
            got = {name: ix.best(may_start, tried[name]) for name, ix in self.ix().items()}
            assert strip(got["lazy"]) == strip(got["eager"])
            if got["lazy"] is None:
                break
            line: tuple[str, int] = got["lazy"][3]  # type: ignore[assignment]
            tried.update(got)
            free -= line[1]
            del self.heads[line]
            self.both(line)
            risen.append(line[0])
        for index in self.ix().values():
            index.restore()
        for user in risen:
            self.change(user, 1)

    def ix(self) -> dict[str, HeadIndex]:
        return {"lazy": self.lazy, "eager": self.eager}


def strip(entry: Any) -> Any:
    """An entry without its version (each index numbers its own)."""
    return None if entry is None else (entry[0], entry[1], entry[3])


@settings(PROPERTY_SETTINGS)
@given(data=st.data())
def test_lines_whose_rank_rose_are_filed_when_met_as_if_filed_at_once(data: Any) -> None:
    """Given five users' lines of 1 to 4 GPUs, shares that rise (a start) and fall (a stop),
    and passes that start heads while GPUs last (some GPU counts finding no room), expect an
    index that re-files a user's lines when met after a rise (``lazy``) to answer each pass
    exactly as one that re-files them all at once: a line ranked too early is re-ranked
    before anything reads its rank."""
    model = ShareModel()
    users = st.sampled_from(["ann", "bob", "cy", "dee", "eve"])
    step = st.one_of(
        st.tuples(st.just("submit"), users, st.integers(1, 4)),
        st.tuples(st.just("change"), users, st.integers(-3, 3)),
        st.tuples(st.just("pass"), st.integers(0, 6), st.sets(st.integers(1, 4), max_size=2)),
    )
    for kind, a, b in data.draw(st.lists(step, min_size=10, max_size=60)):
        if kind == "submit":
            model.submit(a, b)
        elif kind == "change" and a in model.share:
            model.change(a, b)
        elif kind == "pass":
            model.run_pass(a, b)
    model.run_pass(100, set())  # everything left, in order
    assert not model.heads


def test_a_risen_users_lines_are_not_re_filed_until_met() -> None:
    """Given ann's lines of 2 to 8 GPUs behind 50 users' 1-GPU lines, and ann's share risen,
    expect a pass that starts ten 1-GPU heads to re-rank none of ann's lines (before, each
    rise re-filed every line of the user: issue 34), and a pass reaching them to answer by
    her share now."""
    index = HeadIndex()
    share = {"ann": 0.0}
    rekeyed: list[Any] = []

    def rekey(group: Any, entry: Any) -> Any:
        rekeyed.append(group)
        return (share[group[0]], entry[1])

    index.rekey = rekey
    for n in range(50):
        share[f"u{n}"] = 0.1
        index.file((f"u{n}", 1), (((1, 1.0, 0, 1),), None), 1, (0.1, 100 + n), 100 + n)
    for gpus in range(2, 9):
        index.file(("ann", gpus), (((gpus, 1.0, 0, 1),), None), gpus, (0.2, gpus), gpus)
    share["ann"] = 0.5  # she started a job: her lines rank after everyone's now
    index.lazy.update(("ann", gpus) for gpus in range(2, 9))

    def ones(kind: Kind, gpus: int, key: Any) -> int:
        return START if gpus == 1 else NOT_THIS_PASS

    tried = None
    for n in range(10):
        tried = index.best(ones, tried)
        assert tried is not None and tried[3] == (f"u{n}", 1)
        index.file(tried[3], None, 0, None, 0)
    index.restore()
    assert rekeyed == []  # ann's lines rank after the ten started: none re-ranked
    order = []
    while (entry := index.best(lambda kind, gpus, key: START, None)) is not None:
        order.append(entry[3])
        index.file(entry[3], None, 0, None, 0)
    assert order == [*((f"u{n}", 1) for n in range(10, 50)), *(("ann", g) for g in range(2, 9))]
    assert sorted(rekeyed) == [("ann", g) for g in range(2, 9)]  # each once, when met


@pytest.mark.sources
def test_a_stop_re_files_only_the_lines_filed_above_the_users_share() -> None:
    """One 8-GPU node, backfill: seven 1-GPU jobs of user f and ann's first 1-GPU job fill
    it; ann waits with jobs of 2, 3, 4 and 5 GPUs and another of 1 GPU, which starts when one
    of f's jobs ends. Expect the end of ann's first job (her share falls back to 1/8, where
    her 2- to 5-GPU lines are filed) to re-file none of her lines, where each stop re-filed
    every line of the user (issue 34), and the pass to decide as before (nothing fits)."""
    config = one_node(8)
    drf = from_config(DrfPolicy, config, {"backfill": True})
    jobs = [(f"f{i}", "f", 1) for i in range(7)] + [("a1", "ann", 1)]
    jobs += [(f"a{g}", "ann", g) for g in (2, 3, 4, 5)] + [("a1b", "ann", 1)]
    for n, (job_id, user, gpus) in enumerate(jobs):
        spec = parse_job({"name": job_id, "vc": "vc0", "user": user, "gpus": gpus})
        drf.handle(Submit(job_id, spec, float(n)))
    assert [d.job_id for d in drf.handle(Finish("f0", 20.0))] == ["a1b"]
    index = drf._index
    assert index is not None
    filed = files_asked(index)
    assert drf.handle(Finish("a1", 30.0)) == []
    assert [g for g in filed if g[0] == "ann"] == []
    check_index(drf)


def one_node(gpus: int) -> Any:
    """One node of ``gpus`` GPUs, ``n0``, all of it VC ``vc0``'s."""
    node = {"childCellType": "GPU", "childCellNumber": gpus, "isNodeLevel": True}
    return load_cluster_config(
        {
            "physicalCluster": {
                "cellTypes": {"NODE": node},
                "physicalCells": [{"cellType": "NODE", "cellAddress": "n0"}],
            },
            "virtualClusters": {"vc0": {"virtualCells": [{"cellType": "NODE", "cellNumber": 1}]}},
        }
    )


def test_a_requeued_job_heads_its_line_again_before_the_next_pass() -> None:
    """One 8-GPU node, backfill. Ann runs a1 (1 GPU), bob b1, cy and dee 3 GPUs each; ann's
    a2 (2 GPUs) and a3 (1 GPU), bob's b2 and b3 (1 GPU) wait; cy's job ends, so a2 and b2
    start (ann 3/8, bob 2/8) and a3's line stays filed at ann's share then (1/8). Then a1 is
    requeued: ann's share falls to 2/8, not below where a3's line is filed, so the stop
    re-files none of her lines; but a1 rejoins that line ahead of a3. Expect a1 to start
    again on its own GPU, before bob's b3 (same share 2/8, a later submission): the line is
    re-filed because a1 heads it now (a job joining a line touches it only where it heads it,
    ``HeadIndex.touch``), not ranked by a3's place."""
    config = one_node(8)
    drf = from_config(DrfPolicy, config, {"backfill": True})
    scan = from_config(ScanDrf, config, {"backfill": True})
    jobs = [("a1", "ann", 1), ("b1", "bob", 1), ("c1", "cy", 3), ("d1", "dee", 3)]
    jobs += [("a2", "ann", 2), ("b2", "bob", 1), ("b3", "bob", 1), ("a3", "ann", 1)]
    for n, (job_id, user, gpus) in enumerate(jobs):
        spec = parse_job({"name": job_id, "vc": "vc0", "user": user, "gpus": gpus})
        event = Submit(job_id, spec, float(n))
        assert drf.handle(event) == scan.handle(event)
    for policy in (drf, scan):
        assert [d.job_id for d in policy.handle(Finish("c1", 10.0))] == ["a2", "b2"]
        assert [d.job_id for d in policy.handle(Requeue("a1", 20.0))] == ["a1"]
    check_index(drf)


@pytest.mark.sources
def test_jobs_joining_a_line_behind_its_head_leave_it_as_filed() -> None:
    """One 2-GPU node that ann's and bob's jobs fill; ann's a1 (2 GPUs) waits, and the pass
    after bob's job ends files her line (1 GPU free). Then ten more of her jobs join behind
    a1, bob's next job starts and ends: expect the pass after it not to file ann's line again
    (before, each job that joined it touched the line, and the next pass re-filed the same
    head: a third of a contended DRF run's filings, issue 34)."""
    drf = from_config(DrfPolicy, one_node(2), {})
    index = drf._index
    assert index is not None

    def submit(job_id: str, user: str, gpus: int, now: float) -> list[str]:
        spec = parse_job({"name": job_id, "vc": "vc0", "user": user, "gpus": gpus})
        return [d.job_id for d in drf.handle(Submit(job_id, spec, now))]

    assert submit("a0", "ann", 1, 0) + submit("b0", "bob", 1, 1) == ["a0", "b0"]
    assert submit("a1", "ann", 2, 2) == []
    assert drf.handle(Finish("b0", 3)) == []  # a1 needs 2 GPUs, 1 is free
    assert "ann" in index.filed and not index.dirty
    for n in range(2, 12):
        assert submit(f"a{n}", "ann", 1, 3 + n) == []  # behind a1
    assert submit("b1", "bob", 1, 20) == ["b1"]
    filed = files_asked(index)
    assert drf.handle(Finish("b1", 30)) == []
    assert "ann" not in filed
    check_index(drf)


@pytest.mark.sources
def test_a_stop_of_a_user_with_nothing_waiting_files_nothing() -> None:
    """One 4-GPU node: ann's 3-GPU job and bob's b0 run; bob's b1 and ann's 4-GPU job wait.
    b0 ends and b1 starts (bob's share is the lower). Then b1 ends with nothing of bob's
    waiting: expect the pass after it to file no line (before, each stop re-filed the user's
    line to find it empty: issue 34). Then ann's job ends: her share falls, her line is
    re-filed, and her 4-GPU job starts."""
    drf = from_config(DrfPolicy, one_node(4), {})
    index = drf._index
    assert index is not None
    jobs = [("a0", "ann", 3), ("b0", "bob", 1), ("b1", "bob", 1), ("a1", "ann", 4)]
    for n, (job_id, user, gpus) in enumerate(jobs):
        spec = parse_job({"name": job_id, "vc": "vc0", "user": user, "gpus": gpus})
        drf.handle(Submit(job_id, spec, float(n)))
    assert [d.job_id for d in drf.handle(Finish("b0", 10))] == ["b1"]
    filed = files_asked(index)
    assert drf.handle(Finish("b1", 11)) == [] and filed == []  # bob waits for nothing
    assert [d.job_id for d in drf.handle(Finish("a0", 12))] == ["a1"]
    assert filed[0] == "ann"
    check_index(drf)


def test_a_stop_forgets_the_users_lines_that_neither_wait_nor_are_filed() -> None:
    """One 16-GPU node, backfill: bob's 16-GPU job runs; ann's jobs of 1 to 5 GPUs, bob's
    3-GPU one and ann's 6-GPU one wait. Bob's job ends: ann's five start (each line filed
    empty as it starts), bob's and her 6-GPU job wait. Expect her first stop to leave her
    only the line that waits (each stop of hers met every line of every GPU count she ever
    asked for: about five a user where one waits, issue 34), and a job of hers joining a
    forgotten line to be filed again: every decision as the scan's."""
    config = one_node(16)
    drf = from_config(DrfPolicy, config, {"backfill": True})
    scan = from_config(ScanDrf, config, {"backfill": True})

    def both(event: Event) -> list[str]:
        got = drf.handle(event)
        assert got == scan.handle(event)
        check_index(drf)
        return [d.job_id for d in got]

    jobs = [("b0", "bob", 16), *((f"a{g}", "ann", g) for g in range(1, 6))]
    jobs += [("b1", "bob", 3), ("a6", "ann", 6)]
    for n, (job_id, user, gpus) in enumerate(jobs):
        both(
            Submit(job_id, parse_job({"name": job_id, "vc": "vc0", "user": user, "gpus": gpus}), n)
        )
    assert both(Finish("b0", 10)) == [f"a{g}" for g in range(1, 6)]
    assert drf._split["ann"] == {("ann", g) for g in range(1, 7)}
    assert both(Finish("a1", 11)) == []  # 2 GPUs free: b1 needs 3
    assert drf._split["ann"] == {("ann", 6)}
    spec = parse_job({"name": "a7", "vc": "vc0", "user": "ann", "gpus": 4})
    assert both(Submit("a7", spec, 12)) == []  # joins ("ann", 4) again, waits
    assert drf._split["ann"] == {("ann", 4), ("ann", 6)}
    assert both(Finish("a2", 13)) == ["b1"]
    assert both(Finish("a3", 14)) == ["a7"]


def test_stale_entries_are_dropped_within_a_few_passes() -> None:
    """Given 10 lines re-filed at every pass for 1,000 passes (each re-filing leaves a stale
    entry behind), expect the heaps never to hold more than twice the live entries, plus 64,
    plus the pushes of the ``TIDY_EVERY`` passes between two counts (``restore`` counts them
    once in so many passes, not at every pass: issue 34), and every answer as filed."""
    index = HeadIndex()
    kind: Kind = (((1, 1.0, 0, 1),), None)
    most = 0
    for n in range(1000):
        for line in range(10):
            index.file(f"u{line}", kind, 1, (float(n + line), line), line)
        most = max(most, index._entries)
        index.restore()
    assert most <= 2 * 10 + 64 + 10 * TIDY_EVERY
    assert index.best(lambda kind, gpus, key: START) == ((999.0, 0), 0, 10_000 - 9, "u0")
