"""The default cluster: this machine's GPUs as NVML reports them, else a virtual cluster.

Detection reads the driver, so it lives here, outside the pure core; drivers call
``default_cluster()`` once at start-up and hand the result to a policy.
"""

from __future__ import annotations

import socket

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


def default_cluster() -> ClusterConfig:
    """This machine's GPUs shared by VCs ``default`` and ``vc1``; virtual when it has none."""
    count = nvml_gpu_count()
    if count <= 0:
        return virtual_cluster()
    return cluster_from_gpus(socket.gethostname(), count)
