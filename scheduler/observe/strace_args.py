"""Structured reading of a call's argument text, done only when asked (it costs far more than
parsing the line).

:func:`split_args` cuts the text at top-level commas, respecting strings, ``{}``, ``[]``,
``()``, ``/* comments */`` and -y ``<paths>``. :func:`parse_value` turns one argument into
Python values:

- ``"ab\\n\\x7f"...`` -> :class:`StraceString` (the bytes, decoded from C escapes, and whether
  strace cut it short with ``...``)
- ``{st_mode=S_IFREG|0644, st_size=33715, ...}`` -> dict (``...`` elided fields -> key ``"..."``)
- ``[{fd=4, events=POLLIN}]`` -> list; ``[[VINTR]=0x3, ...]`` -> dict; ``~[RTMIN RT_1]`` -> str
- ``3</dev/nvidiactl<char 195:255>>`` -> :class:`Fd`
- ``123``, ``-1``, ``0x7f00``, ``0644`` -> int; ``NULL`` -> None
- ``0x80000 /* O_RDONLY|O_CLOEXEC */`` -> the value before the comment
- anything else (flags ``A|B``, ``makedev(0x88, 0)``, ``_IOC(...)``, names) -> its text
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_OPEN = {"{": "}", "[": "]", "(": ")"}
_CLOSE = set(_OPEN.values())
_ESCAPES = {"n": 10, "t": 9, "r": 13, "v": 11, "f": 12, "a": 7, "b": 8, "\\": 92, '"': 34, "'": 39}
_INT_RE = re.compile(r"-?(?:0x[0-9a-fA-F]+|\d+)$")
_NAMED_RE = re.compile(r"([A-Za-z_][\w.]*|\[[^\]]*\])=(.*)$", re.S)
_FD_RE = re.compile(r"(-?\d+)<(.*)>$", re.S)


@dataclass(frozen=True, slots=True)
class StraceString:
    """A string argument: its bytes and whether strace printed only a prefix (``"..."...``)."""

    value: bytes
    truncated: bool = False

    @property
    def text(self) -> str:
        return self.value.decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class Fd:
    """A descriptor with its -y path; ``detail`` is what -yy adds (``char 195:255``)."""

    fd: int
    path: str
    detail: str | None = None


def split_args(text: str) -> list[str]:
    """Top-level comma-separated pieces of an argument list (whitespace-stripped)."""
    out: list[str] = []
    depth = 0
    angle = 0
    start = 0
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            i = _skip_string(text, i)
            continue
        if ch == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(0, depth - 1)
        elif ch == "<" and i > 0 and (text[i - 1].isalnum() or text[i - 1] in "/>" or angle):
            angle += 1
        elif ch == ">" and angle:
            angle -= 1
        elif ch == "," and depth == 0 and angle == 0:
            out.append(text[start:i].strip())
            start = i + 1
        i += 1
    last = text[start:].strip()
    if last or out:
        out.append(last)
    return out


def _skip_string(text: str, i: int) -> int:
    """Index just past the string starting at ``text[i] == '"'`` (and a ``...`` after it)."""
    j = i + 1
    n = len(text)
    while j < n:
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch == '"':
            j += 1
            if text.startswith("...", j):
                j += 3
            return j
        j += 1
    return n


def decode_c_string(body: str) -> bytes:
    """The bytes a C string literal body stands for (``\\x7f``, ``\\177``, ``\\n``, UTF-8)."""
    if "\\" not in body:  # most paths and names
        return body.encode("utf-8", errors="surrogateescape")
    out = bytearray()
    i = 0
    n = len(body)
    while i < n:
        ch = body[i]
        if ch != "\\" or i + 1 >= n:
            out += ch.encode("utf-8", errors="surrogateescape")
            i += 1
            continue
        nxt = body[i + 1]
        if nxt == "x":
            m = re.match(r"[0-9a-fA-F]{1,2}", body[i + 2 : i + 4])
            if m:
                out.append(int(m.group(0), 16))
                i += 2 + len(m.group(0))
                continue
        elif nxt in "01234567":
            m = re.match(r"[0-7]{1,3}", body[i + 1 : i + 4])
            assert m is not None
            out.append(int(m.group(0), 8) & 0xFF)
            i += 1 + len(m.group(0))
            continue
        elif nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
            continue
        out += nxt.encode("utf-8", errors="surrogateescape")
        i += 2
    return bytes(out)


def _strip_comment(text: str) -> str:
    """``0x80000 /* O_RDONLY */`` -> ``0x80000``; a lone comment is kept."""
    i = text.find("/*")
    if i > 0 and text.rstrip().endswith("*/") and '"' not in text[:i]:
        return text[:i].rstrip()
    return text


def parse_value(text: str) -> Any:
    """One argument (or struct field value) as a Python value; never raises."""
    text = _strip_comment(text.strip())
    if not text:
        return ""
    head = text[0]
    if head == '"':
        end = _skip_string(text, 0)
        if end == len(text):
            truncated = text.endswith('"...')
            body = text[1 : -4 if truncated else -1]
            return StraceString(decode_c_string(body), truncated)
        return text  # a string followed by more (e.g. "a" "b"): keep as written
    if head == "{" and text.endswith("}"):
        return _parse_struct(text[1:-1])
    if head == "[" and text.endswith("]"):
        return _parse_array(text[1:-1])
    if text == "NULL":
        return None
    if text == "...":
        return ...
    if _INT_RE.match(text):
        neg = text.startswith("-")
        digits = text[1:] if neg else text
        if digits.startswith("0x"):
            value = int(digits, 16)
        elif len(digits) > 1 and digits.startswith("0") and digits.isdigit():
            value = int(digits, 8) if set(digits) <= set("01234567") else int(digits)
        else:
            value = int(digits)
        return -value if neg else value
    fm = _FD_RE.match(text)
    if fm is not None:
        inner = fm.group(2)
        detail = None
        if inner.endswith(">") and "<" in inner:
            k = inner.index("<")
            inner, detail = inner[:k], inner[k + 1 : -1]
        return Fd(int(fm.group(1)), inner, detail)
    return text


def _parse_struct(body: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n, item in enumerate(split_args(body)):
        if item == "...":
            out["..."] = ...
            continue
        m = _NAMED_RE.match(item)
        if m is None:
            out[f"#{n}"] = parse_value(item)
        else:
            out[m.group(1)] = parse_value(m.group(2))
    return out


def _parse_array(body: str) -> list[Any] | dict[str, Any]:
    items = split_args(body)
    if items and all(i.startswith("[") and "]=" in i for i in items if i != "..."):
        designated: dict[str, Any] = {}
        for item in items:
            if item == "...":
                designated["..."] = ...
                continue
            key, _, value = item.partition("]=")
            designated[key[1:]] = parse_value(value)
        return designated
    if len(items) == 1 and " " in items[0] and not items[0].startswith(('"', "{", "[")):
        return items[0].split()  # a signal set or bit list: [HUP INT] / [3 4]
    return [parse_value(i) for i in items]


def parse_args(text: str) -> list[Any]:
    """All arguments of a call; ``name=value`` arguments (clone's) become one-entry dicts."""
    out: list[Any] = []
    for item in split_args(text):
        m = _NAMED_RE.match(item)
        if m is not None and not item.startswith(("[", '"')):
            out.append({m.group(1): parse_value(m.group(2))})
        else:
            out.append(parse_value(item))
    return out


def to_jsonable(value: Any) -> Any:
    """A parsed value with strings, fds and ``...`` made JSON-friendly."""
    if isinstance(value, StraceString):
        return {"str": value.text, "truncated": value.truncated}
    if isinstance(value, Fd):
        return {"fd": value.fd, "path": value.path, "detail": value.detail}
    if value is ...:
        return "..."
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_jsonable(v) for v in value]
    return value
