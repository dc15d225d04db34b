"""Text the store kept but UTF-8 cannot encode, made showable.

A job stored before intake refused lone surrogates (a task role ``"w\\ud800"``) must still be
shown: pydantic and Starlette write UTF-8 and fail on such text (a 500 for ``GET /jobs/{id}``).
``encodable`` returns the same data with those characters escaped (``\\ud800`` as six visible
characters), leaving everything else as it is.
"""

from __future__ import annotations

from typing import Any


def encodable(value: Any) -> Any:
    """``value`` (str, list, dict, nested) with unencodable characters backslash-escaped."""
    if isinstance(value, str):
        if value.isascii():
            return value
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {encodable(k): encodable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encodable(v) for v in value]
    return value
