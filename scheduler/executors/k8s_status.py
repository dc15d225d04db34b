"""Reading what the API says about pods and nodes: how a task ended, whether a node is usable.

Pure functions over the API's JSON (the dicts the server sends), so the rules sit in one place
and read like the API documentation they follow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from labhive.scheduler.executors.k8s_objects import CONTAINER

#: Pod ``status.reason`` values for pods the node or the control plane took away: the task did
#: nothing wrong, so its job goes back to the queue without spending a retry.
_LOST_REASONS = frozenset(
    {
        "Evicted",
        "NodeLost",
        "Preempting",
        "Shutdown",
        "Terminated",
        "NodeShutdown",
        "NodeAffinity",
        "UnexpectedAdmissionError",
    }
)
#: Container waiting reasons that never resolve by themselves.
_FATAL_WAITING = frozenset(
    {"InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError", "CreateContainerError"}
)
#: Waiting reasons that may resolve (a registry hiccup) but are given up after a grace time.
_SLOW_WAITING = frozenset({"ErrImagePull", "ImagePullBackOff"})


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a pod's task ended; ``delete`` when the pod would otherwise sit there forever."""

    exit_code: int | None
    reason: str
    requeue: bool = False
    delete: bool = False


def _main_status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    cs: Mapping[str, Any]
    for cs in (pod.get("status") or {}).get("containerStatuses") or ():
        if cs.get("name") == CONTAINER:
            return cs
    return {}


def _disruption(pod: Mapping[str, Any]) -> str | None:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return str(cond.get("reason") or "DisruptionTarget")
    return None


def _join(*parts: object) -> str:
    return ": ".join(str(p) for p in parts if p)


def pod_outcome(
    pod: Mapping[str, Any], pending_for_s: float = 0.0, pull_grace_s: float = 300.0
) -> Outcome | None:
    """The task's end as the pod shows it, or None while it still runs (or may yet run)."""
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase == "Succeeded":
        return Outcome(0, "Succeeded")
    if phase == "Failed":
        reason = status.get("reason")
        lost = _disruption(pod)
        if lost or reason in _LOST_REASONS or str(reason or "").startswith("OutOf"):
            return Outcome(None, _join(lost or reason, status.get("message")), requeue=True)
        ended = (_main_status(pod).get("state") or {}).get("terminated") or {}
        if "exitCode" in ended:
            return Outcome(int(ended["exitCode"]), _join(ended.get("reason"), ended.get("message")))
        return Outcome(None, _join(reason or "Failed", status.get("message")))
    if phase == "Pending":
        waiting = (_main_status(pod).get("state") or {}).get("waiting") or {}
        why = waiting.get("reason")
        if why in _FATAL_WAITING or (why in _SLOW_WAITING and pending_for_s >= pull_grace_s):
            return Outcome(None, _join(why, waiting.get("message")), delete=True)
    return None


def node_gpus(node: Mapping[str, Any], resource: str) -> int:
    raw = ((node.get("status") or {}).get("allocatable") or {}).get(resource, "0")
    try:
        return int(str(raw))
    except ValueError:
        return 0


def node_problem(
    node: Mapping[str, Any] | None, want_gpus: int, gpu_resource: str | None
) -> str | None:
    """Why the scheduler must not use this node (HiveD's "bad node"), or None when it is fine.

    A cordoned node counts as bad, as in HiveD: an admin cordons before maintenance.
    """
    if node is None:
        return "not in the Kubernetes API (no Node object with that name)"
    ready = next(
        (c for c in (node.get("status") or {}).get("conditions") or () if c.get("type") == "Ready"),
        None,
    )
    if ready is None or ready.get("status") != "True":
        detail = (ready or {}).get("message") or (ready or {}).get("reason") or "no Ready condition"
        return f"not Ready: {detail}"
    if (node.get("spec") or {}).get("unschedulable"):
        return "cordoned (spec.unschedulable)"
    if gpu_resource and want_gpus:
        have = node_gpus(node, gpu_resource)
        if have < want_gpus:
            return (
                f"allocatable {gpu_resource} is {have}, the cluster config gives it {want_gpus}"
                " (is the device plugin running?)"
            )
    return None
