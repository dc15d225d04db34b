"""Given random submissions (1 to 8 GPUs in one or two tasks), finishes, cancels, requeues,
node faults and ticks on small clusters, expect every queue policy (FIFO, SJF, DRF with and
without backfill, Capacity, LAS), whose waiting lines' heap entries hold the job itself, to
decide exactly as when a line's head was found by looking its entry's job id up among the
waiting jobs (a dict by id, as ``_waiting`` was); and after every event, expect each line's
head to be the first of its waiting jobs by (``order_key``, ``seq``): the plain computation.

And given a job cancelled while it waits and a new job submitted under the same id, expect
FIFO to start the jobs in the order they joined its line: the look-up by id took the old
job's stale entry (same token, 1) for the new job, which then jumped the line."""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_pass_skips import Pair, decide_alike
from test_properties import PROPERTY_SETTINGS
from test_queued_waiting_state import WaitingById, every_policy

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Cancel, Finish, Start, Submit
from labhive.scheduler.policies.capacity import CapacityPolicy
from labhive.scheduler.policies.drf import DrfPolicy
from labhive.scheduler.policies.fifo import FifoPolicy
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.queued import QueuedJob, QueuedPolicy, from_config
from labhive.scheduler.policies.sjf import SjfPolicy


class HeadById(WaitingById):
    """``_head`` as before: the entry's job looked up by id among the waiting jobs (kept by
    id as before: ``WaitingById``), live where that job's ``token`` is the entry's."""

    _groups: dict[Hashable, list[Any]]

    def _head(self, group: Hashable) -> QueuedJob | None:
        heap = self._groups.get(group)
        while heap:
            token, job_id = heap[0][2], heap[0][3].job_id
            job = self._waiting.get(job_id)
            if job is not None and job.token == token:
                return job
            heapq.heappop(heap)
        if heap is not None:
            del self._groups[group]
        return None


class FifoById(HeadById, FifoPolicy):
    pass


class SjfById(HeadById, SjfPolicy):
    pass


class DrfById(HeadById, DrfPolicy):
    pass


class CapacityById(HeadById, CapacityPolicy):
    pass


class LasById(HeadById, LasPolicy):
    pass


# (entries holding the job, heads looked up by id, options, defaults)
PAIRS = every_policy(FifoById, SjfById, DrfById, CapacityById, LasById)


def heads_are_plain(policy: QueuedPolicy, _: QueuedPolicy) -> None:
    """Each line's head is its first waiting job by (``order_key``, ``seq``)."""
    lines: dict[Hashable, list[QueuedJob]] = {}
    for job in policy._waiting_jobs():
        lines.setdefault(job.group, []).append(job)
    for group in set(policy._groups) | set(lines):
        waiting = lines.get(group, [])
        first = min(waiting, key=lambda j: (policy.order_key(j), j.seq), default=None)
        assert policy._head(group) is first, group


@pytest.mark.sources
@settings(PROPERTY_SETTINGS)
@given(data=st.data(), pair=st.sampled_from(PAIRS))
def test_entries_holding_their_job_decide_as_heads_looked_up_by_id(data: Any, pair: Pair) -> None:
    decide_alike(data, pair, also=heads_are_plain)


def one_node_of_eight() -> Any:
    node = {"childCellType": "GPU", "childCellNumber": 8, "isNodeLevel": True}
    return load_cluster_config(
        {
            "physicalCluster": {
                "cellTypes": {"NODE": node},
                "physicalCells": [{"cellType": "NODE", "cellAddress": "n0"}],
            },
            "virtualClusters": {"vc0": {"virtualCells": [{"cellType": "NODE", "cellNumber": 1}]}},
        }
    )


def test_a_job_submitted_again_under_a_cancelled_ones_id_joins_at_the_end() -> None:
    """One 8-GPU node, all of it running ``r``. ``x`` and then ``y`` (1 GPU each) wait;
    ``x`` is cancelled and a new ``x`` submitted in the same instant. When ``r`` ends,
    expect ``y`` to start first, then the new ``x``; looked up by id, the old ``x``'s stale
    entry found the new one with its token and started it first."""
    for cls, expected in ((FifoPolicy, ["y", "x"]), (FifoById, ["x", "y"])):
        policy = from_config(cls, one_node_of_eight(), {})
        now = 0.0
        for job_id, gpus in (("r", 8), ("x", 1), ("y", 1)):
            now += 1.0
            spec = parse_job({"name": job_id, "vc": "vc0", "gpus": gpus})
            policy.handle(Submit(job_id, spec, now))
        again = parse_job({"name": "x", "vc": "vc0", "gpus": 1})
        # (in one instant: a pass between them would drop the stale entry, ``_settle``)
        policy.handle_batch([Cancel("x", now + 1.0), Submit("x", again, now + 1.0)])
        started = policy.handle(Finish("r", now + 2.0))
        order = [d.job_id for d in started if isinstance(d, Start)]
        assert order == expected, (cls.__name__, order)
