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
- ``pids.max``, below a parent per service (``labhive/<scope>``) whose own ``pids.max`` caps all
  of the service's tasks together (``pids_budget``);
- ``devices``: the NVIDIA device nodes (char major 195) other than the task's own GPUs are
  denied, as nvidia-container-runtime does; a task without GPUs is denied the control and UVM
  nodes too. Opening a denied node fails with EPERM whatever its file mode.

GPU devices, preferably on cgroup v2 (which has no ``devices`` controller): a device filter, an
eBPF program (``devfilter.py``) attached to the task's own v2 cgroup, with the same rules. On a
pure v2 host that is the task's cgroup; on a hybrid host (v1 controllers plus an empty unified
hierarchy) a per-task cgroup in the unified hierarchy, which needs no controller, holds the
filter while the v1 controllers hold the rest. The v1 ``devices`` rules serve where no v2
cgroup can be made or the kernel refuses the program; where neither works, the record says why.

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
import functools
import hashlib
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labhive.scheduler.executors import devfilter
from labhive.scheduler.executors.base import TaskKey

CGROUP_ROOT = Path("/sys/fs/cgroup")
_CONTROLLERS = ("memory", "cpu")
_OPTIONAL_V2 = ("pids",)
V1_CONTROLLERS = ("memory", "cpu", "pids", "devices")
_CPU_PERIOD_US = 100_000
MIB = 1024 * 1024
NVIDIA_MAJOR = devfilter.NVIDIA_MAJOR
PID_MAX_FILE = Path("/proc/sys/kernel/pid_max")
#: Per-task pids bounds: threads count too (data loaders, BLAS pools), so never fewer than
#: this many; and never more than a fork bomb needs to show itself.
PIDS_TASK_FLOOR, PIDS_TASK_CEILING = 256, 16384


@dataclass(frozen=True, slots=True)
class PidsBudget:
    """Processes (threads included) one task, and all of one service's tasks, may have."""

    task: int
    service: int


def pids_budget(pid_max: int, slots: int) -> PidsBudget:
    """The host keeps a quarter of its pids (at least 4096) for itself and the service; the
    rest is the service's cap for all its tasks, shared evenly by the node's task ``slots``
    (each within ``PIDS_TASK_FLOOR``..``PIDS_TASK_CEILING``). With pid_max 32768 and 8 slots:
    service 24576, a task 3072. A task at its floor may exceed its share; the service cap
    still holds for all of them together."""
    reserve = max(4096, pid_max // 4)
    service = max(PIDS_TASK_FLOOR, pid_max - reserve)
    task = service // max(1, slots)
    return PidsBudget(min(PIDS_TASK_CEILING, max(PIDS_TASK_FLOOR, task)), service)


def host_pids_budget(slots: int, pid_max_file: Path = PID_MAX_FILE) -> PidsBudget:
    try:
        pid_max = int(pid_max_file.read_text())
    except (OSError, ValueError):
        pid_max = 32768  # the kernel's default
    return pids_budget(pid_max, slots)


#: A budget for callers that do not know the node (tests, benchmarks): this machine's CPUs.
DEFAULT_PIDS = host_pids_budget(os.cpu_count() or 1)
DEFAULT_PIDS_MAX = DEFAULT_PIDS.task


@dataclass(frozen=True, slots=True)
class LimitSupport:
    """What this machine can enforce: a cgroup v2 parent for tasks, else cgroup v1 parents
    (controller -> directory), and why v2 (or anything) is not available."""

    cgroup_parent: Path | None
    why_not_cgroup: str = ""
    v1: dict[str, Path] = field(default_factory=dict)
    #: Where a task's own v2 cgroup for its device filter is made when ``cgroup_parent`` is
    #: not there (a hybrid host), and why no device filter can be had, if none can.
    device_parent: Path | None = None
    why_not_filter: str = ""

    def devices_enforced(self) -> str:
        """How GPU devices are kept apart here, or "NOT enforced: why", for the banner."""
        if self.cgroup_parent is not None and not self.why_not_filter:
            return "enforced by a cgroup v2 device filter (eBPF) on each task's cgroup"
        if self.device_parent is not None:
            where = self.device_parent
            return f"enforced by a cgroup v2 device filter (eBPF) on task cgroups under {where}"
        if "devices" in self.v1:
            return "enforced by the cgroup v1 devices controller"
        why = self.why_not_filter or "no cgroup v2 here"
        return (
            f"NOT enforced ({why}; and no writable cgroup v1 devices controller): a task can open "
            "any NVIDIA device node its file mode allows, whatever GPUs it was given"
        )


def detect(root: Path = CGROUP_ROOT, parent_name: str = "labhive") -> LimitSupport:
    """cgroup v2 where it has the controllers, else cgroup v1 controllers, else nothing; and a
    cgroup v2 device filter wherever the kernel takes one."""
    v2 = _detect_v2(root, parent_name)
    if v2.cgroup_parent is not None:
        why = _probe_filter(v2.cgroup_parent)
        return LimitSupport(v2.cgroup_parent, why_not_filter=why)
    v1 = detect_v1(root, parent_name)
    device_parent, why = detect_device_parent(root, parent_name)
    return LimitSupport(None, v2.why_not_cgroup, v1, device_parent, why)


def detect_device_parent(
    root: Path = CGROUP_ROOT, parent_name: str = "labhive"
) -> tuple[Path | None, str]:
    """A parent, in the unified hierarchy below this process's own v2 cgroup, for per-task
    cgroups that hold nothing but a device filter; or why there is none."""
    unified = root if (root / "cgroup.controllers").exists() else root / "unified"
    if not (unified / "cgroup.procs").exists():
        return None, f"no cgroup v2 hierarchy at {root} or {unified}"
    own = _own_cgroups().get("", "/")  # the "0::<path>" line is the v2 one
    parent = unified / own.lstrip("/") / parent_name
    try:
        parent.mkdir(exist_ok=True)
    except OSError as err:
        return None, f"cannot make {parent}: {err}"
    why = _probe_filter(parent)
    return (None, why) if why else (parent, "")


def _probe_filter(parent: Path) -> str:
    """Why no device filter can be attached below ``parent`` (the kernel's reason), or ""."""
    probe = parent / f"devprobe-{os.getpid()}"
    try:
        probe.mkdir(exist_ok=True)
        try:
            devfilter.attach(probe, devfilter.DeviceRules(()))
        finally:
            probe.rmdir()
    except OSError as err:
        return f"the kernel refused a cgroup v2 device filter under {parent}: {err}"
    return ""


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
    mine = _own_cgroups()
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


def _own_cgroups() -> dict[str, str]:
    """controller -> this process's cgroup path, from ``/proc/self/cgroup`` ("" -> its v2 one)."""
    out = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(","):
                out[c] = path  # "" is the unified (v2) hierarchy's line, "0::<path>"
    return out


def _enable_controllers(cgroup: Path) -> None:
    """memory and cpu (required) and pids (where the hierarchy has it) for the children."""
    available = (cgroup / "cgroup.controllers").read_text().split()
    enabled = (cgroup / "cgroup.subtree_control").read_text().split()
    optional = [c for c in _OPTIONAL_V2 if c in available]
    wanted = [c for c in (*_CONTROLLERS, *optional) if c not in enabled]
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
    pids: PidsBudget = DEFAULT_PIDS,
) -> dict[str, Any]:
    """Prepare the task's limits; return the record for ``TaskHandle.info["limits"]``.

    The record doubles as the supervisor's instructions: ``cgroup``/``cgroups`` to join,
    ``rlimits`` to set on the command before it runs. ``gpus`` are device minors to leave
    open (none on a virtual cluster, whose GPUs are slots, not devices: such a task is denied
    every NVIDIA node, as it has no real GPU). ``scope`` (the service's) names the parent whose
    pids cap all the service's tasks share.
    """
    memory = memory_mb * MIB
    name = task_cgroup_name(key, scope)
    rules = devfilter.DeviceRules(() if virtual else tuple(gpus), devfilter.host_nvidia_majors())
    record: dict[str, Any] | None = None
    if support.cgroup_parent is not None:
        with contextlib.suppress(OSError):
            record = _cgroup(support.cgroup_parent, scope, name, cpu, memory, pids)
    if record is None and support.v1:
        record = _cgroup_v1(support, scope, name, cpu, memory, pids)
    if record is None:
        record = {
            "rlimits": {"RLIMIT_DATA": memory},
            "memory": {"enforced": True, "by": "rlimit-data", "bytes": memory},
            "cpu": {"enforced": False, "why": f"no cgroup: {support.why_not_cgroup}"},
            "pids": {"enforced": False, "why": f"no cgroup: {support.why_not_cgroup}"},
        }
    record["devices"] = _devices(support, record, name, rules)
    return record


def _cgroup(
    parent: Path, scope: str, name: str, cpu: float, memory: int, pids: PidsBudget
) -> dict[str, Any]:
    made: list[Path | None] = []

    def service_parent() -> Path:
        made[:] = [_v2_service_parent(parent, scope, pids)]
        return made[0] or parent

    cgroup = _in_parent(service_parent, name)
    service = made[0]
    (cgroup / "memory.max").write_text(str(memory))
    for optional, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
        with contextlib.suppress(OSError):
            (cgroup / optional).write_text(value)
    quota = max(1000, int(cpu * _CPU_PERIOD_US))
    (cgroup / "cpu.max").write_text(f"{quota} {_CPU_PERIOD_US}")
    record: dict[str, Any] = {
        "cgroup": str(cgroup),
        "memory": {"enforced": True, "by": "cgroup-v2", "bytes": memory},
        "cpu": {"enforced": True, "by": "cgroup-v2", "cores": cpu},
    }
    if service is not None:
        record["parents"] = [str(service)]
    try:
        (cgroup / "pids.max").write_text(str(pids.task))
        record["pids"] = {"enforced": True, "by": "cgroup-v2", "max": pids.task}
        if service is not None:
            record["pids"] |= {"service_max": pids.service, "service_cgroup": str(service)}
    except OSError as err:
        record["pids"] = {"enforced": False, "why": f"cgroup v2 pids.max: {err}"}
    return record


def _v2_service_parent(parent: Path, scope: str, pids: PidsBudget) -> Path | None:
    """``parent/<scope>``, its children given memory, cpu (and pids), its pids.max the
    service's cap; None (tasks directly under ``parent``) where it cannot be made."""
    if not scope:
        return None
    service = parent / scope
    try:
        service.mkdir(exist_ok=True)
        _enable_controllers(service)
    except OSError:
        return None
    with contextlib.suppress(OSError):
        (service / "pids.max").write_text(str(pids.service))
    return service


def _cgroup_v1(
    support: LimitSupport,
    scope: str,
    name: str,
    cpu: float,
    memory: int,
    pids: PidsBudget,
) -> dict[str, Any]:
    """One cgroup per available v1 controller; what is missing falls back or says why. The
    devices cgroup is made only when no v2 device filter can serve (``_devices``)."""
    setters: dict[str, Callable[[Path], dict[str, Any]]] = {
        "memory": lambda d: _v1_memory(d, memory),
        "cpu": lambda d: _v1_cpu(d, cpu),
        "pids": lambda d: _v1_pids(d, pids.task),
    }
    record: dict[str, Any] = {"cgroups": []}
    for controller, setter in setters.items():
        parent = support.v1.get(controller)
        if parent is None:
            record[controller] = {"enforced": False, "why": f"no cgroup v1 {controller} here"}
            continue
        try:
            if controller == "pids" and scope:
                service = parent / scope
                cap = functools.partial(_v1_service_parent, service, pids.service)
                cgroup = _in_parent(cap, name)
                record["parents"] = [str(service)]
            else:
                cgroup = parent / name
                cgroup.mkdir(exist_ok=True)
            record["cgroups"].append(str(cgroup))
            record[controller] = {"enforced": True, "by": "cgroup-v1", **setter(cgroup)}
        except OSError as err:
            record[controller] = {"enforced": False, "why": f"cgroup v1 {controller}: {err}"}
    if record["pids"].get("enforced") and "parents" in record:
        service = record["parents"][0]
        record["pids"] |= {"service_max": pids.service, "service_cgroup": service}
    if not record["memory"]["enforced"]:
        record["rlimits"] = {"RLIMIT_DATA": memory}
        why = record["memory"]["why"]
        record["memory"] = {"enforced": True, "by": "rlimit-data", "bytes": memory, "why": why}
    return record


def _v1_service_parent(service: Path, cap: int) -> Path:
    """The service's pids parent, its pids.max the cap for all its tasks (set at every
    launch: a parent removed with the service's last task comes back with its cap)."""
    service.mkdir(exist_ok=True)
    (service / "pids.max").write_text(str(cap))
    return service


def _in_parent(make_parent: Callable[[], Path], name: str, tries: int = 3) -> Path:
    """Make the parent (with its settings), then the task's cgroup in it; again when the
    release of the service's last task removed the parent in between."""
    for attempt in range(tries):
        cgroup = make_parent() / name
        try:
            cgroup.mkdir(exist_ok=True)
            return cgroup
        except FileNotFoundError:
            if attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


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


# ---- GPU devices ---------------------------------------------------------------------------


def _devices(
    support: LimitSupport, record: dict[str, Any], name: str, rules: devfilter.DeviceRules
) -> dict[str, Any]:
    """The device filter on the task's v2 cgroup (its own, or one made for the filter alone),
    else the v1 devices controller, else a record of why neither holds."""
    why = support.why_not_filter or (
        "the task's cgroup v2 could not be made" if support.cgroup_parent else "no cgroup v2 here"
    )
    target = None
    if record.get("cgroup") and not support.why_not_filter:
        target = Path(record["cgroup"])
    elif support.device_parent is not None:
        target = support.device_parent / name
    if target is not None:
        try:
            return _filter(target, record, rules)
        except OSError as err:
            why = f"cannot attach the device filter to {target}: {err}"
    v1 = support.v1.get("devices")
    if v1 is not None:
        try:
            cgroup = v1 / name
            cgroup.mkdir(exist_ok=True)
            record.setdefault("cgroups", []).append(str(cgroup))
            return {"enforced": True, "by": "cgroup-v1", **_v1_devices(cgroup, rules)}
        except OSError as err:
            why += f"; cgroup v1 devices: {err}"
    return {"enforced": False, "why": why}


def _filter(target: Path, record: dict[str, Any], rules: devfilter.DeviceRules) -> dict[str, Any]:
    own = str(target) == record.get("cgroup")
    if not own:
        target.mkdir(exist_ok=True)
    try:
        attached = devfilter.attach(target, rules)
    except OSError:
        if not own:
            with contextlib.suppress(OSError):
                target.rmdir()
        raise
    if not own:  # the supervisor joins it with the v1 ones; release removes it
        record.setdefault("cgroups", []).append(str(target))
    return {
        "enforced": True,
        "by": "cgroup-v2-bpf",
        "granted_gpus": sorted(rules.gpus),
        "denied": rules.denied(),
        "cgroup": str(target),
        "prog_id": attached.prog_id,
    }


def _v1_devices(cgroup: Path, rules: devfilter.DeviceRules) -> dict[str, Any]:
    """Deny the NVIDIA nodes that are not the task's (the default stays allow-all for the
    rest: /dev/null, ttys, ...), the same rules as the v2 filter's."""
    deny = cgroup / "devices.deny"
    if rules.gpus:
        for minor in devfilter.GPU_MINORS:
            if minor not in rules.gpus:
                _write_rule(deny, f"c {NVIDIA_MAJOR}:{minor} rwm")
    else:
        _write_rule(deny, f"c {NVIDIA_MAJOR}:* rwm")
        if rules.majors.uvm is not None:
            _write_rule(deny, f"c {rules.majors.uvm}:* rwm")
    for major in rules.majors.others:
        _write_rule(deny, f"c {major}:* rwm")
    return {"granted_gpus": sorted(rules.gpus), "denied": rules.denied()}


def _write_rule(path: Path, rule: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, rule.encode())
    finally:
        os.close(fd)


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
    for parent in limits.get("parents", ()):  # the service's: busy while others run (EBUSY)
        with contextlib.suppress(OSError):
            Path(parent).rmdir()
