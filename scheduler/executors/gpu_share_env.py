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
  one GPU are serialized rather than shared; MIG is not handled at all.

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
from labhive.scheduler.executors.base import TaskLaunch

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


def with_gpu_shares(base: LaunchBuilder, sharing: GpuSharing) -> LaunchBuilder:
    """Wrap a launch builder so that a share's task gets ``share_env``; others are unchanged."""

    def build(
        job: dict[str, Any], spec: JobSpec, placements: tuple[TaskPlacement, ...]
    ) -> list[TaskLaunch]:
        launches = base(job, spec, placements)
        extra = share_env(spec.share_milli, sharing)
        if not extra:
            return launches
        return [replace(launch, env={**launch.env, **extra}) for launch in launches]

    return build
