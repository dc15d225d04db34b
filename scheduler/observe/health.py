"""Node health from NVML readings, as scheduler events.

A GPU that is lost, or that has had an uncorrectable (double-bit) ECC error since the driver
loaded, makes its node unfit for new work until it is reset; the scheduler learns this as a
``NodeDown`` with the reason, and a ``NodeUp`` once a later reading is clean. A critical XID is
an event rather than a state, so it holds the node down for ``hold_s`` after the last one: long
enough not to flap while an admin looks, short enough that a one-off does not bench the node
for good. Pure: readings and the previous verdict in, events and the new verdict out.
"""

from __future__ import annotations

from dataclasses import dataclass

from labhive.scheduler.core.model import NodeDown, NodeUp
from labhive.scheduler.observe.nvml import CRITICAL_XIDS, GpuReading, Sample

#: How long a critical XID keeps its node down after the last one.
XID_HOLD_S = 600.0


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """The last verdict on one node: ``reason`` is empty while it is up."""

    reason: str = ""
    xid_reason: str = ""
    xid_until: float = 0.0


def _name(gpu: GpuReading) -> str:
    return f"GPU {gpu.index} ({gpu.uuid})" if gpu.uuid else f"GPU {gpu.index}"


def gpu_problems(sample: Sample) -> list[str]:
    """What is wrong with the machine's GPUs right now, one phrase each."""
    if sample.error:
        return [f"NVML cannot read the GPUs: {sample.error}"]
    problems = []
    for gpu in sample.gpus:
        if gpu.lost:
            problems.append(f"{_name(gpu)} is lost (NVML: GPU is lost; reset or reboot needed)")
        elif gpu.ecc_dbe_volatile:
            problems.append(
                f"{_name(gpu)} had {gpu.ecc_dbe_volatile} uncorrectable (double-bit) ECC "
                "error(s) since the driver loaded"
            )
    return problems


def health(
    node: str,
    sample: Sample,
    previous: NodeHealth | None = None,
    *,
    hold_s: float = XID_HOLD_S,
    critical_xids: frozenset[int] = CRITICAL_XIDS,
) -> tuple[list[NodeDown | NodeUp], NodeHealth]:
    """Events for ``node`` given its latest ``sample``: ``NodeDown`` when it turns unhealthy,
    ``NodeUp`` when it turns healthy again, nothing while its state holds."""
    before = previous or NodeHealth()
    xids = [(g, x) for g in sample.gpus for x in g.new_xids if x in critical_xids]
    xid_reason, xid_until = before.xid_reason, before.xid_until
    if xids:
        xid_reason = "; ".join(f"{_name(g)} reported XID {x}" for g, x in xids)
        xid_until = sample.time + hold_s
    elif sample.time >= xid_until:
        xid_reason = ""
    reasons = gpu_problems(sample) + ([xid_reason] if xid_reason else [])
    reason = "; ".join(reasons)
    now = NodeHealth(reason=reason, xid_reason=xid_reason, xid_until=xid_until)
    if reason and not before.reason:
        return [NodeDown(node=node, time=sample.time, reason=reason)], now
    if not reason and before.reason:
        return [NodeUp(node=node, time=sample.time)], now
    return [], now
