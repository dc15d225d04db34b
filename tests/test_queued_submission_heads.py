"""Given random submissions (1 to 8 GPUs in one or two tasks), finishes, cancels, requeues,
node faults and ticks on small clusters, expect FIFO, SJF, DRF (with and without backfill)
and LAS to decide exactly as when a submission asked ``_head`` whether it heads the line it
joined: a submission reads that off the line's first entry (its own, or a live one of another
job), calling ``_head`` only behind a stale one, and drops its own entry once it starts at
once. After every event, expect no empty line kept.

And given a full cluster and FIFO with backfill, two 2-GPU jobs waiting in its 2-GPU line
and the first cancelled (no pass looks at a line while no GPU is free, so its stale entry
stays first), expect a third 2-GPU job to be queued behind the second, not tried.

And given one 8-GPU node, a 4-GPU job refused while it was full and then cancelled, and
the node freed with nothing waiting (no pass runs, so none clears the shapes found no room),
expect a new 4-GPU job to start as it arrives (FIFO and SJF, with and without backfill: a
submission's try clears that set alone, without ``_begin_pass``'s other resets).

And given an idle cluster, expect FIFO to start each of five submissions as it arrives
without calling ``_head`` (each such call was paid at every submission of an uncontended run:
the started job's stale entry stood first until the next one came)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_pass_skips import LAS, Pair, decide_alike, eight_nodes_of_eight, tries_of
from test_properties import PROPERTY_SETTINGS
from test_queued_entry_jobs import one_node_of_eight

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Cancel, Decision, Finish, Start, Submit
from labhive.scheduler.policies.drf import DrfPolicy
from labhive.scheduler.policies.fifo import FifoPolicy
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.queued import QueuedJob, QueuedPolicy, from_config
from labhive.scheduler.policies.sjf import SjfPolicy


class AskingHead:
    """A submission's pass as before: ``_head`` asked whether the new job heads its line."""

    def _schedule(
        self,
        out: list[Decision],
        only: QueuedJob | None = None,
        groups: set[Hashable] | None = None,
    ) -> None:
        if only is None:
            super()._schedule(out, only, groups)  # type: ignore[misc]
        elif self._head(only.group) is only:  # type: ignore[attr-defined]
            self._begin_pass()  # type: ignore[attr-defined]
            self._try(only, out)  # type: ignore[attr-defined]


class FifoAsking(AskingHead, FifoPolicy):
    pass


class SjfAsking(AskingHead, SjfPolicy):
    pass


class DrfAsking(AskingHead, DrfPolicy):
    pass


class LasAsking(AskingHead, LasPolicy):
    pass


PAIRS: list[Pair] = [  # (reading the first entry, asking ``_head``, options, defaults)
    (FifoPolicy, FifoAsking, {}, {}),
    (FifoPolicy, FifoAsking, {"per_vc": True}, {"per_vc": False}),
    (SjfPolicy, SjfAsking, {"backfill": True}, {}),
    (DrfPolicy, DrfAsking, {}, {}),
    (DrfPolicy, DrfAsking, {"backfill": True}, {}),
    (LasPolicy, LasAsking, {}, LAS),
    (LasPolicy, LasAsking, {"promote_knob": 2.0}, LAS),  # waiting jobs change lines
]


def no_empty_line(policy: QueuedPolicy, _: QueuedPolicy) -> None:
    assert all(policy._groups.values()), policy._groups


@pytest.mark.sources
@settings(PROPERTY_SETTINGS)
@given(data=st.data(), pair=st.sampled_from(PAIRS))
def test_a_submission_reading_its_lines_first_entry_decides_as_asking_head(
    data: Any, pair: Pair
) -> None:
    decide_alike(data, pair, also=no_empty_line)


def test_submissions_to_an_idle_fifo_start_without_asking_head() -> None:
    """Eight idle 8-GPU nodes; five 2-GPU jobs arrive one by one. Expect each to start as
    it arrives, its line left empty after it, and ``_head`` never called."""
    policy = from_config(FifoPolicy, eight_nodes_of_eight(), {})
    asked: list[Hashable] = []
    real_head = policy._head

    def counted(group: Hashable) -> QueuedJob | None:
        asked.append(group)
        return real_head(group)

    policy._head = counted  # type: ignore[method-assign]
    for i in range(5):
        spec = parse_job({"name": f"j{i}", "vc": "vc0", "gpus": 2})
        out = policy.handle(Submit(f"j{i}", spec, float(i)))
        assert [d.job_id for d in out if isinstance(d, Start)] == [f"j{i}"]
        assert policy._groups == {}
    assert asked == []


def test_a_submission_behind_a_stale_first_entry_is_not_tried_past_a_live_head() -> None:
    """Eight 8-GPU nodes, each running an 8-GPU job; FIFO with backfill. ``a`` and ``b`` (2
    GPUs) wait in the 2-GPU line; ``a`` is cancelled; ``c`` (2 GPUs) arrives. Expect ``b``
    to head the line and ``c`` not to be tried (behind the stale entry, ``_head`` is asked)."""
    policy = from_config(FifoPolicy, eight_nodes_of_eight(), {"backfill": True})
    for i, (job_id, gpus) in enumerate([*((f"r{n}", 8) for n in range(8)), ("a", 2), ("b", 2)]):
        spec = parse_job({"name": job_id, "vc": "vc0", "gpus": gpus})
        policy.handle(Submit(job_id, spec, float(i)))
    assert policy.pool.free_gpus == 0
    assert policy.handle(Cancel("a", 20.0)) == []
    tried = tries_of(policy)
    spec = parse_job({"name": "c", "vc": "vc0", "gpus": 2})
    assert policy.handle(Submit("c", spec, 21.0)) == []
    assert tried == []
    head = policy._head((None, 2))  # (the 2-GPU line of FIFO's one line, with backfill)
    assert head is not None and head.job_id == "b"


def test_a_shape_refused_before_the_node_freed_starts_when_submitted_again() -> None:
    """One 8-GPU node running ``r`` (8 GPUs); ``a`` (4 GPUs) is tried and refused, then
    cancelled; ``r`` ends with nothing waiting. Expect ``b`` (4 GPUs) to start at once."""
    for cls, options in ((FifoPolicy, {}), (FifoPolicy, {"backfill": True}), (SjfPolicy, {})):
        policy = from_config(cls, one_node_of_eight(), options)
        for i, (job_id, gpus) in enumerate((("r", 8), ("a", 4))):
            spec = parse_job({"name": job_id, "vc": "vc0", "gpus": gpus})
            policy.handle(Submit(job_id, spec, float(i)))
        assert policy._no_room, cls.__name__  # (a's shape, refused)
        assert policy.handle(Cancel("a", 2.0)) == []
        policy.handle(Finish("r", 3.0))
        spec = parse_job({"name": "b", "vc": "vc0", "gpus": 4})
        out = policy.handle(Submit("b", spec, 4.0))
        assert [d.job_id for d in out if isinstance(d, Start)] == ["b"], cls.__name__
