"""Enforce a task's memory, CPU, process count and GPU devices where this machine lets us, and
say what was enforced and how.

Preferred: a cgroup v2 per task, with ``memory.max`` (the kernel kills the task when it goes
over; ``memory.oom.group`` takes the whole task down, as a container would) and ``cpu.max``
(a quota of cores). That needs a writable unified hierarchy with the memory and cpu
controllers, which hosts on cgroup v1 or hybrid hierarchies, and most unprivileged containers,
do not offer.

Next: cgroup v1, one directory per task under each controller that is mounted and writable
(``/sys/fs/cgroup/<controller>/``, below this process's own cgroup there):
- ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` where swap is accounted):
  anonymous memory, page cache and shared memory (tmpfs, ``/dev/shm``) all count, so a task
  cannot escape its limit through shared memory as it can an rlimit; over it, the kernel's OOM
  killer kills the task and ``memory.oom_control`` counts the kill;
- ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``: a quota of cores;
- ``pids.max``: a fork bomb stops at the limit;
- ``devices``: the NVIDIA device nodes (char major 195) other than the task's own GPUs are
  denied, as nvidia-container-runtime does; a task without GPUs is denied the control and UVM
  nodes too. Opening a denied node fails with EPERM whatever its file mode.

Fallback: an rlimit on the command. ``RLIMIT_DATA`` rather than ``RLIMIT_AS``: the address space
counts reservations that never use memory (CUDA reserves tens of GB of it, ``import torch``
maps gigabytes of libraries), so an address-space cap breaks ordinary GPU and PyTorch jobs,
while the data limit counts the writable private memory a program actually asks for (heap,
anonymous mappings, stacks). A program over it gets allocation failures rather than a kill,
and shared memory escapes it. There is no rlimit for a share of CPU, so CPU is then not
enforced, and the record says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labhive.scheduler.executors.base import TaskKey

CGROUP_ROOT = Path("/sys/fs/cgroup")
_CONTROLLERS = ("memory", "cpu")
V1_CONTROLLERS = ("memory", "cpu", "pids", "devices")
_CPU_PERIOD_US = 100_000
MIB = 1024 * 1024
DEFAULT_PIDS_MAX = 16384  # threads count too: generous for data loaders, stops a fork bomb
NVIDIA_MAJOR = 195
#: /dev/nvidia0.. are minors 0..253; 254 is nvidia-modeset, 255 nvidiactl.
_NVIDIA_GPU_MINORS = range(0, 254)
_NVIDIA_SHARED_MINORS = (254, 255)


@dataclass(frozen=True, slots=True)
class LimitSupport:
    """What this machine can enforce: a cgroup v2 parent for tasks, else cgroup v1 parents
    (controller -> directory), and why v2 (or anything) is not available."""

    cgroup_parent: Path | None
    why_not_cgroup: str = ""
    v1: dict[str, Path] = field(default_factory=dict)


def detect(root: Path = CGROUP_ROOT, parent_name: str = "labhive") -> LimitSupport:
    """cgroup v2 where it has the controllers, else cgroup v1 controllers, else nothing."""
    v2 = _detect_v2(root, parent_name)
    if v2.cgroup_parent is not None:
        return v2
    v1 = detect_v1(root, parent_name)
    return LimitSupport(None, v2.why_not_cgroup, v1)


def _detect_v2(root: Path, parent_name: str) -> LimitSupport:
    """Find (or make) a cgroup v2 parent with memory and cpu delegated to its children."""
    if not (root / "cgroup.controllers").exists():
        hybrid = root / "unified"
        if (hybrid / "cgroup.controllers").exists():
            inner = _detect_v2(hybrid, parent_name)
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


def detect_v1(root: Path = CGROUP_ROOT, parent_name: str = "labhive") -> dict[str, Path]:
    """The v1 controllers mounted and writable here: controller -> a parent for task cgroups,
    made below this process's own cgroup of that controller."""
    found = {}
    mine = _own_v1_cgroups()
    for controller in V1_CONTROLLERS:
        mount = root / controller
        if not (mount / "cgroup.procs").exists():
            continue
        parent = mount / mine.get(controller, "").lstrip("/") / parent_name
        probe = parent / f"probe-{os.getpid()}"
        try:
            parent.mkdir(exist_ok=True)
            probe.mkdir(exist_ok=True)
            probe.rmdir()
        except OSError:
            continue
        found[controller] = parent
    return found


def _own_v1_cgroups() -> dict[str, str]:
    """controller -> this process's cgroup path, from ``/proc/self/cgroup``."""
    out = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(","):
                if c:
                    out[c] = path
    return out


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


def scope_name(data_dir: Path) -> str:
    """A short name for one service's tasks, so that two services (or two test runs) on one
    machine never share a task cgroup even when their job ids coincide."""
    return "d" + hashlib.sha1(str(data_dir).encode()).hexdigest()[:10]


def task_cgroup_name(key: TaskKey, scope: str = "") -> str:
    name = f"{key.job_id}-{key.attempt}-{key.role}-{key.index}"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{scope}-{name}" if scope else name)


def apply(
    support: LimitSupport,
    key: TaskKey,
    cpu: float,
    memory_mb: int,
    *,
    gpus: Sequence[int] = (),
    scope: str = "",
    virtual: bool = True,
    pids_max: int = DEFAULT_PIDS_MAX,
) -> dict[str, Any]:
    """Prepare the task's limits; return the record for ``TaskHandle.info["limits"]``.

    The record doubles as the supervisor's instructions: ``cgroup``/``cgroups`` to join,
    ``rlimits`` to set on the command before it runs. ``gpus`` are device minors to leave
    open (none on a virtual cluster, whose GPUs are slots, not devices).
    """
    memory = memory_mb * MIB
    name = task_cgroup_name(key, scope)
    if support.cgroup_parent is not None:
        with contextlib.suppress(OSError):
            return _cgroup(support.cgroup_parent / name, cpu, memory)
    if support.v1:
        granted = () if virtual else tuple(gpus)
        return _cgroup_v1(support, name, cpu, memory, granted, pids_max)
    return {
        "rlimits": {"RLIMIT_DATA": memory},
        "memory": {"enforced": True, "by": "rlimit-data", "bytes": memory},
        "cpu": {"enforced": False, "why": f"no cgroup: {support.why_not_cgroup}"},
    }


def _cgroup(cgroup: Path, cpu: float, memory: int) -> dict[str, Any]:
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


def _cgroup_v1(
    support: LimitSupport,
    name: str,
    cpu: float,
    memory: int,
    gpus: tuple[int, ...],
    pids_max: int,
) -> dict[str, Any]:
    """One cgroup per available v1 controller; what is missing falls back or says why."""
    setters: dict[str, Callable[[Path], dict[str, Any]]] = {
        "memory": lambda d: _v1_memory(d, memory),
        "cpu": lambda d: _v1_cpu(d, cpu),
        "pids": lambda d: _v1_pids(d, pids_max),
        "devices": lambda d: _v1_devices(d, gpus),
    }
    record: dict[str, Any] = {"cgroups": []}
    for controller, setter in setters.items():
        parent = support.v1.get(controller)
        if parent is None:
            record[controller] = {"enforced": False, "why": f"no cgroup v1 {controller} here"}
            continue
        cgroup = parent / name
        try:
            cgroup.mkdir(exist_ok=True)
            record["cgroups"].append(str(cgroup))
            record[controller] = {"enforced": True, "by": "cgroup-v1", **setter(cgroup)}
        except OSError as err:
            record[controller] = {"enforced": False, "why": f"cgroup v1 {controller}: {err}"}
    if not record["memory"]["enforced"]:
        record["rlimits"] = {"RLIMIT_DATA": memory}
        why = record["memory"]["why"]
        record["memory"] = {"enforced": True, "by": "rlimit-data", "bytes": memory, "why": why}
    return record


def _v1_memory(cgroup: Path, memory: int) -> dict[str, Any]:
    (cgroup / "memory.limit_in_bytes").write_text(str(memory))
    swap = False
    with contextlib.suppress(OSError):  # absent unless the kernel accounts swap
        (cgroup / "memory.memsw.limit_in_bytes").write_text(str(memory))
        swap = True
    return {
        "bytes": memory,
        "cgroup": str(cgroup),
        "counts": "anonymous memory, page cache and shared memory (tmpfs, /dev/shm)"
        + (", swap included" if swap else ""),
    }


def _v1_cpu(cgroup: Path, cpu: float) -> dict[str, Any]:
    quota = max(1000, int(cpu * _CPU_PERIOD_US))
    (cgroup / "cpu.cfs_period_us").write_text(str(_CPU_PERIOD_US))
    (cgroup / "cpu.cfs_quota_us").write_text(str(quota))
    return {"cores": cpu, "quota_us": quota, "period_us": _CPU_PERIOD_US}


def _v1_pids(cgroup: Path, pids_max: int) -> dict[str, Any]:
    (cgroup / "pids.max").write_text(str(pids_max))
    return {"max": pids_max}


def _v1_devices(cgroup: Path, gpus: tuple[int, ...]) -> dict[str, Any]:
    """Deny the NVIDIA nodes that are not the task's (the default stays allow-all for the
    rest: /dev/null, ttys, ...)."""
    deny = cgroup / "devices.deny"
    uvm = nvidia_uvm_major()
    if not gpus:
        _write_rule(deny, f"c {NVIDIA_MAJOR}:* rwm")
        if uvm is not None:
            _write_rule(deny, f"c {uvm}:* rwm")
        denied = f"every NVIDIA device (major {NVIDIA_MAJOR}" + (f", uvm {uvm})" if uvm else ")")
        return {"granted_gpus": [], "denied": denied}
    for minor in _NVIDIA_GPU_MINORS:
        if minor not in gpus:
            _write_rule(deny, f"c {NVIDIA_MAJOR}:{minor} rwm")
    return {
        "granted_gpus": sorted(gpus),
        "denied": f"/dev/nvidia* (major {NVIDIA_MAJOR}) but its own GPUs, nvidiactl, "
        "nvidia-modeset and nvidia-uvm",
    }


def _write_rule(path: Path, rule: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, rule.encode())
    finally:
        os.close(fd)


def nvidia_uvm_major(devices: Path = Path("/proc/devices")) -> int | None:
    """The char major of nvidia-uvm (dynamic: only /proc/devices knows it), if loaded."""
    with contextlib.suppress(OSError):
        for line in devices.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1] == "nvidia-uvm" and parts[0].isdigit():
                return int(parts[0])
    return None


def oom_killed(limits: dict[str, Any]) -> bool:
    """Whether the kernel killed something in the task's cgroup for going over its memory."""
    if limits.get("cgroup"):
        try:
            events = Path(limits["cgroup"], "memory.events").read_text().split()
        except OSError:
            return False
        counts = dict(zip(events[::2], events[1::2], strict=False))
        return int(counts.get("oom_kill", "0")) > 0
    memcg = (limits.get("memory") or {}).get("cgroup")
    if not memcg:
        return False
    try:
        control = Path(memcg, "memory.oom_control").read_text().split()
    except OSError:
        return False
    counts = dict(zip(control[::2], control[1::2], strict=False))
    return int(counts.get("oom_kill", "0")) > 0


def release(limits: dict[str, Any], timeout_s: float = 1.0) -> None:
    """Remove the task's cgroups once its processes are gone (the kernel refuses before; a
    process just reaped may linger for a moment, hence the short retry)."""
    paths = [p for p in [limits.get("cgroup"), *limits.get("cgroups", ())] if p]
    deadline = time.monotonic() + timeout_s
    for path in paths:
        while True:
            try:
                Path(path).rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.01)
