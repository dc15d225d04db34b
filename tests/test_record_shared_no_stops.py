"""A job record's stopped tasks start as one shared empty dict (``lifecycle.NO_STOPS``), not a
dict of each record's own: nearly no job has a task stopped on its own, and a million-job run's
waiting jobs each held an empty one. Given records of four-task incremental jobs and a random
run of decisions on each (starts, some tasks stopped on their own or preempted, those tasks
started again, whole preemptions and stops, attempts ending well or not), expect every record,
every answer and every event to be those of a record made with a dict of its own (the old
factory's), the shared dict never filled, and no two records sharing a dict once filled."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.core.jobs import JobSpec, RoleSpec
from labhive.scheduler.core.model import Decision, Preempt, Start, Stop, StopTasks, TaskPlacement
from labhive.scheduler.drivers.lifecycle import (
    NO_STOPS,
    JobRecord,
    apply_decision,
    end_attempt,
)

SPEC = JobSpec("j", "vc", 100, (RoleSpec("worker", instances=4, gpu=1),), gang=False, retries=1)
TASKS = tuple(TaskPlacement("worker", i, f"n{i % 2}", (i,)) for i in range(4))

#: One step: a decision on the job (by the indices of the tasks it names), or its attempt's end.
steps = st.one_of(
    st.tuples(st.just("start"), st.sets(st.integers(0, 3), min_size=1)),
    st.tuples(st.just("stop tasks"), st.sets(st.integers(0, 3), min_size=1), st.booleans()),
    st.tuples(st.just("preempt")),
    st.tuples(st.just("stop")),
    st.tuples(st.just("end"), st.booleans()),
)


def decision(step: tuple[Any, ...]) -> Decision | None:
    kind = step[0]
    if kind == "start":
        return Start("j", tuple(TASKS[i] for i in sorted(step[1])))
    if kind == "stop tasks":
        tasks = tuple(TASKS[i] for i in sorted(step[1]))
        return StopTasks("j", tasks, "node down", "k" if step[2] else "")
    if kind == "preempt":
        return Preempt("j", "k", "preempted by k")
    if kind == "stop":
        return Stop("j", "drained")
    return None


def play(record: JobRecord, run: list[tuple[Any, ...]]) -> list[object]:
    """Each step's answer and the record after it."""
    seen: list[object] = []
    for now, step in enumerate(run):
        d = decision(step)
        if d is None:
            seen.append(end_attempt(record, bool(step[1]), float(now)))
        else:
            seen.append(apply_decision(record, d, float(now)))
        seen.append(repr(record))
    return seen


@PROPERTY_SETTINGS
@given(runs=st.lists(st.lists(steps, max_size=12), min_size=1, max_size=4))
def test_records_sharing_no_stops_play_as_records_with_their_own(
    runs: list[list[tuple[Any, ...]]],
) -> None:
    shared = [JobRecord("j", SPEC, 0.0) for _ in runs]
    own = [JobRecord("j", SPEC, 0.0, stopped={}) for _ in runs]
    assert all(record.stopped is NO_STOPS for record in shared)
    for record, plain, run in zip(shared, own, runs, strict=True):
        assert play(record, run) == play(plain, run)
    assert NO_STOPS == {}
    filled = [id(r.stopped) for r in shared if r.stopped is not NO_STOPS]
    assert len(filled) == len(set(filled))


# compiled code stores into a dict with PyDict_SetItem, past the subclass's __setitem__: the
# guard holds in the sources (the LABHIVE_PURE=1 pass), where a misuse would be caught
@pytest.mark.sources
def test_the_shared_dict_refuses_to_be_filled() -> None:
    """Given a fresh record, expect writing into its stopped tasks to be refused, and its task
    stopped on its own to give it a dict of its own."""
    record = JobRecord("j", SPEC, 0.0)
    with pytest.raises(TypeError):
        record.stopped[("worker", 0)] = "why"
    apply_decision(record, Start("j", TASKS), 0.0)
    apply_decision(record, StopTasks("j", TASKS[:1], "node down"), 1.0)
    assert record.stopped == {("worker", 0): "stopped: node down"}
    assert record.stopped is not NO_STOPS and NO_STOPS == {}
