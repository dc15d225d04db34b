"""The simulator's cheaper ways to build its per-job objects make the same objects as the
classes' own constructors, and the job table's chunked rows read as appended ones."""

from __future__ import annotations

import dataclasses
import math

import pytest

from labhive.scheduler.core.frozen_build import frozen_builder
from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import Finish, Submit
from labhive.scheduler.core.states import JobState
from labhive.scheduler.drivers.lifecycle import JobRecord, end_attempt
from labhive.scheduler.drivers.replay import _submitted
from labhive.scheduler.sim.engine import SimJob, trace_sim_job
from labhive.scheduler.sim.jobtable import CHUNK, JobTable
from labhive.scheduler.sim.traces import TraceJob
from labhive.scheduler.sim.workload import _role, trace_job_spec


def _fields(obj: object) -> tuple[object, ...]:
    return tuple(getattr(obj, f.name) for f in dataclasses.fields(obj))  # type: ignore[arg-type]


def test_a_trace_job_spec_is_the_dataclass_s() -> None:
    tj = TraceJob("j1", 5.0, "vc2", "alice", 4, 60.0, "Pass", 3)
    spec = trace_job_spec(tj, "vc2", 7)
    want = JobSpec("j1", "vc2", 7, (_role(4, None, None),), duration=60.0, user="alice")
    assert type(spec) is JobSpec and spec == want and hash(spec) == hash(want)
    assert _fields(spec) == _fields(want)
    try:
        spec.name = "other"  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("the spec is not frozen")


def test_submit_and_finish_are_the_dataclasses() -> None:
    spec = JobSpec("j", "vc", 1, (_role(1, None, None),))
    event = _submitted("j", spec, 2.0)
    assert type(event) is Submit and event == Submit("j", spec, 2.0)
    record = JobRecord("j", spec, 0.0, state=JobState.RUNNING)
    finish = end_attempt(record, True, 9.0)
    assert type(finish) is Finish and finish == Finish("j", 9.0)


def test_a_trace_sim_job_is_the_dataclass_s() -> None:
    spec = JobSpec("j", "vc", 1, (_role(2, None, None),), user="bob")
    for vc, user in (("tvc", "ann"), ("", "")):
        got = trace_sim_job("j", spec, 1.0, 30.0, vc, user, "Failed", 2)
        want = SimJob("j", spec, 1.0, 30.0, vc, user, "Failed", gpus=2)
        assert _fields(got) == _fields(want)
        assert not got.ok and got.ok == want.ok


def test_the_job_table_past_a_chunk_reads_as_appended_rows() -> None:
    table = JobTable()
    n = CHUNK + 5
    jobs = [SimJob(f"j{i}", JobSpec(f"j{i}", "vc", 1, ()), float(i), 10.0) for i in range(n)]
    for job in jobs:
        job.row = table.add(job)
    jobs[-1].end = 20.0
    table.fill(jobs[-1].row, jobs[-1])
    cols = table.arrays()
    assert len(table) == n and all(len(c) == n for c in cols.values())
    assert list(cols["submit"]) == [float(i) for i in range(n)]
    assert math.isnan(cols["end"][0]) and cols["end"][-1] == 20.0
    assert table.count("PENDING") == n


def test_built_specs_do_not_share_their_raw_mapping() -> None:
    """Given two trace jobs built by the generated builder, expect each spec's ``raw`` to be
    its own dict (a default_factory field, made fresh per object as the constructor does)."""
    one = trace_job_spec(TraceJob("a", 0.0, "vc", "u", 1, 5.0, "Pass", 1), "vc")
    two = trace_job_spec(TraceJob("b", 0.0, "vc", "u", 1, 5.0, "Pass", 2), "vc")
    assert one.raw == two.raw == {} and one.raw is not two.raw


def test_a_builder_is_refused_where_it_would_build_a_different_object() -> None:
    """Given a class with a ``__post_init__`` (the builder would skip it), a field name that
    does not exist, or a class that is not a slotted dataclass: expect a TypeError at once,
    not objects that differ from the constructor's."""

    @dataclasses.dataclass(slots=True)
    class Checked:  # as ``SimJob`` in the sources (compiled, it is no dataclass to the builder)
        x: int

        def __post_init__(self) -> None:
            assert self.x >= 0

    with pytest.raises(TypeError, match="__post_init__"):
        frozen_builder(Checked)
    with pytest.raises(TypeError, match="has no field colour"):
        frozen_builder(Finish, colour="red")

    @dataclasses.dataclass(frozen=True)
    class Loose:
        x: int

    with pytest.raises(TypeError, match="not a slotted dataclass"):
        frozen_builder(Loose)


def test_a_field_added_to_an_event_is_a_parameter_of_its_builder() -> None:
    """Given a frozen event with a new defaulted field, expect the generated builder to take
    it (with its default) and build the constructor's object: no field is left unset."""

    @dataclasses.dataclass(frozen=True, slots=True)
    class Event:
        job_id: str
        time: float = 0.0
        note: str = "none"

    build = frozen_builder(Event)
    assert build("j", 1.0) == Event("j", 1.0) and type(build("j")) is Event
    assert build("j", 2.0, "late") == Event("j", 2.0, "late")
    with pytest.raises(dataclasses.FrozenInstanceError):
        build("j").note = "x"
