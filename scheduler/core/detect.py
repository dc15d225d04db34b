"""The default cluster: this machine's GPUs as NVML reports them, else a virtual cluster.

Detection reads the driver, so it lives here, outside the pure core; drivers call
``default_cluster()`` once at start-up and hand the result to a policy.
"""

from __future__ import annotations

import os
import socket
from dataclasses import replace

from labhive.scheduler.core.config import ClusterConfig, cluster_from_gpus, virtual_cluster


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


#: CPU guarantees a default-cluster node offers per core of this machine. Placement counts
#: guarantees (``cpu``), the cgroup enforces limits (``cpu_limit``), and CPU time is shared,
#: not lost, when guarantees add up to more than the cores: notebook servers idle most of the
#: time (JupyterHub deployments guarantee them a tenth of a core). With 4, a 2-core machine
#: offers 8 guaranteed CPUs per node: 40 idle servers (0.1 each, 20 per virtual node) take
#: half of one node's, and lab jobs of 1 CPU still start beside them. Memory is not
#: overcommitted: it cannot be taken back from a task without killing it.
CPU_OVERCOMMIT = 4.0


def node_offer(cpus: float, memory_mb: int) -> tuple[float, int]:
    """What one default-cluster node offers to CPU-only tasks' guarantees."""
    return cpus * CPU_OVERCOMMIT, memory_mb


def default_cluster() -> ClusterConfig:
    """This machine's GPUs shared by VCs ``default`` and ``vc1``; virtual when it has none.
    Every node offers this machine's memory and ``CPU_OVERCOMMIT`` times its CPUs to tasks
    that ask for no GPU (the virtual nodes all run on it)."""
    count = nvml_gpu_count()
    config = virtual_cluster() if count <= 0 else cluster_from_gpus(socket.gethostname(), count)
    resources = node_offer(*machine_resources())
    return replace(config, node_resources={n.name: resources for n in config.nodes()})
