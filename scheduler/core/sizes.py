"""Byte sizes as admins write them ("100M", "10G", "512k", "off") and as messages show them.

Binary units throughout (``M`` is MiB): the caps and quotas they set are compared with what
``stat`` and ``statvfs`` report in bytes, and "100 MiB" in a notice must mean what the option said.
"""

from __future__ import annotations

import re

MIB = 1024 * 1024
_UNITS = {"": 1, "b": 1, "k": 1024, "m": MIB, "g": 1024 * MIB, "t": 1024 * 1024 * MIB}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)
#: What turns a cap or quota off.
OFF = ("off", "none", "0")
HOW = 'a size like "100M", "10G", "512k" (binary units), or "off"'


def parse_size(text: str, *, allow_off: bool = True) -> int | None:
    """Bytes from ``text``; None for "off" (when allowed). ValueError saying the forms else."""
    raw = text.strip()
    if allow_off and raw.lower() in OFF:
        return None
    match = _SIZE.fullmatch(raw)
    if match is None:
        raise ValueError(f"must be {HOW}, got {text!r}")
    value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if value <= 0:
        raise ValueError(f"must be more than 0 bytes ({HOW}), got {text!r}")
    return value


def show_size(n: int) -> str:
    """Shown in the largest unit that divides it evenly ("100 MiB", "10 GiB", "512 KiB",
    "37 bytes"); a MiB or more that none divides in MiB with one decimal ("7.9 MiB")."""
    for unit, factor in (("TiB", _UNITS["t"]), ("GiB", _UNITS["g"]), ("MiB", MIB)):
        if n >= factor and n % factor == 0:
            return f"{n // factor} {unit}"
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    return f"{n // 1024} KiB" if n >= 1024 and n % 1024 == 0 else f"{n} bytes"
