"""Given lines filed, re-filed under another kind or key, and emptied, in any order, with
passes between (some tidying the heaps), expect ``HeadIndex`` to tell a line's live entry by
the entry it keeps for the line (``filed``: an entry is live where it is that one, not one of
equal key, seq and version) and so ``best`` to answer the first live head a plain dict of the
lines' latest filings ranks first, with ``filed`` holding exactly the lines filed and not
emptied, each with its latest key."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.policies.head_index import START, TIDY_EVERY, HeadIndex

KINDS = [(((1, 0.0, 0, 0),), None), (((2, 0.0, 0, 0),), None), (((8, 0.0, 0, 0),), 100.0)]

#: (line, kind or None to empty it, key, a pass ends after it)
STEPS = st.lists(
    st.tuples(
        st.integers(0, 5),
        st.one_of(st.none(), st.integers(0, len(KINDS) - 1)),
        st.integers(0, 3),
        st.booleans(),
    ),
    min_size=1,
    max_size=120,
)


def start_all(kind: Any, gpus: int, key: Any) -> int:
    return START


@settings(PROPERTY_SETTINGS)
@given(steps=STEPS)
def test_the_live_entry_is_the_one_filed_for_its_line(steps: list[Any]) -> None:
    index = HeadIndex()
    plain: dict[int, tuple[Any, int]] = {}  # line -> (key, seq) of its latest filing
    for seq, (line, kind, key, ends) in enumerate(steps):
        if kind is None:
            index.file(line, None, 0, None, 0)
            plain.pop(line, None)
        else:
            shape = KINDS[kind]
            index.file(line, shape, shape[0][0][0], (key, seq), seq)
            plain[line] = ((key, seq), seq)
        first = index.best(start_all)
        want = min(((k, s, line) for line, (k, s) in plain.items()), default=None)
        assert (first and (first[0], first[1], first[3])) == want
        assert {g: (e[0], e[1]) for g, e in index.filed.items()} == plain
        if ends:
            for _ in range(TIDY_EVERY):  # (a tidy: stale entries dropped once they outnumber)
                index.restore()
    live = [e for _, heap in index._heaps.values() for e in heap if index.filed.get(e[3]) is e]
    assert len(live) == len(plain) and {e[3] for e in live} == set(plain)
