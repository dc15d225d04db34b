"""What a task holding a GPU share sees, and what (if anything) enforces its share.

Every sharer of a GPU gets that GPU's index in ``CUDA_VISIBLE_DEVICES`` (the placement gives
each the same leaf cell) and the GPU's device filter admits each of them (``devfilter.py``
builds one filter per task from its own GPUs). On top of that, ``gpuSharing`` in the cluster
config decides what a share *is* on the hardware:

- ``timeslice`` (the default): a scheduling share only. Each sharer sees the whole GPU, its
  memory included; CUDA time-slices their kernels. The job's record and the notebook banner say
  "not enforced: shares are time-sliced".
- ``mps``: each share runs as a CUDA MPS client with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (its
  share of the SMs: 50, 25 or 12) and, when the config gives the GPUs' memory
  (``gpuMemoryMB``), ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<MB>M`` (its share of the memory; the
  device ordinal is the client's own, and a share sees exactly one device, so it is 0). The
  admin runs ``nvidia-cuda-mps-control -d`` on each node. NOT TESTED ON HARDWARE: no NVIDIA GPU
  was reachable where this was written. MPS serves one uid at a time per GPU (a client of
  another uid waits until the running server's clients end), so shares of different users on
  one GPU are serialized rather than shared.

MIG: a GPU that NVML reports in MIG mode is split into instances a CUDA process reaches only
through their own UUIDs; ``CUDA_VISIBLE_DEVICES=<index>`` of the whole GPU gives a share none of
them, and time-slicing or MPS on top is not what the share promised. So where the service's
NVML sampler (``observe/nvml.py``: ``nvmlDeviceGetMigMode``) has seen MIG on a GPU, a share
placed on it is refused at launch with what to do (``MigGpus``, ``mig_refusal``): the attempt
fails with that message instead of running on a GPU it does not get. Whole-GPU tasks are left
as they were. Tested with a fake NVML only: NOT TESTED ON HARDWARE (no MIG GPU was reachable),
and the scheduler still places shares on such a GPU (the refusal comes at launch).

Pure functions of the spec and the config, applied to the launches the service builds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from labhive.scheduler.core.config import GpuSharing
from labhive.scheduler.core.gpu_share import MILLI
from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import TaskPlacement
from labhive.scheduler.executors.base import NOT_STARTED, LaunchError, TaskLaunch

LaunchBuilder = Callable[[dict[str, Any], JobSpec, tuple[TaskPlacement, ...]], list[TaskLaunch]]

#: What a share's record and banner say when nothing on the hardware enforces it.
NOT_ENFORCED = "not enforced: shares are time-sliced (each sharer sees the whole GPU)"


def sharing_note(sharing: GpuSharing) -> str:
    """How this cluster enforces a GPU share, in one line for a job's record and banner."""
    if sharing.mode != "mps":
        return NOT_ENFORCED
    memory = (
        "and its part of the GPU's memory (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)"
        if sharing.gpu_memory_mb
        else "(memory not capped: the config gives no gpuMemoryMB)"
    )
    return (
        f"CUDA MPS: its part of the GPU's threads {memory}, if the node runs the MPS control "
        "daemon (untested on hardware; a task can unset these variables)"
    )


def share_env(share_milli: int, sharing: GpuSharing) -> dict[str, str]:
    """The variables of a task holding ``share_milli`` thousandths of its one GPU."""
    if not share_milli:
        return {}
    env = {
        "LABHIVE_GPU_SHARE": f"{share_milli / MILLI:g}",
        "LABHIVE_GPU_SHARING": sharing_note(sharing),
    }
    if sharing.mode == "mps":
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, share_milli * 100 // MILLI))
        if sharing.gpu_memory_mb:
            megabytes = sharing.gpu_memory_mb * share_milli // MILLI
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={megabytes}M"
    return env


def gpu_share_record(env: dict[str, str]) -> dict[str, Any]:
    """``{"gpu_share": {...}}`` for a share's task record (``tasks[].limits``), from the
    variables ``share_env`` gave it: the share, and whether anything on the GPU enforces it."""
    share = env.get("LABHIVE_GPU_SHARE")
    if share is None:
        return {}
    mps = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" in env
    record: dict[str, Any] = {"share": float(share), "enforced": mps}
    if mps:
        record["by"] = "cuda-mps (untested on hardware)"
        record["thread_percentage"] = int(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
        record["pinned_memory"] = env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "not capped")
    record["why" if not mps else "note"] = env.get("LABHIVE_GPU_SHARING", NOT_ENFORCED)
    return {"gpu_share": record}


class MigGpus:
    """The GPUs in MIG mode per node, as NVML last reported them (the service's monitoring
    updates it from each sample; the launch builder reads it). One dict assignment per update:
    readers in other threads see the old set or the new one."""

    def __init__(self) -> None:
        self._by_node: dict[str, frozenset[int]] = {}

    def update(self, node: str, gpus: frozenset[int]) -> None:
        if gpus or node in self._by_node:
            self._by_node[node] = gpus

    def of(self, node: str) -> frozenset[int]:
        return self._by_node.get(node, frozenset())


def mig_refusal(node: str, gpu: int, share_milli: int) -> str:
    """Why a share placed on a MIG GPU is not started, and what to do."""
    return (
        f"GPU {gpu} of node {node} is in MIG mode (NVML), so a share of {share_milli / MILLI:g} "
        "GPU cannot be handed out on it: a task there would get none of its MIG instances. "
        "Ask for a whole GPU (--gpus 1), or ask the admin to turn MIG off on that GPU "
        f"(nvidia-smi -i {gpu} -mig 0, then a GPU reset) if it should take shares"
    )


def with_gpu_shares(
    base: LaunchBuilder, sharing: GpuSharing, mig: MigGpus | None = None
) -> LaunchBuilder:
    """Wrap a launch builder so that a share's task gets ``share_env``; others are unchanged.
    A share placed on a GPU ``mig`` says is in MIG mode is refused (``LaunchError``)."""

    def build(
        job: dict[str, Any], spec: JobSpec, placements: tuple[TaskPlacement, ...]
    ) -> list[TaskLaunch]:
        share = spec.share_milli
        if share and mig is not None:
            for p in placements:
                for gpu in p.gpus:
                    if gpu in mig.of(p.node):
                        # (NOT_STARTED: the job's why-text carries the reason)
                        raise LaunchError(NOT_STARTED + mig_refusal(p.node, gpu, share))
        launches = base(job, spec, placements)
        extra = share_env(share, sharing)
        if not extra:
            return launches
        return [replace(launch, env={**launch.env, **extra}) for launch in launches]

    return build
