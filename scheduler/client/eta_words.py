"""A waiting job's estimate in words, as the CLI, the kernel extension and the spawn page show
it: the service sends numbers (``eta``, ``eta_low``, ``eta_high``) or what the job waits for,
and each reader words them here, against its own clock. Client-side, so a notebook kernel that
imports the client pulls in none of the forecast (``scheduler/forecast/eta.py``) that made them.
"""

from __future__ import annotations


def eta_text(eta: float, low: float, high: float, now: float) -> str:
    """ "starts in ~25 min (10-50)": the range in the estimate's unit, from ``now``.

    An estimate read after its low end or its middle passed (forecast a while ago; the job
    still waits, so what it waits for has not ended yet) says only what is left of it,
    never "~0 s (0-40)": "starts in ~25 s (up to 40)", "starts within ~40 s"."""
    mid, lo, hi = (max(0.0, x - now) for x in (eta, low, high))
    if hi < 1:
        return "starts now"
    shown = mid if mid >= 1 else hi
    unit, size = ("s", 1) if shown < 90 else ("min", 60) if shown < 90 * 60 else ("h", 3600)
    a, b, c = (round(x / size) for x in (mid, lo, hi))
    if mid < 1:
        return f"starts within ~{c} {unit}"
    if lo < 1:
        return f"starts in ~{a} {unit}" + (f" (up to {c})" if c != a else "")
    return f"starts in ~{a} {unit}" + (f" ({b}-{c})" if b != c else "")


def no_estimate_text(waits_for: str) -> str:
    """ "waits for a notebook server in VC default to stop; no estimate"."""
    return f"waits for {waits_for}; no estimate"
