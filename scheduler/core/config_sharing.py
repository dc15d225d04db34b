"""LabHive's own top-level sections: ``gpuSharing`` (how GPU shares are enforced) and
``fairShare`` (fair share between a VC's users).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labhive.scheduler.core.config_fields import _Ctx, _int, _no_unknown
from labhive.scheduler.core.config_model import SHARING_MODES, FairShare, GpuSharing
from labhive.scheduler.core.yamlines import line_of


def _gpu_sharing(data: Mapping[str, Any], ctx: _Ctx) -> GpuSharing:
    """The top-level ``gpuSharing: mps`` or ``{mode: mps, gpuMemoryMB: 81920}``; left out or
    ``timeslice``: shares are a scheduling share only (nothing enforces them)."""
    raw = data.get("gpuSharing")
    if raw is None:
        return GpuSharing()
    line = line_of(data, "gpuSharing")
    memory = None
    if isinstance(raw, Mapping):
        _no_unknown(raw, {"mode", "gpuMemoryMB"}, "gpuSharing", ctx)
        if raw.get("gpuMemoryMB") is not None:
            memory = _int(raw["gpuMemoryMB"], "gpuSharing.gpuMemoryMB", line, ctx, 1)
        raw = raw.get("mode", "timeslice")
    if raw not in SHARING_MODES:
        raise ctx.error(
            "gpuSharing",
            line,
            f"must be one of {', '.join(SHARING_MODES)} (or {{mode: mps, gpuMemoryMB: N}}), got "
            f"{raw!r}; timeslice (the default) enforces nothing, mps runs shares as CUDA MPS "
            "clients with a thread percentage and a pinned memory limit each",
        )
    return GpuSharing(str(raw), memory)


def _fair_share(data: Mapping[str, Any], ctx: _Ctx) -> FairShare | None:
    """The top-level ``fairShare: {halfLife: 7d, reserveAfter: 1h, shares: {alice: 2}}``."""
    from labhive.scheduler.core.time_limits import parse_time_limit

    raw = data.get("fairShare")
    if raw is None:
        return None
    line = line_of(data, "fairShare")
    if not isinstance(raw, Mapping):
        raise ctx.error("fairShare", line, "must be a mapping such as {halfLife: 7d}")
    _no_unknown(raw, {"halfLife", "reserveAfter", "shares"}, "fairShare", ctx)
    times: list[float | None] = []
    for part, default in (("halfLife", 7 * 86400.0), ("reserveAfter", None)):
        value = raw.get(part, default)
        if part == "reserveAfter" and value in (None, "never"):
            times.append(None)
            continue
        try:
            times.append(parse_time_limit(value))
        except ValueError as err:
            raise ctx.error(f"fairShare.{part}", line, str(err)) from None
    shares = raw.get("shares") or {}
    if not isinstance(shares, Mapping):
        raise ctx.error("fairShare.shares", line, "must map user names to weights, e.g. {alice: 2}")
    weights = {}
    for user, weight in shares.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
            raise ctx.error(
                f"fairShare.shares.{user}", line, f"must be a number above 0, got {weight!r}"
            )
        weights[str(user)] = float(weight)
    half_life, reserve_after = times
    assert half_life is not None
    return FairShare(half_life, reserve_after, weights)
