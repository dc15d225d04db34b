"""The environment a task sees: OpenPAI's variables, PyTorch's rendezvous, its GPUs.

A training script written for OpenPAI or for ``torchrun`` must run unchanged, so the names are
theirs: OpenPAI's ``PAI_*`` job, role and task variables (both the v1 and the v2 spellings that
scripts still read), and the ``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE``/``RANK``/
``LOCAL_RANK`` that ``torch.distributed``'s ``env://`` rendezvous reads. LabHive's own additions
carry a ``LABHIVE_`` prefix.

``task_env`` is a pure function of the job, its placements and the attempt, so the service can
compute it once, store it with the attempt, and hand it to any executor; only the choice of a
free rendezvous port (``free_port``) touches the machine, and the service does it once per
attempt.

A task's process starts from an allow-list, never from the service's environment less a few
names: ``process_env`` is the one place that says what it gets (``task_vars``, the platform's
variables for the task, plus the few names of ``SERVICE_VARS_KEPT``), and every executor that
starts a process uses it (local, bare and under podman; Slurm); a container or a pod gets
``task_vars`` alone. Whatever else the service was started with (a database password in
``PGPASSWORD``, a token an admin exported, cloud credentials, a proxy URL with a password in
it) stays with the service: a task runs as its user, and what it can read, its user can.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import TaskPlacement
from labhive.scheduler.executors.base import TaskKey, TaskLaunch

#: Where a node is reached when the cluster config gives no address: every node of a local or
#: virtual cluster is this machine.
LOOPBACK = "127.0.0.1"

#: What a task keeps of the service's own environment: where programs are found and how text
#: and time are shown. Nothing here may ever carry a secret (docs/admin.md, "Trust model").
#: OpenBLAS's core type and cache size are kept too: set on hosts whose CPUs older OpenBLAS builds
#: misdetect (wrong results or a crash in numpy), they describe the machine, not anyone's secret.
SERVICE_VARS_KEPT = frozenset(
    {"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"}
)
SERVICE_VAR_PREFIXES_KEPT = ("LC_",)
#: The admin's own additions to the list, comma-separated names in the service's environment
#: (say ``LD_LIBRARY_PATH,HTTPS_PROXY`` for a site whose CUDA or proxy needs them): the admin
#: vouches that what those names hold may be read by every job.
EXTRA_KEPT_VAR = "LABHIVE_TASK_ENV"
#: Who the process is: the task's user's when the task switches uid, else the service's own
#: (then they name the same account).
IDENTITY_VARS = ("HOME", "USER", "LOGNAME")


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nobody listens on now, for one job attempt's rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def gpu_env(
    gpus: Sequence[int], gpu_uuids: Sequence[str] = (), virtual: bool = False
) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES for exactly the task's devices.

    Real devices go by UUID, which stays right whatever order CUDA enumerates them in. A task
    without GPUs gets an empty list, so it cannot wander onto a device it was not given. On a
    virtual cluster the slots are passed the same way and ``LABHIVE_VIRTUAL_GPUS=1`` says that
    they are slots, not devices.
    """
    env = {"LABHIVE_GPUS": ",".join(str(g) for g in gpus)}
    if gpu_uuids:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_uuids)
        env["NVIDIA_VISIBLE_DEVICES"] = env["CUDA_VISIBLE_DEVICES"]
    else:
        env["CUDA_VISIBLE_DEVICES"] = env["LABHIVE_GPUS"]
    if virtual:
        env["LABHIVE_VIRTUAL_GPUS"] = "1"
    return env


def identity_env(
    key: TaskKey,
    job_name: str,
    node: str,
    gpus: Sequence[int],
    gpu_uuids: Sequence[str] = (),
    virtual: bool = False,
    host_ip: str = LOOPBACK,
) -> dict[str, str]:
    """What one task knows about itself: which job, role, index, attempt, node and GPUs."""
    env = {
        "PAI_JOB_NAME": job_name,
        "PAI_CURRENT_TASK_ROLE_NAME": key.role,
        "PAI_TASK_ROLE_NAME": key.role,
        "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": str(key.index),
        "PAI_TASK_INDEX": str(key.index),
        "PAI_CONTAINER_HOST_IP": host_ip,
        "LABHIVE_JOB_ID": key.job_id,
        "LABHIVE_ATTEMPT": str(key.attempt),
        "LABHIVE_NODE": node,
    }
    env.update(gpu_env(gpus, gpu_uuids, virtual))
    return env


def launch_env(launch: TaskLaunch, host_ip: str = LOOPBACK) -> dict[str, str]:
    """``identity_env`` from what a ``TaskLaunch`` carries (the executor's per-task variables)."""
    return identity_env(
        launch.key, launch.job_name, launch.node, launch.gpus, launch.gpu_uuids, launch.virtual,
        host_ip,
    )  # fmt: skip


def task_vars(launch: TaskLaunch, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The platform's variables for one task: the launch's (job, role, rendezvous, as the
    service built them), ``extra`` (an executor's own rendezvous), then its identity and GPUs.
    All a container or a pod gets, and the part of a process's environment that is the task's."""
    return {**launch.env, **(extra or {}), **launch_env(launch)}


def kept_service_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of the service's environment (``SERVICE_VARS_KEPT``, and the
    names the admin lists in ``LABHIVE_TASK_ENV``).

    ``python`` in a task's command means the Python LabHive runs in (its virtualenv's ``bin``
    comes first on PATH, as in an activated environment), not whatever else PATH names first:
    a task that runs as its user's uid may not be able to execute that one at all (pyenv's
    shims under root's private home answer "command not found", exit 127)."""
    source = os.environ if environ is None else environ
    extra = {name.strip() for name in source.get(EXTRA_KEPT_VAR, "").split(",")} - {""}
    env = {
        k: v
        for k, v in source.items()
        if k in SERVICE_VARS_KEPT or k in extra or k.startswith(SERVICE_VAR_PREFIXES_KEPT)
    }
    here = os.path.dirname(sys.executable)
    path = env.get("PATH", "")
    if here and path.split(os.pathsep)[0] != here:
        env["PATH"] = os.pathsep.join(p for p in (here, path) if p)
    return env


def process_env(
    task: Mapping[str, str],
    home: str | None = None,
    user: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment a task's process starts with: the kept service variables, who
    it is, then the task's own variables ``task`` (``task_vars``).

    ``home``/``user``: the task's user's, when it runs as their uid; None when it runs as the
    service's own user, whose ``HOME``/``USER``/``LOGNAME`` are then the task's too."""
    source = os.environ if environ is None else environ
    env = kept_service_env(source)
    if home is None:
        env.update({k: source[k] for k in IDENTITY_VARS if k in source})
    else:
        name = user or ""
        env.update(HOME=home, USER=name, LOGNAME=name)
    env.update(task)
    return env


def rendezvous_env(
    members: Sequence[tuple[str, int, str]],
    me: tuple[str, int],
    master_port: int,
    node_ips: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """PyTorch's ``env://`` rendezvous for one member of a gang.

    ``members`` are (role, index, node) in rank order (roles as the job lists them, then index);
    rank 0 hosts the rendezvous. LOCAL_RANK counts the members on the same node in rank order,
    which is what ``torchrun`` would give a process on that node.
    """
    ips = node_ips or {}
    ranks = {(role, index): rank for rank, (role, index, _) in enumerate(members)}
    if me not in ranks:
        raise ValueError(f"task {me[0]}-{me[1]} is not one of the job's tasks")
    rank = ranks[me]
    node = members[rank][2]
    on_node = [r for r, (_, _, n) in enumerate(members) if n == node]
    return {
        "MASTER_ADDR": ips.get(members[0][2], LOOPBACK),
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(len(members)),
        "RANK": str(rank),
        "LOCAL_RANK": str(on_node.index(rank)),
        "LOCAL_WORLD_SIZE": str(len(on_node)),
    }


def _job_env(
    spec: JobSpec, placements: Sequence[TaskPlacement], ips: Mapping[str, str]
) -> dict[str, str]:
    """OpenPAI's job- and role-level variables, the same for every task of the job."""
    roles = [r.name for r in spec.roles]
    env = {
        "PAI_USER_NAME": spec.user or "",
        "PAI_JOB_VC_NAME": spec.vc,
        "PAI_TASK_ROLE_COUNT": str(len(roles)),
        "PAI_TASK_ROLE_LIST": ",".join(roles),
        "PAI_JOB_TASK_COUNT": str(spec.task_count),
        "PAI_JOB_TASK_ROLE_COUNT": str(len(roles)),
        "PAI_JOB_TASK_ROLE_LIST": ",".join(roles),
    }
    for role in spec.roles:
        env[f"PAI_TASK_ROLE_TASK_COUNT_{role.name}"] = str(role.instances)
        if role.min_failed is not None:
            env[f"PAI_MIN_FAILED_TASK_COUNT_{role.name}"] = str(role.min_failed)
        if role.min_succeeded is not None:
            env[f"PAI_MIN_SUCCEEDED_TASK_COUNT_{role.name}"] = str(role.min_succeeded)
    for p in placements:
        env[f"PAI_HOST_IP_{p.role}_{p.index}"] = ips.get(p.node, LOOPBACK)
    return env


def task_env(
    job_id: str,
    spec: JobSpec,
    placements: Sequence[TaskPlacement],
    attempt: int,
    role: str,
    index: int,
    *,
    master_port: int,
    gpu_uuids: Sequence[str] = (),
    virtual: bool = False,
    node_ips: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Every variable one task of one attempt sees (the service stores it as TaskLaunch.env).

    ``placements`` are where the attempt's tasks run (all of a gang; the placed ones of an
    incremental job); ``node_ips`` maps node names to addresses other tasks reach them at
    (loopback when absent). Rendezvous variables are set for jobs of more than one task.
    """
    ips = node_ips or {}
    mine = next((p for p in placements if (p.role, p.index) == (role, index)), None)
    if mine is None:
        raise ValueError(f"task {role}-{index} has no placement in job {job_id}")
    role_spec = next((r for r in spec.roles if r.name == role), None)
    if role_spec is None:
        raise ValueError(f"job {job_id} has no task role {role!r}")
    env = _job_env(spec, placements, ips)
    env.update(
        {
            "PAI_CURRENT_TASK_ROLE_TASK_COUNT": str(role_spec.instances),
            "PAI_CURRENT_TASK_ROLE_CPU_COUNT": f"{role_spec.cpu:g}",
            "PAI_CURRENT_TASK_ROLE_MEM_MB": str(role_spec.memory_mb),
            "PAI_CURRENT_TASK_ROLE_GPU_COUNT": str(role_spec.gpu),
        }
    )
    key = TaskKey(job_id, attempt, role, index)
    host_ip = ips.get(mine.node, LOOPBACK)
    env.update(identity_env(key, spec.name, mine.node, mine.gpus, gpu_uuids, virtual, host_ip))
    if spec.task_count > 1:
        env.update(rendezvous_env(rank_order(spec, placements), (role, index), master_port, ips))
    return env


def rank_order(spec: JobSpec, placements: Sequence[TaskPlacement]) -> list[tuple[str, int, str]]:
    """The placed tasks as (role, index, node) in rank order: the job's role order, then index."""
    order = {r.name: i for i, r in enumerate(spec.roles)}
    placed = sorted(placements, key=lambda p: (order.get(p.role, len(order)), p.index))
    return [(p.role, p.index, p.node) for p in placed]


#: How the service turns a start decision into launches (``SchedulerLoop``'s ``launch_builder``).
LaunchBuilder = Callable[[dict[str, Any], JobSpec, tuple[TaskPlacement, ...]], list[TaskLaunch]]


def with_device_uuids(base: LaunchBuilder, gpu_uuids: Mapping[str, Sequence[str]]) -> LaunchBuilder:
    """Wrap a launch builder so that tasks on nodes with NVIDIA GPUs get their devices by UUID.

    ``gpu_uuids`` maps a node to its devices' UUIDs in GPU-index order (``nvml_uuids()`` for
    this machine). A node not in it, or an index past its list, keeps the plain indices.
    """

    def build(
        job: dict[str, Any], spec: JobSpec, placements: tuple[TaskPlacement, ...]
    ) -> list[TaskLaunch]:
        out = []
        for launch in base(job, spec, placements):
            devices = gpu_uuids.get(launch.node, ())
            if devices and all(0 <= g < len(devices) for g in launch.gpus):
                mine = tuple(devices[g] for g in launch.gpus)
                env = {**launch.env, **gpu_env(launch.gpus, mine, launch.virtual)}
                launch = replace(launch, gpu_uuids=mine, env=env)
            out.append(launch)
        return out

    return build


def nvml_uuids() -> tuple[str, ...]:
    """This machine's GPU UUIDs in NVML index order; empty without an NVIDIA driver."""
    try:
        import pynvml
    except ImportError:
        return ()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return ()
    try:
        count = pynvml.nvmlDeviceGetCount()
        return tuple(
            _text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)))
            for i in range(count)
        )
    except pynvml.NVMLError:
        return ()
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
