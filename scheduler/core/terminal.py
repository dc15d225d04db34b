"""Text bound for a terminal: what a user typed into a job name must not drive the screen.

Job names, reasons, users and VCs come from other users; printed raw, an escape sequence in one
of them clears an admin's screen or paints fake rows. ``visible`` shows every control character
as its Python escape (``\\x1b[2J`` prints as the eight characters ``\\x1b[2J``), so the text is
still readable and nothing is hidden.
"""

from __future__ import annotations

import re
from typing import Any

#: C0 controls, DEL and C1 controls (the 8-bit CSI ``\x9b`` starts escape sequences too), plus
#: the Unicode line and paragraph separators and bidirectional overrides that reorder a row.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def visible(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every control character written as an escape; ``keep_newlines`` leaves
    ``\\n`` alone (multi-line output the program itself laid out)."""
    if keep_newlines:
        return "\n".join(_CONTROL.sub(_escape, part) for part in text.split("\n"))
    return _CONTROL.sub(_escape, text)


def visible_tree(data: Any) -> Any:
    """``data`` (JSON-like: mappings, lists, text) with :func:`visible` applied to every text."""
    if isinstance(data, str):
        return visible(data)
    if isinstance(data, dict):
        return {key: visible_tree(value) for key, value in data.items()}
    if isinstance(data, list):
        return [visible_tree(item) for item in data]
    return data
