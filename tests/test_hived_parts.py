"""Given HiveD's scheduler, expect its parts to be objects it holds, each with its state its own
and documented where declared, not mixins sharing one ``self`` (issue 32, item 3).

The class queue (``queueing.ClassQueue``), whose turn it is inside a VC (``turns.Turns``),
what a job asks for (``sizing.Sizing``), the search for a job's cells (``attempt.Attempt``),
the record of why one failed (``failures.Failures``), GPU shares (``shares.Shares``),
preemption, node health and adoption are held as ``queue``, ``turns``, ``sizing``,
``attempt``, ``failures``, ``shares``, ``preemption``, ``health`` and ``adoption``; no mixin
is left (the scheduler's only base in ``hived/`` is ``HivedBase``), the base keeps no
``raise NotImplementedError`` stub for a call from one into another, and what a part does
lands in the scheduler's state (a job the queue hands to ``attempt`` starts on the
scheduler's cells).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import replace

from helpers import Cluster

from labhive.scheduler.core.config import FairShare, virtual_cluster
from labhive.scheduler.core.jobs import JobSpec, RoleSpec
from labhive.scheduler.core.model import Reconfigure, Submit
from labhive.scheduler.hived import attempt, failures, queueing, shares, sizing, turns
from labhive.scheduler.hived.base import HivedBase
from labhive.scheduler.hived.core import HivedScheduler

#: Attribute -> the part's class, as ``HivedScheduler`` holds them.
PARTS = {
    "queue": queueing.ClassQueue,
    "turns": turns.Turns,
    "sizing": sizing.Sizing,
    "attempt": attempt.Attempt,
    "failures": failures.Failures,
    "shares": shares.Shares,
}


def _cluster() -> Cluster:
    return _cluster_of(nodes=2, gpus_per_node=4)


def _cluster_of(nodes: int, gpus_per_node: int) -> Cluster:
    return Cluster(virtual_cluster(nodes=nodes, gpus_per_node=gpus_per_node, vcs=("a",)))


def test_the_queue_sizing_search_failure_records_and_shares_are_parts_held_not_bases():
    c = _cluster()
    for name, part in PARTS.items():
        assert isinstance(getattr(c.sched, name), part), name
        assert part not in HivedScheduler.__mro__, f"{part.__name__} is inherited again"
    assert c.sched.attempt.failures is c.sched.failures  # one record keeper, shared
    assert c.sched.queue.turns is c.sched.turns  # one judge of turns, shared


def test_no_mixin_is_left_the_schedulers_only_base_in_hived_is_the_shared_state():
    """Every class ``HivedScheduler`` inherits from ``hived/`` is ``HivedBase`` (the state and
    its counters' bookkeeping); the rest of its bases are the policies' common scaffold."""
    hived = [
        cls.__qualname__
        for cls in HivedScheduler.__mro__[1:]
        if cls.__module__.startswith("labhive.scheduler.hived")
    ]
    assert hived == ["HivedBase"]


def test_the_base_keeps_no_stub_for_a_call_from_one_part_into_another():
    """The queue, GPU shares, the search and lazy preemption call one another through typed
    protocols (``parts``): no method of the base is left to raise for them, and the methods
    the class queue answered as a mixin (``_enqueue``, ``_capped_unit``, ``_schedule``,
    ``_leaves`` ...) are no longer the scheduler's."""
    gone = ("_try", "_find", "_commit", "_record_failure", "_failure", "_enqueue", "_dequeue")
    gone += ("_capped_unit", "_schedule", "_arrive", "_fair_head", "_leaves", "_chains")
    gone += ("_units", "_whole_needs", "_classes", "_ready", "_queues", "_cpu_waiting")
    gone += ("_book", "_schedule_shares", "_share_hold", "_place_share", "_all_capped")
    for name in gone:
        assert not hasattr(HivedBase, name), name
        assert not hasattr(HivedScheduler, name), name
    source = inspect.getsource(HivedBase)
    stubs = [
        f.name
        for f in ast.walk(ast.parse(source))
        if isinstance(f, ast.FunctionDef)
        and any(isinstance(s, ast.Raise) for s in f.body)
        and "NotImplementedError" in ast.unparse(f)
    ]
    assert stubs == [], stubs


def test_every_attribute_a_part_declares_is_documented_where_it_is_declared():
    """Each ``self.x = ...`` in a part's ``__init__`` follows a ``#:`` comment (as HiveD's Go
    structs document each field), for every part the scheduler holds."""
    c = _cluster()
    held = {
        name: type(value)
        for name, value in vars(c.sched).items()
        if (hasattr(value, "_sched") or name in PARTS)
        and type(value).__module__.startswith("labhive.scheduler.hived")
    }
    assert set(PARTS) | {"preemption", "health", "adoption"} <= set(held), held
    for name, part in held.items():
        lines = textwrap.dedent(inspect.getsource(part.__init__)).splitlines()
        for i, line in enumerate(lines):
            code = line.strip()
            if code.startswith("self.") and "=" in code.split("(")[0]:
                assert lines[i - 1].strip().startswith("#:"), f"{name}: {code} is undocumented"


def test_a_job_the_queue_hands_to_the_search_starts_on_the_schedulers_cells():
    """Given a 2x4-GPU cluster and a 3-GPU job, expect the part's plan committed into the
    scheduler's own counters: 3 GPUs used in VC a, the job started on one node."""
    c = _cluster()
    c.submit("three", vc="a", priority="prod", gpus=3)
    job = c.sched._jobs["three"]
    assert job.all_placed
    nodes = {placement.node for placement, _ in job.placed.values()}
    assert len(nodes) == 1
    assert c.sched.tree.oppo_total == 0
    assert c.sched.vc_views()["a"].used_gpus == 3


def test_a_search_that_fails_leaves_its_record_with_the_failures_part():
    """Given 3 of each node's 4 GPUs taken, a 2-GPU job fits on neither (2 GPUs free in all,
    one per node): expect its class to keep the record the ``failures`` part built when the
    search failed, and ``failure_of`` to hand that record back without counting again."""
    c = _cluster()
    c.submit("busy0", vc="a", priority="prod", gpus=3)
    c.submit("busy1", vc="a", priority="prod", gpus=3)
    c.submit("pair", vc="a", priority="prod", gpus=2)
    job = c.sched._jobs["pair"]
    assert not job.placed
    last = c.sched.queue.classes[job.queued_key].failed
    assert last is not None and last.job_id == "pair"
    assert c.sched.failure_of(job) is last.record


def test_after_a_reconfigure_the_search_places_on_the_new_cells():
    """Given two 4-GPU nodes with 3 GPUs taken on each, a 4-GPU job waits; a Reconfigure that
    adds a third node gives the search a new ``Placer`` over the new cells (the part's own
    state, made by ``load``), and the job starts on the new node while the others keep theirs."""
    c = _cluster_of(nodes=2, gpus_per_node=4)
    c.submit("small0", vc="a", priority="prod", gpus=3)
    c.submit("small1", vc="a", priority="prod", gpus=3)
    c.submit("big", vc="a", priority="prod", gpus=4)
    assert c.state("big") == "WAITING"
    before = c.sched.attempt.placer
    c.handle(Reconfigure(virtual_cluster(nodes=3, gpus_per_node=4, vcs=("a",))))
    assert c.sched.attempt.placer is not before
    assert c.sched.attempt.placer.tree is c.sched.tree
    assert c.sched.attempt.placer.vcs is c.sched.vcs
    assert [c.state(j) for j in ("small0", "small1", "big")] == ["RUNNING"] * 3
    assert set(c.nodes("big")).isdisjoint(c.nodes("small0") + c.nodes("small1"))


def test_waiting_jobs_are_the_queues_and_a_capped_user_is_filed_by_the_turns_part():
    """Given one 4-GPU node, a cap of 2 running GPUs per user and fair share on: bob's two
    1-GPU jobs start, his third waits in the class queue's class (not on the scheduler), and
    that class is filed with ``turns`` as waiting for bob to fall under his cap; dave's job of
    the same shape, submitted after, starts past it."""
    raw = virtual_cluster(nodes=1, gpus_per_node=4, vcs=("a",))
    vc = replace(raw.vcs["a"], user_max_running_gpus=2)
    c = Cluster(replace(raw, vcs={"a": vc}, fair_share=FairShare(3600.0)))
    for n, user in enumerate(["bob", "bob", "bob", "dave"]):
        spec = JobSpec(f"j{n}", "a", 100, (RoleSpec("main", 1, gpu=1),), user=user)
        c.handle(Submit(f"j{n}", spec, float(n)))
    assert [c.state(f"j{n}") for n in range(4)] == ["RUNNING", "RUNNING", "WAITING", "RUNNING"]
    waiting = c.sched._jobs["j2"]
    cls = c.sched.queue.classes[waiting.queued_key]
    assert [job_id for _, job_id in cls.entries] == ["j2"]
    assert cls in c.sched.turns.capped[("a", "bob")]


def test_after_a_reconfigure_jobs_are_sized_by_a_new_sizing_part():
    """Given two 4-GPU nodes with 3 GPUs taken on each, a 4-GPU job waits, sized by the
    ``Sizing`` part (its caches hold the chains it asked for); a Reconfigure that adds a
    third node gives the scheduler a new ``Sizing`` over the new cells (the old caches were
    the old config's), and the job starts on the new node."""
    c = _cluster_of(nodes=2, gpus_per_node=4)
    c.submit("small0", vc="a", priority="prod", gpus=3)
    c.submit("small1", vc="a", priority="prod", gpus=3)
    c.submit("big", vc="a", priority="prod", gpus=4)
    before = c.sched.sizing
    assert before.tree is c.sched.tree and before.chains_cache
    c.handle(Reconfigure(virtual_cluster(nodes=3, gpus_per_node=4, vcs=("a",))))
    assert c.sched.sizing is not before
    assert c.sched.sizing.tree is c.sched.tree and c.sched.sizing.vcs is c.sched.vcs
    assert c.state("big") == "RUNNING"


def test_after_a_reconfigure_shares_are_booked_by_a_new_part_and_the_waiting_one_waits_on():
    """Given one node of 2 GPUs in VC a, a whole-GPU job on one GPU and four quarters on the
    other, a fifth quarter waits (no GPU of a is free). A Reconfigure that adds a node gives
    the scheduler a new ``Shares`` part with a new book over the new cells: the four running
    quarters are restored into it on their GPU, every GPU it books is a cell of the new tree,
    the fifth quarter, still waiting, takes one of the new GPUs, and a sixth joins it there."""
    c = _cluster_of(nodes=1, gpus_per_node=2)
    c.submit("whole", vc="a", priority="prod", gpus=1)
    quarters = [f"q{n}" for n in range(1, 5)]
    for name in quarters:
        c.submit(name, vc="a", priority="prod", gpus=0.25)
    c.submit("q5", vc="a", priority="prod", gpus=0.25)
    assert c.state("q5") == "WAITING"
    before = c.sched.shares
    shared = {c.sched._jobs[q].placed[("main", 0)][1][0].leaf_id for q in quarters}
    assert len(shared) == 1 and [entry[2] for entry in before.book.waiting] == ["q5"]

    c.handle(Reconfigure(virtual_cluster(nodes=2, gpus_per_node=2, vcs=("a",))))
    part = c.sched.shares
    assert part is not before and part.book is not before.book
    assert all(c.sched.tree.leaf[leaf.leaf_id] is leaf for leaf in part.book.hosts)
    (gpu,) = shared
    assert part.book.shares_on(c.sched.tree.leaf[gpu]) == {q: 250 for q in quarters}
    assert c.state("q5") == "RUNNING" and part.book.waiting == []
    c.submit("q6", vc="a", priority="prod", gpus=0.25)
    assert c.gpus("q6") == c.gpus("q5") and c.gpus("q5") != c.gpus("q1")
