"""Given random submissions, finishes, cancels, requeues, node faults and ticks on small
clusters, expect FIFO, DRF (with and without backfill) and Capacity to decide exactly as
when every stop adds the run's GPU-seconds to the job's ``attained`` (which LAS alone reads:
it sums them in its ``on_stopped``) and every waiting job's place is asked of the policy's
``order_key`` method (the job's ``seq`` for these: ``_enqueue`` reads it in C).

And given one 8-GPU node and a 2-GPU job that runs 10 seconds and is requeued: expect LAS
to count 20 GPU-seconds attained, and FIFO to count none (nothing of it reads them)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_pass_skips import Pair, decide_alike, eight_nodes_of_eight
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Requeue, Submit
from labhive.scheduler.policies.capacity import CapacityPolicy
from labhive.scheduler.policies.drf import DrfPolicy
from labhive.scheduler.policies.fifo import FifoPolicy
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.queued import QueuedJob, QueuedPolicy, from_config


class _Plain(QueuedPolicy):
    """The plain computation: ``attained`` summed at every stop, ``order_key`` called."""

    def on_stopped(self, job: QueuedJob) -> None:
        job.attained += job.gpus * (self._now - job.started)
        super().on_stopped(job)

    def order_key(self, job: QueuedJob) -> Any:
        return job.seq


class PlainFifo(_Plain, FifoPolicy):
    pass


class PlainDrf(_Plain, DrfPolicy):
    pass


class PlainCapacity(_Plain, CapacityPolicy):
    pass


PAIRS: list[Pair] = [  # (as cut, the plain computation, options, defaults)
    (FifoPolicy, PlainFifo, {}, {}),
    (FifoPolicy, PlainFifo, {"backfill": True}, {}),
    (DrfPolicy, PlainDrf, {}, {}),
    (DrfPolicy, PlainDrf, {"backfill": True}, {}),
    (CapacityPolicy, PlainCapacity, {"backfill": True}, {"borrow": True}),
]


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), pair=st.sampled_from(PAIRS))
def test_no_attained_sum_and_no_order_key_call_decide_as_the_plain_policy(
    data: Any, pair: Pair
) -> None:
    decide_alike(data, pair)


def test_las_counts_a_requeued_runs_gpu_seconds_and_fifo_none() -> None:
    spec = parse_job({"name": "a", "vc": "vc0", "user": "u", "gpus": 2})
    for cls, attained in ((LasPolicy, 20.0), (FifoPolicy, 0.0)):
        policy = from_config(cls, eight_nodes_of_eight(), {})
        policy.check(spec)
        policy.handle(Submit("a", spec, 5.0))
        assert policy._jobs["a"].running
        policy.handle(Requeue("a", 15.0))
        assert policy._jobs["a"].attained == attained, cls.name
