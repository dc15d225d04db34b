"""Given random submissions (1 to 8 GPUs in one or two tasks), finishes, cancels, requeues,
node faults and ticks on small clusters, expect every queue policy (FIFO, SJF, DRF, Capacity,
LAS, with and without backfill) to decide exactly as it does without the shortcuts of its
per-job path (issue 34: FIFO's policy side, which every queue policy pays):
- a pass is skipped while no job waits (nothing may start, nor be preempted for), or while
  every line's head finds no room by free counts (``_settle``: ``test_queued_settled.py``);
- a node keeps the placements a one-node gang got on a set of its GPUs, and the same gang
  taking the same GPUs there gets them again (``PoolNode.placed``);
- a new job is tried in the line it joined (``QueuedJob.group``), and a waiting job leaving
  its line marks that line, not one asked anew;
- a policy that neither preempts nor keeps DRF's index places without asking ``may_fit``
  first (placement refuses the same gangs).
The reference runs every pass, asks ``group_key`` and ``may_fit`` afresh and builds every
placement anew; the two must give the same decisions and job views after every event."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_pass_skips import Pair, decide_alike
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.core.job_spec import RoleSpec
from labhive.scheduler.core.model import Decision
from labhive.scheduler.policies.capacity import CapacityPolicy
from labhive.scheduler.policies.drf import DrfPolicy
from labhive.scheduler.policies.fifo import FifoPolicy
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.node_pool import NodePool, PoolNode, _gang_of_roles
from labhive.scheduler.policies.queued import QueuedJob, QueuedPolicy
from labhive.scheduler.policies.queued_job import NOT_WAITING
from labhive.scheduler.policies.sjf import SjfPolicy

LAS = {"thresholds": (120.0, 600.0), "promote_knob": 0.0, "quantum": 60.0, "same_queue": False}


class Plain:
    """A queue policy without the per-job shortcuts: every pass runs, the new job's line is
    asked anew, ``may_fit`` is asked before every placement and no placement is reused."""

    pool: NodePool
    _ask_fit: bool
    SKIP_IDLE_PASSES = False
    SKIP_SETTLED_PASSES = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ask_fit = True

    def _dequeue(self, job: QueuedJob) -> None:
        """As before ``QueuedJob.group``: the line asked anew."""
        job.group = NOT_WAITING
        job.token += 1
        if self._line_heads is not None:  # type: ignore[attr-defined]
            self._touched.add(self.group_key(job))  # type: ignore[attr-defined]
        if self._index is not None:  # type: ignore[attr-defined]
            self._index.touch(self.group_key(job))  # type: ignore[attr-defined]

    def _schedule(
        self, out: list[Decision], only: QueuedJob | None = None, groups: Any = None
    ) -> None:
        for node in self.pool.nodes.values():
            node.placed.clear()  # every placement built anew
        if only is not None:
            only.group = self.group_key(only)  # type: ignore[attr-defined]
        super()._schedule(out, only, groups)  # type: ignore[misc]


class PlainFifo(Plain, FifoPolicy):
    pass


class PlainSjf(Plain, SjfPolicy):
    pass


class PlainDrf(Plain, DrfPolicy):
    pass


class PlainCapacity(Plain, CapacityPolicy):
    pass


class PlainLas(Plain, LasPolicy):
    pass


PAIRS: list[Pair] = [  # (with the shortcuts, without, options, defaults)
    (FifoPolicy, PlainFifo, {}, {}),
    (FifoPolicy, PlainFifo, {"backfill": True}, {}),
    (SjfPolicy, PlainSjf, {}, {}),
    (DrfPolicy, PlainDrf, {}, {}),
    (DrfPolicy, PlainDrf, {"backfill": True}, {}),
    (CapacityPolicy, PlainCapacity, {}, {"borrow": True}),
    (CapacityPolicy, PlainCapacity, {"backfill": True}, {"borrow": True}),
    (LasPolicy, PlainLas, {}, LAS),
    (LasPolicy, PlainLas, {"promote_knob": 2.0}, LAS),  # waiting jobs change lines
]


@pytest.mark.sources
@settings(PROPERTY_SETTINGS)
@given(data=st.data(), pair=st.sampled_from(PAIRS))
def test_the_per_job_shortcuts_decide_as_the_plain_policy(data: Any, pair: Pair) -> None:
    decide_alike(data, pair, also=lines_joined_are_asked_lines)


def lines_joined_are_asked_lines(policy: QueuedPolicy, plain: QueuedPolicy) -> None:
    """What reading ``QueuedJob.group`` rests on: every waiting job's line joined is the line
    ``group_key`` gives it now (LAS moves a job between lines as its level changes)."""
    for job in policy._waiting_jobs():
        assert job.group == policy.group_key(job), job.job_id


@pytest.mark.parametrize("locality", ["consolidated", "anywhere"])
def test_a_gang_taking_the_same_gpus_again_gets_the_same_placements(locality: str) -> None:
    """Given one 8-GPU node and a 2-GPU job of one task, then one of two tasks, each placed,
    released and placed again on the same GPUs: expect a gang's second placement to be the
    very tasks of its first (kept), and the other gang on those GPUs to get its own tasks,
    never the first gang's (their GPUs are the same, their tasks are not); what the pool holds
    is the same either way."""
    one = _gang_of_roles((RoleSpec("main", instances=1, gpu=2),))
    two = _gang_of_roles((RoleSpec("main", instances=2, gpu=1),))
    pool = NodePool([PoolNode("n0", None, tuple(range(8)))], locality)  # type: ignore[arg-type]
    last: tuple[Any, Any] = (None, None)  # the gang placed last, and its tasks
    kept = 0
    for gang in (one, one, two, two, one, one):
        tasks = pool.place("j", gang)
        assert tasks is not None
        assert [t.gpus for t in tasks] == ([(0, 1)] if gang is one else [(0,), (1,)])
        if gang is last[0]:
            assert tasks is last[1]  # kept
            kept += 1
        last = (gang, tasks)
        assert pool.placement("j") is tasks
        assert pool.nodes["n0"].used == {0: "j", 1: "j"}
        assert pool.release("j") == 2
        assert pool.free_gpus == 8 and pool.nodes["n0"].used == {}
    assert kept == 3
