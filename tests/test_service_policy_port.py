"""The service speaks its store's int job ids; a policy names jobs by str. The PolicyPort is
where one becomes the other: events in with int ids, decisions, job views and the cluster view
out with int ids, and the policy itself sees only str."""

from __future__ import annotations

import pytest
from sim_helpers import cluster

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Cancel, Preempt, Start, Submit
from labhive.scheduler.policies import get_policy
from labhive.scheduler.service.policy_port import PolicyPort, by_service_id, task_key


def _job(name: str, gpus: int, priority: int = 0):
    return parse_job(
        {"name": name, "vc": "default", "gpus": gpus, "priority": priority, "command": "t"}
    )


@pytest.mark.parametrize("policy", ["hived", "fifo"])
def test_int_ids_in_and_out_str_ids_inside(policy):
    port = PolicyPort(get_policy(policy, cluster([4])))
    (start,) = port.handle(Submit(7, _job("a", 2), 0.0))
    assert isinstance(start, Start) and start.job_id == 7
    assert port.scheduler.job("7") is not None  # the policy itself knows it as "7"
    view = port.job(7)
    assert view is not None and view.job_id == 7 and view.state == "RUNNING"
    assert [v.job_id for v in port.jobs()] == [7]
    (node,) = port.cluster().nodes
    assert set(node.used.values()) == {7}
    port.handle(Submit(8, _job("b", 4), 1.0))
    assert [v.job_id for v in port.jobs()] == [7, 8]
    assert port.handle(Cancel(7, 2.0))[0].job_id == 8  # b starts on the freed GPUs
    assert port.job(7) is None


def test_a_preemption_names_the_victim_by_its_int_id():
    port = PolicyPort(get_policy("hived", cluster([4])))
    port.handle(Submit(1, _job("low", 4, priority=0), 0.0))
    out = port.handle(Submit(2, _job("high", 4, priority=10), 1.0))
    (victim,) = [d for d in out if isinstance(d, Preempt)]
    assert victim.job_id == 1 and victim.by == "2"  # ``by`` stays the policy's text


def test_the_forecast_and_executor_ids_cross_here_too():
    assert by_service_id({"3": "vc1"}) == {3: "vc1"}
    assert task_key(3, 1, "main", 0).job_id == "3"
