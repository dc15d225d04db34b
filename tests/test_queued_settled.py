"""Given random submissions (1 to 8 GPUs in one or two tasks), finishes, cancels, requeues,
node faults and ticks on small clusters, expect FIFO and SJF (strict, and FIFO with per-VC
queues) to decide exactly as they do when every pass runs: a pass is skipped only while every
line's head finds no room by free GPU counts and no release has left a node with room for
the smallest of them (``QueuedPass._settle``). The reference runs every pass
(``SKIP_SETTLED_PASSES = False``).

And given eight 8-GPU nodes, each running a 7-GPU and a 1-GPU job, and a 2-GPU job heading
FIFO's line: expect the finishes of 1-GPU jobs, each on its own node, to try nothing (each
ran a pass that tried the head and refused it: issue 34, about 0.55 failed tries per job of
a contended FIFO run), and the finish that leaves a node room to start it.

And given random workloads, expect LAS and Capacity to decide as when ``_try`` asked
``_refused`` after ``may_fit`` (its no, kept), as it did before issue 34's sixteenth session."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_pass_skips import Pair, decide_alike, eight_nodes_of_eight, tries_of
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Decision, Finish, Start, Submit
from labhive.scheduler.policies.capacity import CapacityPolicy
from labhive.scheduler.policies.fifo import FifoPolicy
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.queued import QueuedJob, QueuedPolicy, from_config
from labhive.scheduler.policies.sjf import SjfPolicy


class EveryPassFifo(FifoPolicy):
    SKIP_SETTLED_PASSES = False


class EveryPassSjf(SjfPolicy):
    SKIP_SETTLED_PASSES = False


PAIRS: list[Pair] = [  # (skipping settled passes, running every pass, options, defaults)
    (FifoPolicy, EveryPassFifo, {}, {}),
    (FifoPolicy, EveryPassFifo, {"per_vc": True}, {"per_vc": False}),
    (SjfPolicy, EveryPassSjf, {}, {}),
]


def settled_is_exact(policy: QueuedPolicy, every: QueuedPolicy) -> None:
    """While a skipping policy holds its pass as settled, no head of it may find room by
    free counts (the rule's premise, asked of the pool itself)."""
    settled = policy._settled
    if settled is None or settled[0] is not policy.pool or policy.pool.peak >= settled[1]:
        return
    for group in list(policy._groups):
        head = policy._head(group)
        assert head is None or not policy.pool.may_fit(head.gpus), head.job_id


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), pair=st.sampled_from(PAIRS))
def test_a_settled_pass_not_run_decides_as_running_every_pass(data: Any, pair: Pair) -> None:
    decide_alike(data, pair, also=settled_is_exact)


def test_finishes_that_free_too_little_for_fifos_head_try_nothing() -> None:
    """Eight 8-GPU nodes, each running a 7-GPU job and a 1-GPU one; a 2-GPU job waits at the
    head of FIFO's line, a 1-GPU job behind it. Seven 1-GPU jobs end, one at a time, each
    leaving its node 1 GPU free: the plain policy tries the head after each that leaves 2 or
    more free in all (6 tries), the skipping one tries none. Then a 7-GPU job ends on a node
    with 1 free: 8 free there, the head starts, and the job behind it, in both."""
    for cls, tries in ((FifoPolicy, 0), (EveryPassFifo, 6)):
        policy = from_config(cls, eight_nodes_of_eight(), {})
        now = 0.0
        jobs = [(f"big{i}", 7) for i in range(8)] + [(f"one{i}", 1) for i in range(8)]
        for job_id, gpus in [*jobs, ("w2", 2), ("w1", 1)]:
            now += 1.0
            spec = parse_job({"name": job_id, "vc": "vc0", "user": job_id, "gpus": gpus})
            policy.check(spec)
            policy.handle(Submit(job_id, spec, now))
        assert [v.job_id for v in policy.jobs() if v.state == "WAITING"] == ["w2", "w1"]
        tried = tries_of(policy)
        for i in range(1, 8):
            now += 1.0
            assert policy.handle(Finish(f"one{i}", now)) == [], cls.__name__
        assert len(tried) == tries, (cls.__name__, tried)
        started = policy.handle(Finish("big1", now + 1.0))
        assert [d.job_id for d in started if isinstance(d, Start)] == ["w2", "w1"]


class AskingRefused:
    """``_try`` as before: a preemptive policy asked ``_refused`` (``SizeRefusals``, kept
    across passes) after ``may_fit`` and before placing, and took its no as placement's."""

    def _try(self, job: QueuedJob, out: list[Decision], fits: bool = False) -> bool:
        allowed, opp = self.admit(job)  # type: ignore[attr-defined]
        if not allowed or (self.per_vc and not self._room_in_vc(job)):  # type: ignore[attr-defined]
            return False
        if self.backfill and not self._may_jump(job):  # type: ignore[attr-defined]
            return False
        tasks = None
        shape = job.gang.shape
        over = self._over_quota(job) if self.per_vc else 0  # type: ignore[attr-defined]
        if (
            not over
            and shape not in self._no_room  # type: ignore[attr-defined]
            and (not self._ask_fit or self.pool.may_fit(job.gpus))  # type: ignore[attr-defined]
        ):
            refused = self.preemptive and self._refused(job.gang)  # type: ignore[attr-defined]
            tasks = None if refused else self.pool.place(job.job_id, job.gang)  # type: ignore[attr-defined]
            if tasks is None:
                self._no_room.add(shape)  # type: ignore[attr-defined]
        return bool(self._start_or_search(job, tasks, opp, out))  # type: ignore[attr-defined]


class LasAskingRefused(AskingRefused, LasPolicy):
    pass


class CapacityAskingRefused(AskingRefused, CapacityPolicy):
    pass


LAS = {"thresholds": (120.0, 600.0), "promote_knob": 0.0, "quantum": 60.0, "same_queue": False}
ASKING: list[Pair] = [  # (placing after may_fit, asking _refused too, options, defaults)
    (LasPolicy, LasAskingRefused, {}, LAS),
    (LasPolicy, LasAskingRefused, {"backfill": False}, LAS),
    (CapacityPolicy, CapacityAskingRefused, {"backfill": True}, {"borrow": True}),
]


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), pair=st.sampled_from(ASKING))
def test_a_preemptive_try_placing_without_asking_refused_decides_as_before(
    data: Any, pair: Pair
) -> None:
    """Given random workloads, expect LAS and Capacity, whose ``_try`` places a head that
    ``may_fit`` let through without asking ``_refused`` (its no, kept across passes), to
    decide as when ``_try`` asked it too: ``_refused`` never says no where ``may_fit`` just
    said yes."""
    decide_alike(data, pair)
