"""Buddy feasibility: can a set of free cells still hold a set of requested cells?

HiveD's guarantee rests on one counting argument. Within a chain every level has one cell type,
so free cells and requested cells can be counted per level. Walking from the top level down,
whatever is left over at one level splits into ``child_number`` cells of the next; the request
fits exactly when no level runs short. The config loader uses it to refuse over-committed VCs,
and the core uses it before binding a VC's cell anywhere other than where plain buddy
allocation would (safe relaxed buddy allocation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def first_short_level(
    levels: Sequence[int],
    child_number: Mapping[int, int],
    supply: Mapping[int, int],
    demand: Mapping[int, int],
) -> tuple[int, int, int] | None:
    """The first level, top down, where demand exceeds supply, as (level, need, have).

    ``levels`` lists the chain's levels top first; ``child_number[l]`` is how many level
    ``l - 1`` cells one level ``l`` cell splits into. None when everything fits.
    """
    carry = 0
    for level in levels:
        have = carry + supply.get(level, 0)
        need = demand.get(level, 0)
        if need > have:
            return level, need, have
        carry = (have - need) * child_number.get(level, 0)
    return None
