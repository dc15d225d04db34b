"""The default cluster: this machine's GPUs as NVML reports them, else a virtual cluster.

Detection reads the driver, so it lives here, outside the pure core; drivers call
``default_cluster()`` once at start-up and hand the result to a policy.
"""

from __future__ import annotations

import os
import socket
from dataclasses import replace

from labhive.scheduler.config import ClusterConfig, cluster_from_gpus, virtual_cluster


def nvml_gpu_count() -> int:
    """How many GPUs NVML sees on this machine; 0 without an NVIDIA driver or pynvml."""
    try:
        import pynvml
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except pynvml.NVMLError:
        return 0
    finally:
        pynvml.nvmlShutdown()


def machine_resources() -> tuple[float, int]:
    """This machine's CPUs and memory (MB), for tasks that take no GPU (``cpu_pool.py``)."""
    cpus = float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0)
    cpus = cpus or float(os.cpu_count() or 1)
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError, AttributeError):
        memory = 0
    return cpus, int(memory) or 1024


def default_cluster() -> ClusterConfig:
    """This machine's GPUs shared by VCs ``default`` and ``vc1``; virtual when it has none.
    Every node offers this machine's CPUs and memory to tasks that ask for no GPU (the
    virtual nodes all run on it)."""
    count = nvml_gpu_count()
    config = virtual_cluster() if count <= 0 else cluster_from_gpus(socket.gethostname(), count)
    resources = machine_resources()
    return replace(config, node_resources={n.name: resources for n in config.nodes()})
