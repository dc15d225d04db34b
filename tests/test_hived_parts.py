"""Given HiveD's scheduler, expect its parts to be objects it holds, each with its state its own
and documented where declared, not mixins sharing one ``self`` (issue 32, item 3).

The search for a job's cells (``attempt.Attempt``), the record of why one failed
(``failures.Failures``), preemption, node health and adoption are held as ``attempt``,
``failures``, ``preemption``, ``health`` and ``adoption``; the base keeps no
``raise NotImplementedError`` stub for a call into them, and what a part does lands in the
scheduler's state (a job the queue hands to ``attempt`` starts on the scheduler's cells).
"""

from __future__ import annotations

import ast
import inspect
import textwrap

from helpers import Cluster

from labhive.scheduler.core.config import virtual_cluster
from labhive.scheduler.core.model import Reconfigure
from labhive.scheduler.hived import attempt, failures
from labhive.scheduler.hived.base import HivedBase
from labhive.scheduler.hived.core import HivedScheduler

#: Attribute -> the part's class, as ``HivedScheduler`` holds them.
PARTS = {
    "attempt": attempt.Attempt,
    "failures": failures.Failures,
}


def _cluster() -> Cluster:
    return _cluster_of(nodes=2, gpus_per_node=4)


def _cluster_of(nodes: int, gpus_per_node: int) -> Cluster:
    return Cluster(virtual_cluster(nodes=nodes, gpus_per_node=gpus_per_node, vcs=("a",)))


def test_the_search_and_its_failure_records_are_parts_the_scheduler_holds_not_bases():
    c = _cluster()
    for name, part in PARTS.items():
        assert isinstance(getattr(c.sched, name), part), name
        assert part not in HivedScheduler.__mro__, f"{part.__name__} is inherited again"
    assert c.sched.attempt.failures is c.sched.failures  # one record keeper, shared


def test_the_base_keeps_no_stub_for_a_call_into_the_search_or_preemption():
    """The queue, GPU shares and lazy preemption call ``attempt`` and ``preemption`` through
    typed protocols (``parts``): no method of the base is left to raise for them."""
    for gone in ("_try", "_find", "_commit", "_record_failure", "_failure"):
        assert not hasattr(HivedBase, gone), gone
        assert not hasattr(HivedScheduler, gone), gone
    source = inspect.getsource(HivedBase)
    stubs = [
        f.name
        for f in ast.walk(ast.parse(source))
        if isinstance(f, ast.FunctionDef)
        and any(isinstance(s, ast.Raise) for s in f.body)
        and "NotImplementedError" in ast.unparse(f)
    ]
    # What the class queue (another mixin, being turned into a part in its own change) still
    # answers for the others: nothing of the search's.
    assert set(stubs) <= {"_enqueue", "_capped_unit"}, stubs


def test_every_attribute_a_part_declares_is_documented_where_it_is_declared():
    """Each ``self.x = ...`` in a part's ``__init__`` follows a ``#:`` comment (as HiveD's Go
    structs document each field), for every part the scheduler holds."""
    c = _cluster()
    held = {
        name: type(value)
        for name, value in vars(c.sched).items()
        if hasattr(value, "_sched") and type(value).__module__.startswith("labhive.scheduler.hived")
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
    last = c.sched._classes[job.queued_key].failed
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
