"""Given a queue policy whose ``admit`` is ``QueuedPolicy``'s own (every job may start, none as
opportunistic), expect ``_try`` to take that answer without asking (``_admits_all``, set per
class), and LAS, DRF with and without backfill and FIFO to decide as when each try asked it,
on random submissions, finishes, cancels, requeues and node faults. And given a policy that
refuses a user in its own ``admit``, expect that user's job never to start on an idle
cluster."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_pass_skips import LAS, Pair, decide_alike, eight_nodes_of_eight
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Start, Submit
from labhive.scheduler.policies.capacity import CapacityPolicy
from labhive.scheduler.policies.drf import DrfPolicy
from labhive.scheduler.policies.fifo import FifoPolicy
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.queued import QueuedJob, from_config


class Asking:
    """A policy whose ``admit`` is its base's, declared again: ``_try`` asks it."""

    def admit(self, job: QueuedJob) -> tuple[bool, bool]:
        return super().admit(job)  # type: ignore[misc,no-any-return]


class LasAsking(Asking, LasPolicy):
    pass


class DrfAsking(Asking, DrfPolicy):
    pass


class FifoAsking(Asking, FifoPolicy):
    pass


PAIRS: list[Pair] = [
    (LasPolicy, LasAsking, {}, LAS),
    (DrfPolicy, DrfAsking, {}, {}),
    (DrfPolicy, DrfAsking, {"backfill": True}, {}),
    (FifoPolicy, FifoAsking, {"backfill": True}, {}),
]


def test_only_policies_that_admit_every_job_skip_asking() -> None:
    assert LasPolicy._admits_all and DrfPolicy._admits_all and FifoPolicy._admits_all
    assert not CapacityPolicy._admits_all  # (it admits by its VCs' quotas and borrowing)
    assert not LasAsking._admits_all


@pytest.mark.sources
@settings(PROPERTY_SETTINGS)
@given(data=st.data(), pair=st.sampled_from(PAIRS))
def test_a_try_taking_admit_as_given_decides_as_one_asking(data: Any, pair: Pair) -> None:
    decide_alike(data, pair)


class NoEve(LasPolicy):
    """LAS that never admits eve's jobs."""

    def admit(self, job: QueuedJob) -> tuple[bool, bool]:
        return job.spec.user != "eve", False


def test_a_policy_refusing_a_user_in_admit_never_starts_her_job() -> None:
    """Eight idle 8-GPU nodes; eve submits a 1-GPU job, bob a 2-GPU one: bob's starts, eve's
    waits."""
    las = from_config(NoEve, eight_nodes_of_eight(), {}, **LAS)
    started = []
    for n, (user, gpus) in enumerate([("eve", 1), ("bob", 2)]):
        spec = parse_job({"name": user, "vc": "vc0", "user": user, "gpus": gpus})
        las.check(spec)
        started += [
            d.job_id for d in las.handle(Submit(user, spec, float(n))) if isinstance(d, Start)
        ]
    assert started == ["bob"]
