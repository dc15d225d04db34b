"""Given random submissions, finishes, cancels, requeues, node faults and ticks on small
clusters, expect FIFO, SJF, LAS, DRF and Capacity to decide exactly as when every event goes
through ``PolicyBase._apply``'s full dispatch (a ``match`` over every event type) and every job
is filed under its ``group_key``, as before issue 34's seventeenth session: ``handle`` now takes
a submit and a finish itself, ``_apply`` a tick before its ``match``, and a strict FIFO or SJF
files every job under ``None`` (its one line) without asking ``group_key``. And expect every
job a policy holds to carry its spec's VC and user and its gang's GPUs (given by ``_new_job``,
no longer copied by ``QueuedJob.__post_init__``) and the gang of its own spec (``check`` hands
the gang it found to the job made of the spec it passed last)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_pass_skips import LAS, Pair, decide_alike
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.core.model import (
    Adopt,
    Cancel,
    Decision,
    Event,
    Finish,
    NodeDown,
    NodeUp,
    Reconfigure,
    Requeue,
    Submit,
    TasksEnded,
    Tick,
)
from labhive.scheduler.policies.capacity import CapacityPolicy
from labhive.scheduler.policies.drf import DrfPolicy
from labhive.scheduler.policies.fifo import FifoPolicy
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.node_pool import gang_of
from labhive.scheduler.policies.queued import QueuedJob, QueuedPolicy
from labhive.scheduler.policies.sjf import SjfPolicy


class PlainDispatch:
    """Every event through the full dispatch, every job filed under ``group_key``."""

    _jobs: dict[str, QueuedJob]
    _now: float

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._one_line = False

    def handle(self, event: Event) -> list[Decision]:
        out: list[Decision] = []
        self._now = max(self._now, event.time)
        if isinstance(event, Finish | Cancel | Requeue) and event.job_id not in self._jobs:
            return out
        new = self._apply(event, out)
        self._schedule(out, only=new)  # type: ignore[attr-defined]
        return out

    def _apply(self, event: Event, out: list[Decision]) -> QueuedJob | None:
        policy: Any = self
        match event:
            case Submit():
                return policy._submit(event.job_id, event.spec, admitted=event.admitted)
            case Finish() | Cancel():
                policy._remove(event.job_id)
            case Requeue():
                policy._requeue(event.job_id)
            case NodeDown():
                policy._node_health(event.node, False, out, event.reason)
            case NodeUp():
                policy._node_health(event.node, True, out, "")
            case Reconfigure():
                policy._reconfigure(event.config, out)
            case Adopt():
                policy._adopt(event, out)
            case TasksEnded():
                policy._tasks_ended(event.job_id, event.tasks, out)
            case Tick():
                policy.on_tick()
        return None


class PlainFifo(PlainDispatch, FifoPolicy):
    pass


class PlainSjf(PlainDispatch, SjfPolicy):
    pass


class PlainLas(PlainDispatch, LasPolicy):
    pass


class PlainDrf(PlainDispatch, DrfPolicy):
    pass


class PlainCapacity(PlainDispatch, CapacityPolicy):
    pass


PAIRS: list[Pair] = [  # (as now, through the full dispatch, options, defaults)
    (FifoPolicy, PlainFifo, {}, {}),
    (FifoPolicy, PlainFifo, {"backfill": True}, {}),
    (FifoPolicy, PlainFifo, {"per_vc": True}, {"per_vc": False}),
    (SjfPolicy, PlainSjf, {}, {}),
    (LasPolicy, PlainLas, {}, LAS),
    (LasPolicy, PlainLas, {"promote_knob": 2.0}, LAS),
    (DrfPolicy, PlainDrf, {"backfill": True}, {}),
    (CapacityPolicy, PlainCapacity, {}, {"borrow": True}),
]


def jobs_as_made(policy: QueuedPolicy, plain: QueuedPolicy) -> None:
    """Each job carries its spec's gang (the one ``check`` found, when it checked that spec
    last), VC, user and GPUs; each waiting one is filed under its ``group_key`` (the one line,
    ``None``, for a strict FIFO or SJF)."""
    for job in policy._jobs.values():
        assert job.gang == gang_of(job.spec), job.job_id
        assert (job.vc, job.gpus, job.user) == (job.spec.vc, job.gang.gpus, job.spec.user or "")
    for job in policy._waiting_jobs():
        assert job.group == policy.group_key(job), job.job_id


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), pair=st.sampled_from(PAIRS))
def test_events_taken_by_handle_decide_as_through_the_full_dispatch(data: Any, pair: Pair) -> None:
    decide_alike(data, pair, also=jobs_as_made)


def test_a_strict_fifo_has_one_line_and_a_split_one_asks_group_key() -> None:
    """FIFO and SJF, strict: one line (``_one_line``); with backfill (a line per GPU count),
    per-VC queues, or a policy with lines of its own (LAS, DRF, Capacity): ``group_key``."""
    from test_pass_skips import eight_nodes_of_eight

    from labhive.scheduler.policies.queued import from_config

    config = eight_nodes_of_eight()
    assert from_config(FifoPolicy, config, {})._one_line
    assert from_config(SjfPolicy, config, {})._one_line
    assert not from_config(FifoPolicy, config, {"backfill": True})._one_line
    assert not from_config(FifoPolicy, config, {"per_vc": True}, per_vc=False)._one_line
    assert not from_config(LasPolicy, config, {}, **LAS)._one_line
    assert not from_config(DrfPolicy, config, {})._one_line
    assert not from_config(CapacityPolicy, config, {}, borrow=True)._one_line


def test_a_tick_demotes_a_las_job_past_its_threshold_and_a_waiting_one_preempts_it() -> None:
    """Eight 8-GPU nodes, all taken by 8-GPU jobs from time 0; another 8-GPU job arrives at
    100 s and waits (the runners are in LAS's first queue too, ahead of it). At 200 s a tick
    (the runners attained 1,600 GPU-seconds, past the 120 threshold) demotes them: the waiting
    job, still in the first queue, preempts one. Without the tick reaching ``on_tick`` nothing
    is demoted and nothing starts."""
    from test_pass_skips import eight_nodes_of_eight

    from labhive.scheduler.core.jobs import parse_job
    from labhive.scheduler.core.model import Preempt, Start
    from labhive.scheduler.policies.queued import from_config

    for cls in (LasPolicy, PlainLas):
        policy = from_config(cls, eight_nodes_of_eight(), {}, **LAS)
        for i in range(9):
            spec = parse_job({"name": f"j{i}", "vc": "vc0", "user": "u", "gpus": 8})
            policy.check(spec)
            policy.handle(Submit(f"j{i}", spec, 0.0 if i < 8 else 100.0))
        out = policy.handle(Tick(200.0))
        assert [type(d) for d in out] == [Preempt, Start], (cls, out)
        assert out[1].job_id == "j8"


def test_jobs_checked_in_one_order_and_submitted_in_another_hold_their_own_gangs() -> None:
    """A driver checks a 2-GPU job, then an 8-GPU one, then submits the 2-GPU job first (the
    gang ``check`` found last is the 8-GPU job's) and the 8-GPU one; and a job submitted
    unchecked (``admitted``). Expect each job to hold its own spec's gang, and the starts to
    take 2, 8 and 4 GPUs."""
    from test_pass_skips import eight_nodes_of_eight

    from labhive.scheduler.core.jobs import parse_job
    from labhive.scheduler.core.model import Start
    from labhive.scheduler.policies.queued import from_config

    policy = from_config(FifoPolicy, eight_nodes_of_eight(), {})
    specs = {
        n: parse_job({"name": n, "vc": "vc0", "user": "u", "gpus": g})
        for n, g in (("two", 2), ("eight", 8), ("four", 4))
    }
    policy.check(specs["two"])
    policy.check(specs["eight"])
    out = policy.handle(Submit("two", specs["two"], 1.0))
    out += policy.handle(Submit("eight", specs["eight"], 2.0))
    out += policy.handle(Submit("four", specs["four"], 3.0, admitted=True))
    assert [sum(len(t.gpus) for t in d.tasks) for d in out if isinstance(d, Start)] == [2, 8, 4]
    for name, spec in specs.items():
        assert (
            policy._jobs[name].gang == gang_of(spec) and policy._jobs[name].gpus == spec.total_gpus
        )
