"""Run a task whose job names an image as an OCI container, through podman.

The local executor's supervisor model stays as it is: the supervisor runs ``podman run`` in the
foreground (no ``--rm``), and ``podman run``'s exit code is the container's, so ``exit.json``,
adoption after a kill -9 of the service and the grace period of a stop all work unchanged. What
this module adds is the ``podman run`` command line, the container's limits, and, once the task
ended, what ``podman inspect`` says about it (exit code, OOM kill) before the container is
removed.

What a container gets:
- its task's ``work/`` directory (``workdir.py``) bind-mounted as its working directory
  (``/labhive/task``), nothing else of the host's files (its records and logs stay outside):
  other users' job directories and the service's data directory are not in its mount
  namespace at all;
- its own pid, mount, ipc and uts namespaces; the host network (``--network host``), so a gang
  rendezvouses on ``MASTER_ADDR``/``MASTER_PORT`` as bare tasks do;
- the task's environment (``PAI_*``, rendezvous, ``CUDA_VISIBLE_DEVICES``), passed by name;
- its output through ``podman run``'s attached stdout/stderr into the supervisor's capped relay
  (``output.py``), and no copy in podman's log (``--log-driver none``);
- the task's OS user (``--user uid:gid``, as ``workdir.run_as`` decides), its ``HOME`` its
  working directory;
- only the device nodes of its own GPUs (``/dev/nvidiaN`` plus the control and UVM nodes), or
  their CDI names where nvidia-container-toolkit generated a CDI spec;
- umask 077 (``--umask``), as a bare task has (``sandbox_mounts.TASK_UMASK``): a file it
  creates, in its bind-mounted work dir too, is its user's alone unless it says otherwise;
- its own /dev/shm (its own ipc namespace) sized to its memory limit (``--shm-size``), as a
  bare task's private tmpfs is, not podman's 64 MB, and its pages count against that limit;
- ``--cpus`` as its cgroup's CPU quota, and ``--pids-limit`` the per-task pids cap the executor
  gives bare tasks (``limits.pids_budget``), not podman's own 2048. Memory: on cgroup v2,
  ``--memory`` (podman then reports an OOM kill in ``State.OOMKilled``); on cgroup v1, where
  conmon does not notice OOM kills and runc deletes the container's cgroup at exit, the limit is
  set on a parent cgroup LabHive creates (``--cgroup-parent``), whose peak usage survives the
  container and tells an OOM kill (SIGKILL at the limit) from other ends.

Runtime: ``runc`` on cgroup v1 or hybrid hosts (``crun`` refuses: "cgroups in hybrid mode not
supported"), ``crun`` on cgroup v2 hosts where it is installed. podman's default ulimits are
dropped (``default_ulimits = []`` in a ``containers.conf`` under the service's data directory,
given through ``CONTAINERS_CONF``): podman raises RLIMIT_NOFILE/NPROC by default, which
sandboxed hosts refuse.

``observe: strace`` traces ``podman run`` with ``strace -f``: that follows podman, conmon, runc
and the container's processes (the runtime's clone flags, mounts and pivot_root included).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labhive.scheduler.executors import limits, sandbox_mounts
from labhive.scheduler.executors.base import LaunchError, TaskKey, TaskLaunch

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONF_FILE = "containers.conf"
WORKDIR = "/labhive/task"
#: The shell a task's command runs in inside the image (every Debian and busybox image has it).
SHELL = "/bin/sh"
#: The pids limit of a task's container where the executor names none (``prepare``'s
#: ``pids_max``): the per-task share of this machine's pids that bare tasks get.
PIDS_LIMIT = limits.DEFAULT_PIDS_MAX
#: The parent (under each cgroup v1 controller) of the per-task parents that carry memory limits.
V1_PARENT = "labhive-containers"
MIB = 1024 * 1024
_NVIDIA_SHARED = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
_CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))


@dataclass(frozen=True, slots=True)
class Support:
    """How this host runs containers: podman's path, the OCI runtime, the cgroup version."""

    podman: str | None
    runtime: str
    cgroup_v1: bool
    why_not: str = ""


def detect(root: Path = CGROUP_ROOT) -> Support:
    """podman and the runtime that works on this host's cgroup hierarchy (see the docstring)."""
    v2 = (root / "cgroup.controllers").exists()
    runtime = "crun" if v2 and shutil.which("crun") else "runc"
    podman = shutil.which("podman")
    if podman is None:
        return Support(None, runtime, not v2, "podman is not installed: apt-get install podman")
    if shutil.which(runtime) is None:
        return Support(None, runtime, not v2, f"{runtime} is not installed: apt-get install runc")
    return Support(podman, runtime, not v2)


def write_conf(data_dir: Path, support: Support) -> Path:
    """The containers.conf every ``podman run`` of the service uses (see the docstring)."""
    path = data_dir / CONF_FILE
    text = (
        "# written by LabHive's local executor: the settings its task containers need\n"
        "[containers]\n"
        "default_ulimits = []\n"
        "[engine]\n"
        f'runtime = "{support.runtime}"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
    )
    if not path.exists() or path.read_text() != text:
        # a temporary name of this writer's own: two launches at once (actuation workers)
        # each replace the file whole, neither renames the other's temporary away
        tmp = path.with_name(f".{CONF_FILE}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return path


def container_name(key: TaskKey, scope: str = "") -> str:
    """``labhive-<scope>-<job>-<attempt>-<role>-<index>``: ``scope`` names the service (its data
    dir, ``limits.scope_name``), so two services on one host never share a container name."""
    raw = f"labhive-{scope + '-' if scope else ''}{key.job_id}-{key.attempt}-{key.role}-{key.index}"
    raw += f"-g{key.generation}" if key.generation > 1 else ""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", raw)


def labels(key: TaskKey, scope: str = "") -> dict[str, str]:
    """What finds a task's container again, whatever became of the service that started it."""
    return {
        "labhive.service": scope,
        "labhive.job": key.job_id,
        "labhive.attempt": str(key.attempt),
        "labhive.role": key.role,
        "labhive.index": str(key.index),
    } | ({"labhive.generation": str(key.generation)} if key.generation > 1 else {})


# ---- launch --------------------------------------------------------------------------------


def prepare(
    support: Support,
    launch: TaskLaunch,
    work: Path,
    user: tuple[int, int],
    env_keys: Iterable[str],
    pull: bool,
    scope: str = "",
    pids_max: int = PIDS_LIMIT,
) -> tuple[list[str], dict[str, Any]]:
    """The ``podman run`` argv for the task and its limits record (``TaskHandle.info``).

    ``work`` is the task's working directory, already its user's (``workdir.py``); ``user`` the
    uid/gid it runs as (``workdir.run_as``: the service's own when users are not separated);
    ``pids_max`` the processes (threads included) it may have, as a bare task of the executor."""
    if support.podman is None:
        raise LaunchError(f"job names image {launch.image!r}, but {support.why_not}")
    assert launch.image is not None
    name = container_name(launch.key, scope)
    memory = launch.memory_max_mb * MIB  # the limit (the guarantee only counts in placement)
    devices = gpu_devices(launch)
    record: dict[str, Any] = {
        "container": {"name": name, "runtime": support.runtime},
        "cpu": {"enforced": True, "by": f"container ({support.runtime})", "cores": launch.cpu_max},
        "pids": {"enforced": True, "by": "container", "max": pids_max},
        "memory": {"enforced": True, "by": "container", "bytes": memory},
        "devices": device_record(launch, devices, support.runtime),
    }
    if support.cgroup_v1:
        parent = _v1_memory_parent(name, memory)
        record["container"]["memory_parent"] = parent
        record["memory"]["by"] = "container (cgroup v1 parent)"
        # conmon stays in the supervisor's cgroup: in the limited parent an OOM could kill it
        memory_args = ["--cgroup-parent", f"/{V1_PARENT}/{name}", "--cgroups", "no-conmon"]
    else:
        memory_args = ["--memory", f"{memory}b", "--memory-swap", f"{memory}b"]
    argv = [
        support.podman,
        "run",
        "--replace",
        "--name",
        name,
        *_flag_pairs("--label", [f"{k}={v}" for k, v in labels(launch.key, scope).items()]),
        "--network",
        "host",
        # the output reaches the supervisor's capped relay through ``podman run`` (attached);
        # podman's own copy (k8s-file, in its storage) would be a second, uncapped one
        "--log-driver",
        "none",
        "--user",
        f"{user[0]}:{user[1]}",
        "--security-opt",
        "no-new-privileges",
        "--volume",
        f"{work}:{WORKDIR}",
        "--workdir",
        WORKDIR,
        "--cpus",
        f"{max(launch.cpu_max, 0.01):g}",
        "--pids-limit",
        str(pids_max),
        "--umask",
        f"{sandbox_mounts.TASK_UMASK:04o}",
        # /dev/shm's tmpfs pages are charged to the container's memory cgroup as well
        "--shm-size",
        f"{sandbox_mounts.container(memory)['bytes']}b",
        *memory_args,
        *_flag_pairs("--device", devices),
        *_flag_pairs("--env", sorted(env_keys)),
        "--env",
        f"HOME={WORKDIR}",
        "--pull",
        "missing" if pull else "never",
        launch.image,
        SHELL,
        "-c",
        launch.command,
    ]
    return argv, record


def _flag_pairs(flag: str, values: Iterable[str]) -> list[str]:
    return [item for value in values for item in (flag, value)]


def gpu_devices(launch: TaskLaunch, cdi_dirs: Iterable[Path] = _CDI_DIRS) -> list[str]:
    """The device nodes (or CDI names) of the task's own GPUs; none on a virtual cluster.

    GPU index N is ``/dev/nvidiaN``: the driver numbers device minors in NVML's index order
    unless an admin renumbered them."""
    if launch.virtual or not launch.gpus:
        return []
    if any(d.is_dir() and any(d.glob("nvidia*.yaml")) for d in cdi_dirs):
        return [f"nvidia.com/gpu={g}" for g in launch.gpus]
    own = [d for d in (f"/dev/nvidia{g}" for g in launch.gpus) if os.path.exists(d)]
    if not own:  # slots without devices (no driver here): nothing to map
        return []
    return own + [d for d in _NVIDIA_SHARED if os.path.exists(d)]


def device_record(launch: TaskLaunch, devices: list[str], runtime: str) -> dict[str, Any]:
    """What keeps a container to its GPUs: the runtime's device cgroup (v1 rules, or on v2
    its own eBPF filter), which allows the standard nodes (null, zero, full, random, urandom,
    tty, ptmx, pts) and the ``--device``'d ones, and refuses every other node with EPERM,
    an NVIDIA node that appears in the container's mounts included."""
    granted = [
        g for g in launch.gpus if f"/dev/nvidia{g}" in devices or f"nvidia.com/gpu={g}" in devices
    ]
    return {
        "enforced": True,
        "by": f"container ({runtime} device cgroup)",
        "granted_gpus": granted,
        "nodes": devices,
        "denied": "every device node but the runtime's standard ones and those listed",
    }


def _v1_memory_parent(name: str, memory: int, root: Path = CGROUP_ROOT) -> str:
    """A memory cgroup (v1) holding the container, limited to ``memory`` bytes, swap included."""
    parent = root / "memory" / V1_PARENT / name
    try:
        parent.mkdir(parents=True, exist_ok=True)
        (parent / "memory.limit_in_bytes").write_text(str(memory))
        with contextlib.suppress(OSError):  # no swap accounting: the memory limit alone
            (parent / "memory.memsw.limit_in_bytes").write_text(str(memory))
    except OSError as err:
        raise LaunchError(f"cannot set the container's memory limit in {parent}: {err}") from err
    return str(parent)


# ---- settle --------------------------------------------------------------------------------


def environment(conf: Path) -> dict[str, str]:
    """What podman commands of this executor need in their environment."""
    return {"CONTAINERS_CONF": str(conf)}


def inspect(podman: str, name: str, env: Mapping[str, str]) -> dict[str, Any] | None:
    """The container's ``State`` as podman records it, or None when there is no such container."""
    done = _podman(podman, ["inspect", "--type", "container", name], env)
    if done is None or done.returncode != 0:
        return None
    try:
        state = json.loads(done.stdout)[0]["State"]
    except (ValueError, LookupError, TypeError):
        return None
    return state if isinstance(state, dict) else None


def find(podman: str, key: TaskKey, env: Mapping[str, str], scope: str = "") -> str | None:
    """The name of the task's container, found by its labels (None when there is none)."""
    filters = _flag_pairs("--filter", [f"label={k}={v}" for k, v in labels(key, scope).items()])
    done = _podman(podman, ["ps", "--all", "--format", "{{.Names}}", *filters], env)
    if done is None or done.returncode != 0:
        return None
    names = done.stdout.split()
    return names[0] if names else None


def oom_killed(state: Mapping[str, Any] | None, record: Mapping[str, Any], exit_code: int) -> bool:
    """Whether the task ended by the kernel's OOM killer at its memory limit."""
    if state and state.get("OOMKilled"):
        return True
    parent = record.get("container", {}).get("memory_parent")
    if not parent or exit_code != 137:  # 128 + SIGKILL: the OOM killer's signal
        return False
    limit = int(record["memory"]["bytes"])
    return any(_peak(parent, f) >= limit for f in ("memory", "memory.memsw"))


def _peak(parent: str, prefix: str) -> int:
    try:
        return int(Path(parent, f"{prefix}.max_usage_in_bytes").read_text())
    except (OSError, ValueError):
        return -1


def describe(how: str, oom: bool, record: Mapping[str, Any]) -> str:
    if oom:
        mib = int(record["memory"]["bytes"]) // MIB
        return f"killed: over its memory limit of {mib} MiB"
    return how


def remove(podman: str, record: Mapping[str, Any], env: Mapping[str, str]) -> None:
    """Remove the container and its memory parent cgroup (v1): nothing of the task is left."""
    name = record.get("container", {}).get("name")
    if name:
        _podman(podman, ["rm", "--force", "--time", "0", name], env)
        release_v1_parent(name)


def release_v1_parent(name: str, root: Path = CGROUP_ROOT) -> None:
    """rmdir the task's parent cgroup in every controller, the podman-made children first."""
    for controller in root.glob(f"*/{V1_PARENT}/{name}"):
        for sub in sorted(controller.glob("**/"), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                sub.rmdir()


def _podman(
    podman: str, args: list[str], env: Mapping[str, str], timeout_s: float = 60
) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            [podman, *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, **env},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
