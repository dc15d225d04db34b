"""A job table's row takes its VC's and user's codes from one look-up of the (VC, user) pair
(``JobTable._codes``), where it looked each name up on its own. Given arrivals from a few VCs
and users in any order (the same user in several VCs, users without a name, past a chunk of
rows), expect the same VC and user codes on every row, the same names by code, and the same
columns as the plain per-name look-ups: the metrics sum per VC and per user in code order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.sim.jobtable import CHUNK, JobTable

# White-box throughout: a subclass of the compiled ``JobTable`` (codes per name).
pytestmark = pytest.mark.sources


@dataclass
class Arrival:
    submit: float
    duration: float
    vc: str
    user: str


class PerNameTable(JobTable):
    """The reference: each name looked up on its own, once a row."""

    def add(self, job: Any) -> int:
        row = super().add(job)
        for name, names, codes, column in (
            (job.vc, self.vcs, self._vc_code, self.vc),
            (job.user, self.users, self._user_code, self.user),
        ):
            code = codes.get(name)
            if code is None:
                code = codes[name] = len(names)
                names.append(name)
            column[row] = code
        return row

    def _new_codes(self, vc: str, user: str) -> tuple[int, int]:
        return (0, 0)  # (``add`` above writes the codes itself, after)


@PROPERTY_SETTINGS
@given(
    pairs=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["", "ann", "bob", "cy"])),
        min_size=1,
        max_size=40,
    ),
    long=st.booleans(),
)
def test_pair_codes_are_the_per_name_codes(pairs: list[tuple[str, str]], long: bool) -> None:
    if long:  # past the first chunk of blank rows
        pairs = (pairs * (CHUNK // len(pairs) + 2))[: CHUNK + 7]
    by_pair, per_name = JobTable(), PerNameTable()
    for n, (vc, user) in enumerate(pairs):
        job = Arrival(float(n), 10.0, vc, user)
        assert by_pair.add(job) == per_name.add(job) == n
    assert (by_pair.vcs, by_pair.users) == (per_name.vcs, per_name.users)
    got, want = by_pair.arrays(), per_name.arrays()
    assert got.keys() == want.keys()
    for name in got:
        assert got[name].tobytes() == want[name].tobytes(), name
