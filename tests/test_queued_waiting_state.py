"""Given random submissions (1 to 8 GPUs in one or two tasks), finishes, cancels, requeues,
node faults and ticks on small clusters, expect every queue policy (FIFO with and without
backfill, SJF per VC, DRF with and without backfill, Capacity, LAS with and without
promotions), which keeps no dict of its waiting jobs (a job's waiting state is its ``group``,
``NOT_WAITING`` while it waits in no line), to hold after every event exactly the waiting jobs
a dict kept as before would hold (set at each join, popped by id at each leave); and to decide
as that policy does, whose pass is skipped where that dict is empty (not where no line is
left: a line of stale entries alone gets a pass that starts nothing).

And given one 8-GPU node, a job that waits, starts, is preempted by a node fault and is
cancelled, expect its waiting state to follow: waiting, not, waiting again, gone."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_drf_head_index import one_node
from test_pass_skips import LAS, Pair, decide_alike
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Cancel, NodeDown, NodeUp, Submit
from labhive.scheduler.policies.capacity import CapacityPolicy
from labhive.scheduler.policies.drf import DrfPolicy
from labhive.scheduler.policies.fifo import FifoPolicy
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.queued import QueuedJob, QueuedPolicy, from_config
from labhive.scheduler.policies.queued_job import NOT_WAITING
from labhive.scheduler.policies.sjf import SjfPolicy


class WaitingById:
    """A policy that also keeps its waiting jobs as before: a dict by id, each job set there
    when it joins a line and popped when it leaves (``_waiting``)."""

    _waiting: dict[str, QueuedJob]
    SKIP_IDLE_PASSES: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._waiting = {}
        super().__init__(*args, **kwargs)

    def _enqueue(self, job: QueuedJob) -> None:
        super()._enqueue(job)  # type: ignore[misc]
        self._waiting[job.job_id] = job

    def _dequeue(self, job: QueuedJob) -> None:
        self._waiting.pop(job.job_id, None)
        super()._dequeue(job)  # type: ignore[misc]

    def _schedule(self, out: Any, only: Any = None, groups: Any = None) -> None:
        if not self._waiting and self.SKIP_IDLE_PASSES:
            return  # nothing waits: the pass skipped, as before
        super()._schedule(out, only, groups)  # type: ignore[misc]


class FifoById(WaitingById, FifoPolicy):
    pass


class SjfById(WaitingById, SjfPolicy):
    pass


class DrfById(WaitingById, DrfPolicy):
    pass


class CapacityById(WaitingById, CapacityPolicy):
    pass


class LasById(WaitingById, LasPolicy):
    pass


def every_policy(
    fifo: type[QueuedPolicy],
    sjf: type[QueuedPolicy],
    drf: type[QueuedPolicy],
    capacity: type[QueuedPolicy],
    las: type[QueuedPolicy],
) -> list[Pair]:
    """Each queue policy beside its reference twin (given in this order), in the settings
    where their paths part: backfill, per-VC lines, borrowing, LAS's promotions."""
    return [
        (FifoPolicy, fifo, {}, {}),
        (FifoPolicy, fifo, {"backfill": True}, {}),
        (SjfPolicy, sjf, {"per_vc": True}, {"per_vc": False}),
        (DrfPolicy, drf, {}, {}),
        (DrfPolicy, drf, {"backfill": True}, {}),
        (CapacityPolicy, capacity, {"backfill": True}, {"borrow": True}),
        (LasPolicy, las, {}, LAS),
        (LasPolicy, las, {"promote_knob": 2.0}, LAS),  # waiting jobs change lines
    ]


# (waiting state on the job, also kept by id, options, defaults)
PAIRS = every_policy(FifoById, SjfById, DrfById, CapacityById, LasById)


def waiting_of(policy: QueuedPolicy) -> dict[str, QueuedJob]:
    """The jobs ``policy`` holds whose ``group`` says they wait, by id."""
    return {j.job_id: j for j in policy._jobs.values() if j.group is not NOT_WAITING}


def waits_as_kept_by_id(policy: QueuedPolicy, by_id: QueuedPolicy) -> None:
    kept = by_id._waiting  # type: ignore[attr-defined]
    for mine in (policy, by_id):
        found = waiting_of(mine)
        assert found.keys() == kept.keys()
        assert mine._groups or not kept  # (a waiting job's line is there: no pass skipped)
        assert not [j for j in mine._jobs.values() if j.running and j.group is not NOT_WAITING]
    assert all(found[i] is j for i, j in kept.items())  # (by_id's own jobs, the same objects)


@pytest.mark.sources
@settings(PROPERTY_SETTINGS)
@given(data=st.data(), pair=st.sampled_from(PAIRS))
def test_the_waiting_state_on_the_job_is_the_dict_kept_by_id(data: Any, pair: Pair) -> None:
    decide_alike(data, pair, also=waits_as_kept_by_id)


def test_a_job_waits_runs_waits_again_and_leaves() -> None:
    """One 8-GPU node: ``a`` (8 GPUs) starts, ``b`` (8 GPUs) waits. The node fails: ``a``
    stops and waits again beside ``b``; it comes back and ``a`` (first in line) starts; then
    ``b`` is cancelled."""
    config = one_node(8)
    fifo = from_config(FifoPolicy, config, {})
    for t, job_id in enumerate(("a", "b")):
        fifo.handle(Submit(job_id, parse_job({"name": job_id, "vc": "vc0", "gpus": 8}), t))
    a, b = fifo._jobs["a"], fifo._jobs["b"]
    assert (a.group is NOT_WAITING, sorted(waiting_of(fifo))) == (True, ["b"])
    fifo.handle(NodeDown("n0", 2.0, "test"))
    assert (a.group is NOT_WAITING, sorted(waiting_of(fifo))) == (False, ["a", "b"])
    fifo.handle(NodeUp("n0", 3.0))
    assert (a.running, a.group is NOT_WAITING, sorted(waiting_of(fifo))) == (True, True, ["b"])
    fifo.handle(Cancel("b", 4.0))
    # b gone: its line held its stale entry alone, and the pass that ran dropped it
    assert (b.group is NOT_WAITING, waiting_of(fifo), fifo._groups) == (True, {}, {})
