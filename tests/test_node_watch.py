"""Given an executor's polls of its nodes (Slurm's and Kubernetes' both go through
``NodeWatch``), expect only the changes to reach the scheduler."""

from __future__ import annotations

from labhive.scheduler.core.model import NodeDown, NodeUp
from labhive.scheduler.executors.node_watch import NodeWatch


def test_a_node_bad_from_the_start_goes_down_once_and_up_when_fine() -> None:
    watch = NodeWatch()
    assert watch.saw("n1", None, 1.0) is None  # fine from the start: nothing to say
    assert watch.saw("n2", "Slurm marks it DRAIN: fan", 1.0) == NodeDown(
        "n2", 1.0, "Slurm marks it DRAIN: fan"
    )
    # reworded while still bad: the scheduler already holds it down
    assert watch.saw("n2", "Slurm marks it DOWN", 2.0) is None
    assert watch.problem("n2") == "Slurm marks it DOWN"
    assert watch.saw("n2", None, 3.0) == NodeUp("n2", 3.0)
    assert watch.saw("n2", None, 4.0) is None
    assert watch.problem("n2") is None


def test_a_fine_node_that_turns_bad_goes_down() -> None:
    watch = NodeWatch()
    assert watch.saw("n1", None, 1.0) is None
    assert watch.saw("n1", "cordoned (spec.unschedulable)", 2.0) == NodeDown(
        "n1", 2.0, "cordoned (spec.unschedulable)"
    )
    assert watch.problem("never-polled") is None
