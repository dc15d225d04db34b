"""A generic CSV trace's rows are read by position (``traces._generic_fast``: the row's values
taken in one ``itemgetter`` call, its GPU count checked in one chained comparison); a row it is
unsure of goes the general way (``_generic_row``), which says what is wrong with it. Given a
generic CSV whose columns come in any order, with or without ``job_id`` and ``status``, and rows
mixing good values with padded, empty, fractional, negative, infinite and NaN ones, expect the
same jobs, skips and problems, in the same order, as reading every row the general way."""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.sim import traces
from labhive.scheduler.sim.traces import GENERIC_COLUMNS, Trace, iter_trace

NUMBERS = ["0", "1", "2", " 4 ", "8.0", "1.5", "-1", "-inf", "inf", "nan", "", "x", "3e2", "1e400"]
TEXTS = ["", "a", " vc1 ", "bob", "Failed", "  "]


@st.composite
def generic_csv(draw: st.DrawFn) -> tuple[list[str], list[list[str]]]:
    """A header (the required columns, maybe job_id and status, in any order) and rows."""
    columns = [c for c in GENERIC_COLUMNS if c != "status" or draw(st.booleans())]
    if draw(st.booleans()):
        columns.append("job_id")
    columns = draw(st.permutations(columns))
    value = {
        "submit_time": st.sampled_from(["0", "10.5", " 7 ", "", "nan", "x"]),
        "gpus": st.sampled_from(NUMBERS),
        "duration": st.sampled_from(NUMBERS),
    }
    rows = draw(
        st.lists(
            st.tuples(*(value.get(c, st.sampled_from(TEXTS)) for c in columns)).map(list),
            max_size=30,
        )
    )
    return list(columns), rows


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    """A CSV file of ``header`` and ``rows``, as a user's tool would write it."""
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)


def read(header: list[str], rows: list[list[str]]) -> tuple[object, ...]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.csv"
        write_csv(path, header, rows)
        trace = Trace(str(path), "generic-csv", [])
        jobs = list(iter_trace(path, "generic-csv", into=trace))
    return jobs, trace.problems, dict(trace.skipped)


@PROPERTY_SETTINGS
@given(csv_file=generic_csv())
def test_rows_read_by_position_are_the_general_ways(
    csv_file: tuple[list[str], list[list[str]]],
) -> None:
    header, rows = csv_file
    fast = read(header, rows)
    with pytest.MonkeyPatch.context() as patch:  # every row the general way
        patch.setattr(traces, "_generic_fast", lambda fields: lambda values, line: None)
        general = read(header, rows)
    assert repr(fast) == repr(general)  # (by repr: a NaN submit time is read by both ways)
