"""A request's JSON body, parsed with a bound on how deeply it nests.

A body such as ``[[[[...]]]]`` 100,000 levels deep made ``json.loads`` raise ``RecursionError``
(a 500); one a few hundred levels deep parsed, was stored in a job's spec and made every later
``GET /jobs/{id}`` of that job a 500 (the answer is built recursively). No job needs more than a
handful of levels (OpenPAI's deepest key, ``extras.hivedScheduler.taskRoles.ROLE.skuType``, is
five), so a body nested deeper than ``MAX_DEPTH`` is refused (400) before anything reads it.
"""

from __future__ import annotations

import json
from typing import Any

#: The most levels of arrays and objects a body may nest (a job uses five or six).
MAX_DEPTH = 32
TOO_DEEP = (
    f"the JSON body nests arrays/objects more than {MAX_DEPTH} levels deep; "
    "no request needs more than a handful (a job's fields are in docs/service.md)"
)


class TooDeep(ValueError):
    """The body nests deeper than ``MAX_DEPTH`` (400)."""

    def __init__(self) -> None:
        super().__init__(TOO_DEEP)


def loads(raw: bytes) -> Any:
    """The document in ``raw``; ``TooDeep`` when it nests too deeply, ``ValueError`` when it
    is no JSON."""
    try:
        doc = json.loads(raw)
    except RecursionError:  # the C decoder's own bound (about 1,000 levels)
        raise TooDeep() from None
    # Each level opens with a bracket, so a body with few brackets (every job) is not walked;
    # brackets inside strings only make the count larger.
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and deeper_than(doc, MAX_DEPTH):
        raise TooDeep()
    return doc


def deeper_than(doc: Any, limit: int) -> bool:
    """Whether ``doc`` nests lists/dicts more than ``limit`` levels (an explicit stack: no
    recursion however deep it is)."""
    if not isinstance(doc, dict | list):
        return False
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        items = value.values() if isinstance(value, dict) else value
        for item in items:
            if isinstance(item, dict | list):
                if depth >= limit:
                    return True
                stack.append((item, depth + 1))
    return False
