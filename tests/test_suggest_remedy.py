"""A job that can never run is refused with what would make it runnable: given this cluster
and this job, expect this change in the refusal, and the changed job accepted."""

from __future__ import annotations

import pytest
from sim_helpers import cluster

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import SpecRejected
from labhive.scheduler.forecast.suggest import runnable, with_remedy
from labhive.scheduler.policies import get_policy


def refusal(sched, spec) -> str:
    with pytest.raises(SpecRejected) as err:
        sched.check(spec)
    return str(err.value)


@pytest.mark.parametrize("policy", ["hived", "fifo"])
def test_a_task_larger_than_any_node_is_told_to_split_into_node_sized_tasks(policy):
    """Two 8-GPU nodes, one VC: 16 GPUs in one task never fits; 2 tasks of 8 do."""
    sched = get_policy(policy, cluster([8, 8]))
    big = parse_job({"name": "big", "vc": "default", "gpus": 16, "command": "train"})
    message = with_remedy(refusal(sched, big), big, ["default"], sched.check)
    assert message.endswith(
        "It would run if you ask for 8 GPUs per task and 2 tasks (--gpus 8 --tasks 2)"
    ), message
    sched.check(parse_job({"name": "b", "vc": "default", "gpus": 8, "tasks": 2, "command": "t"}))


def test_when_the_vc_is_too_small_for_the_gpus_fewer_gpus_is_the_remedy():
    """Two 8-GPU nodes shared by two VCs (8 GPUs each): a 16-GPU job in vc1 never fits
    however split; 8 GPUs do."""
    sched = get_policy("hived", cluster([8, 8], {"vc1": 1, "vc2": 1}))
    big = parse_job({"name": "big", "vc": "vc1", "gpus": 16, "command": "train"})
    assert runnable(big, ["vc1"], sched.check) == ("ask for 8 GPUs per task instead of 16",
                                                   "--gpus 8", "")  # fmt: skip


def test_a_job_nothing_makes_runnable_keeps_its_refusal_as_it_was():
    sched = get_policy("hived", cluster([8]))
    odd = parse_job({"name": "x", "vc": "nowhere", "gpus": 1, "command": "train"})
    message = refusal(sched, odd)
    assert with_remedy(message, odd, [], sched.check) == message
