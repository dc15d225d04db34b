"""Enforce a task's memory and CPU where this machine lets us, and say what was enforced.

Preferred: a cgroup v2 per task, with ``memory.max`` (the kernel kills the task when it goes
over; ``memory.oom.group`` takes the whole task down, as a container would) and ``cpu.max``
(a quota of cores). That needs a writable unified hierarchy with the memory and cpu
controllers, which hosts on cgroup v1 or hybrid hierarchies, and most unprivileged containers,
do not offer.

Fallback: an rlimit on the command. ``RLIMIT_DATA`` rather than ``RLIMIT_AS``: the address space
counts reservations that never use memory (CUDA reserves tens of GB of it, ``import torch``
maps gigabytes of libraries), so an address-space cap breaks ordinary GPU and PyTorch jobs,
while the data limit counts the writable private memory a program actually asks for (heap,
anonymous mappings, stacks). A program over it gets allocation failures rather than a kill.
There is no rlimit for a share of CPU, so CPU is then not enforced, and the record says so.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labhive.scheduler.executors.base import TaskKey

CGROUP_ROOT = Path("/sys/fs/cgroup")
_CONTROLLERS = ("memory", "cpu")
_CPU_PERIOD_US = 100_000
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class LimitSupport:
    """What this machine can enforce: a cgroup parent for tasks, or why there is none."""

    cgroup_parent: Path | None
    why_not_cgroup: str = ""


def detect(root: Path = CGROUP_ROOT, parent_name: str = "labhive") -> LimitSupport:
    """Find (or make) a cgroup v2 parent with memory and cpu delegated to its children."""
    if not (root / "cgroup.controllers").exists():
        hybrid = root / "unified"
        if (hybrid / "cgroup.controllers").exists():
            inner = detect(hybrid, parent_name)
            if inner.cgroup_parent is not None:
                return inner
            return LimitSupport(None, f"hybrid cgroup hierarchy: {inner.why_not_cgroup}")
        return LimitSupport(None, f"{root} is not a cgroup v2 (unified) hierarchy")
    available = (root / "cgroup.controllers").read_text().split()
    missing = [c for c in _CONTROLLERS if c not in available]
    if missing:
        return LimitSupport(None, f"cgroup v2 at {root} lacks the {'/'.join(missing)} controller")
    parent = root / parent_name
    try:
        parent.mkdir(exist_ok=True)
        _enable_controllers(root)
        _enable_controllers(parent)
        _probe(parent)
    except OSError as err:
        return LimitSupport(None, f"cannot set up task cgroups under {parent}: {err}")
    return LimitSupport(parent)


def _enable_controllers(cgroup: Path) -> None:
    enabled = (cgroup / "cgroup.subtree_control").read_text().split()
    wanted = [c for c in _CONTROLLERS if c not in enabled]
    if wanted:
        (cgroup / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))


def _probe(parent: Path) -> None:
    probe = parent / f"probe-{os.getpid()}"
    probe.mkdir(exist_ok=True)
    try:
        (probe / "memory.max").write_text("max")
        (probe / "cpu.max").write_text(f"max {_CPU_PERIOD_US}")
    finally:
        probe.rmdir()


def apply(support: LimitSupport, key: TaskKey, cpu: float, memory_mb: int) -> dict[str, Any]:
    """Prepare the task's limits; return the record for ``TaskHandle.info["limits"]``.

    The record doubles as the supervisor's instructions: ``cgroup`` to join, ``rlimits`` to set
    on the command before it runs.
    """
    memory = memory_mb * MIB
    if support.cgroup_parent is not None:
        with contextlib.suppress(OSError):
            return _cgroup(support.cgroup_parent, key, cpu, memory)
    return {
        "rlimits": {"RLIMIT_DATA": memory},
        "memory": {"enforced": True, "by": "rlimit-data", "bytes": memory},
        "cpu": {"enforced": False, "why": f"no cgroup: {support.why_not_cgroup}"},
    }


def _cgroup(parent: Path, key: TaskKey, cpu: float, memory: int) -> dict[str, Any]:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{key.job_id}-{key.attempt}-{key.role}-{key.index}")
    cgroup = parent / name
    cgroup.mkdir(exist_ok=True)
    (cgroup / "memory.max").write_text(str(memory))
    for optional, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
        with contextlib.suppress(OSError):
            (cgroup / optional).write_text(value)
    quota = max(1000, int(cpu * _CPU_PERIOD_US))
    (cgroup / "cpu.max").write_text(f"{quota} {_CPU_PERIOD_US}")
    return {
        "cgroup": str(cgroup),
        "memory": {"enforced": True, "by": "cgroup-v2", "bytes": memory},
        "cpu": {"enforced": True, "by": "cgroup-v2", "cores": cpu},
    }


def oom_killed(limits: dict[str, Any]) -> bool:
    """Whether the kernel killed something in the task's cgroup for going over memory.max."""
    if not limits.get("cgroup"):
        return False
    try:
        events = Path(limits["cgroup"], "memory.events").read_text().split()
    except OSError:
        return False
    counts = dict(zip(events[::2], events[1::2], strict=False))
    return int(counts.get("oom_kill", "0")) > 0


def release(limits: dict[str, Any]) -> None:
    """Remove the task's cgroup once its processes are gone (the kernel refuses before)."""
    if limits.get("cgroup"):
        with contextlib.suppress(OSError):
            Path(limits["cgroup"]).rmdir()
