"""A CSV trace's row loop (``traces._iter_csv``) tests the common row first: a blank line is
told apart only among rows of the wrong width, and a row read by position is yielded without a
second test. Given a generic CSV mixing good rows, blank lines, short and long rows and rows
the fast way is unsure of (read the general way, some skipped or malformed), expect the same
jobs, skips and problems, with the same line numbers, as the plain loop that tests each row for
blankness first."""

from __future__ import annotations

import csv
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.sim import traces
from labhive.scheduler.sim.traces import GENERIC_COLUMNS, Trace, TraceJob, iter_trace


def plain_iter_csv(
    trace: Trace, lines: Iterable[str], parse_row: Any, required: tuple[str, ...], rows: bool
) -> Iterator[Any]:
    """The reference: the loop as it was, a blank line skipped before anything else."""
    reader = csv.reader(lines)
    fields = [f.strip() for f in next(reader, [])]
    width = len(fields)
    fast = traces._generic_fast(fields) if parse_row is traces._generic_row else None
    for values in reader:
        if not values:
            continue
        line = reader.line_num
        if len(values) != width:
            trace.problems.append(traces.RowProblem(line, "wrong number of columns"))
            continue
        row = fast(values, line) if fast is not None else None  # (a ``trace_row``)
        job = None if row is None else TraceJob(*row)
        if job is None:
            job = traces._take(trace, line, parse_row, dict(zip(fields, values, strict=True)), line)
        if job is not None:
            yield traces.trace_row(job) if rows else job


GOOD = ["5", "vc1", "bob", "2", "30", "Pass"]
rows = st.lists(
    st.one_of(
        st.just(GOOD),
        st.just([]),  # a blank line
        st.just(GOOD[:4]),  # too short
        st.just([*GOOD, "extra"]),  # too long
        st.just(["5", "vc1", "bob", "0", "30", "Pass"]),  # no GPUs: skipped
        st.just(["x", "vc1", "bob", "2", "30", "Pass"]),  # malformed
        st.just(["5", "vc1", "bob", "1.5", "30", "Pass"]),  # unsure: the general way
    ),
    max_size=25,
)


def read(lines: list[list[str]]) -> tuple[object, ...]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.csv"
        with open(path, "w", newline="") as fh:
            fh.write(",".join(GENERIC_COLUMNS) + "\n")
            for values in lines:
                fh.write(",".join(values) + "\n")
        trace = Trace(str(path), "generic-csv", [])
        jobs = list(iter_trace(path, "generic-csv", into=trace))
    return jobs, trace.problems, dict(trace.skipped)


@PROPERTY_SETTINGS
@given(lines=rows)
def test_the_row_loop_reads_as_the_plain_one(lines: list[list[str]]) -> None:
    got = read(lines)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(traces, "_iter_csv", plain_iter_csv)
        want = read(lines)
    assert repr(got) == repr(want)
