"""Given Capacity with hard quotas (``borrow=false``) on eight VCs of one 8-GPU node each, and a
16-GPU job for vc0, expect ``check`` to reject it every time it is asked, though the queue
policy's own tests pass it and ``check`` skips a spec it passed last (a driver checks a spec,
then submits it: the second check is free, issue 34). And a job within the quota passes twice,
the second time without asking the queue policy's tests again."""

from __future__ import annotations

import pytest
from test_capacity_pass import eight_vcs_of_a_node

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import SpecRejected
from labhive.scheduler.policies.capacity import CapacityPolicy
from labhive.scheduler.policies.queued import QueuedPolicy, from_config


def test_a_job_beyond_a_hard_quota_is_rejected_at_every_check() -> None:
    policy = from_config(CapacityPolicy, eight_vcs_of_a_node(), {}, borrow=False)
    spec = parse_job({"name": "wide", "vc": "vc0", "tasks": 2, "gpus": 8})
    for _ in range(3):
        with pytest.raises(SpecRejected, match="borrowing is off"):
            policy.check(spec)


@pytest.mark.sources
def test_a_spec_passed_is_passed_again_without_the_queue_tests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = from_config(CapacityPolicy, eight_vcs_of_a_node(), {}, borrow=False)
    spec = parse_job({"name": "fits", "vc": "vc0", "tasks": 1, "gpus": 8})
    asked = []
    real = QueuedPolicy.check

    def counted(self: QueuedPolicy, spec: object) -> None:
        asked.append(spec)
        real(self, spec)  # type: ignore[arg-type]

    monkeypatch.setattr(QueuedPolicy, "check", counted)
    policy.check(spec)
    policy.check(spec)
    assert asked == [spec]
