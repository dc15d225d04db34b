"""Given random clusters of two to four VCs and random submissions (some larger than their
VC's quota), endings, requeues, node faults and a new cluster config, expect Capacity, which
binds its plain ``check`` and ``group_key`` on the instance where its own add nothing
(``CapacityPolicy._bind_hooks``: ``QueuedPolicy.check`` with borrowing on, a job's VC as its
line without backfill), to reject the same specs with the same words and decide exactly as a
Capacity calling its class's methods, with borrowing on and off and with backfill on and off.
A hook bound where the class's adds a test (the hard quota with borrowing off) or a line other
than the VC (with backfill, a line per VC and GPU count) shows up as a spec let through or a
different start."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_capacity_pass import batches, squeezed, steps
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import Reconfigure, SpecRejected
from labhive.scheduler.policies.capacity import CapacityPolicy
from labhive.scheduler.policies.queued import QueuedJob, from_config


class CapacityCallingMethods(CapacityPolicy):
    """Capacity whose ``check`` and ``group_key`` are its class's, called each time (an
    override of either leaves them unbound)."""

    def check(self, spec: JobSpec) -> None:
        super().check(spec)

    def group_key(self, job: QueuedJob) -> Any:
        return super().group_key(job)


class Both:
    """The two policies' checks, held to the same verdict (``batches`` asks it of a spec)."""

    def __init__(self, bound: CapacityPolicy, called: CapacityPolicy) -> None:
        self.bound, self.called = bound, called
        self.rejected = 0

    def check(self, spec: JobSpec) -> None:
        verdicts: list[str | None] = []
        for policy in (self.bound, self.called):
            try:
                policy.check(spec)
                verdicts.append(None)
            except SpecRejected as err:
                verdicts.append(str(err))
        assert verdicts[0] == verdicts[1], spec
        if verdicts[0] is not None:
            self.rejected += 1
            raise SpecRejected(verdicts[0])

    def jobs(self) -> Any:
        return self.bound.jobs()


@pytest.mark.sources
@settings(PROPERTY_SETTINGS)
@given(data=st.data(), borrow=st.booleans(), backfill=st.booleans())
def test_bound_hooks_reject_and_decide_as_the_class_methods(
    data: Any, borrow: bool, backfill: bool
) -> None:
    configs = [load_cluster_config(data.draw(squeezed())) for _ in range(2)]
    config = configs[0]
    nodes = sorted({n.name for n in config.nodes()})
    options = {"backfill": backfill}
    bound = from_config(CapacityPolicy, config, options, borrow=borrow)
    called = from_config(CapacityCallingMethods, config, options, borrow=borrow)
    assert ("check" in vars(bound)) == borrow and "check" not in vars(called)
    assert ("group_key" in vars(bound)) == (not backfill) and "group_key" not in vars(called)
    drawn = data.draw(steps(len(config.vcs), max(len(n.gpus) for n in config.nodes())))

    def another_config() -> Any:
        configs.reverse()
        return configs[0]

    both = Both(bound, called)
    for batch in batches(both, nodes, drawn, another_config):  # type: ignore[arg-type]
        if len(batch) == 1:
            assert bound.handle(batch[0]) == called.handle(batch[0]), batch
        else:
            assert bound.handle_batch(batch) == called.handle_batch(batch), batch
        assert bound.jobs() == called.jobs()
        if isinstance(batch[0], Reconfigure):
            nodes = sorted({n.name for n in batch[0].config.nodes()})
