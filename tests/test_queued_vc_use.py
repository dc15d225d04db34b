"""Given random submissions (1 to 8 GPUs in one or two tasks), finishes, cancels, requeues,
node faults and ticks on small clusters, expect FIFO, SJF, DRF (with and without backfill)
and LAS, which keep no count of each VC's GPUs in use (no decision of theirs reads one), to
decide as when they kept them, and to show the same cluster view after every event: counted
from the running jobs when asked (``QueuedViews.vc_use``), not kept up at each start and stop.

And given a job started as opportunistic by a restore (``Adopt``), expect FIFO's view to
show its GPUs as borrowed, and as nothing once it ends."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_pass_skips import LAS, Pair, decide_alike, eight_nodes_of_eight
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Adopt, Finish, TaskPlacement
from labhive.scheduler.policies.drf import DrfPolicy
from labhive.scheduler.policies.fifo import FifoPolicy
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.queued import QueuedPolicy, from_config
from labhive.scheduler.policies.sjf import SjfPolicy


class Counting:
    """A policy that keeps ``vc_used`` and ``vc_borrowed`` up at every start and stop."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._counts_vcs = True


class FifoCounting(Counting, FifoPolicy):
    pass


class SjfCounting(Counting, SjfPolicy):
    pass


class DrfCounting(Counting, DrfPolicy):
    pass


class LasCounting(Counting, LasPolicy):
    pass


PAIRS: list[Pair] = [  # (counting when asked, counting at each start and stop, ...)
    (FifoPolicy, FifoCounting, {}, {}),
    (SjfPolicy, SjfCounting, {"backfill": True}, {}),
    (DrfPolicy, DrfCounting, {}, {}),
    (DrfPolicy, DrfCounting, {"backfill": True}, {}),
    (LasPolicy, LasCounting, {}, LAS),
]


def same_views(policy: QueuedPolicy, counting: QueuedPolicy) -> None:
    assert not policy._counts_vcs
    assert policy.cluster() == counting.cluster()


@pytest.mark.sources
@settings(PROPERTY_SETTINGS)
@given(data=st.data(), pair=st.sampled_from(PAIRS))
def test_vc_use_counted_when_asked_shows_as_kept_up(data: Any, pair: Pair) -> None:
    decide_alike(data, pair, also=same_views)


def test_an_adopted_opportunistic_job_shows_as_borrowed_until_it_ends() -> None:
    """Eight idle 8-GPU nodes; a restore adopts a 4-GPU job on n0 as opportunistic. Expect
    vc0 to show 4 GPUs borrowed and none guaranteed in use, then none once it ends."""
    policy = from_config(FifoPolicy, eight_nodes_of_eight(), {})
    spec = parse_job({"name": "a", "vc": "vc0", "gpus": 4})
    tasks = (TaskPlacement("main", 0, "n0", (0, 1, 2, 3)),)
    assert policy.handle(Adopt("a", spec, tasks, opportunistic=True)) == []
    view = policy.cluster().vcs["vc0"]
    assert (view.used_gpus, view.opportunistic_gpus) == (0, 4)
    policy.handle(Finish("a", 1.0))
    view = policy.cluster().vcs["vc0"]
    assert (view.used_gpus, view.opportunistic_gpus) == (0, 0)
