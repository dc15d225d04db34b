"""Given a machine with NVIDIA GPUs, expect a task to see exactly the devices it was given, by
UUID, whatever else the machine has (skipped where NVML reports no GPU)."""

from __future__ import annotations

import sys

import pytest
from local_exec_util import wait_exits

from labhive.scheduler.executors.base import TaskKey, TaskLaunch
from labhive.scheduler.executors.env import nvml_uuids
from labhive.scheduler.executors.local import LocalExecutor

UUIDS = nvml_uuids()
pytestmark = pytest.mark.skipif(not UUIDS, reason="no NVIDIA GPU here (NVML reports none)")

#: Asks the CUDA driver itself which devices this process can use.
CUDA_DEVICES = r"""
import ctypes
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0, "cuInit failed"
count = ctypes.c_int()
assert cuda.cuDeviceGetCount(ctypes.byref(count)) == 0
for i in range(count.value):
    dev, raw = ctypes.c_int(), (ctypes.c_ubyte * 16)()
    assert cuda.cuDeviceGet(ctypes.byref(dev), i) == 0
    assert cuda.cuDeviceGetUuid(raw, dev) == 0
    h = bytes(raw).hex()
    print(f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
"""


def test_a_cuda_task_sees_exactly_its_gpu(tmp_path):
    last = len(UUIDS) - 1  # the last device, so "the first one" cannot pass by accident
    launch = TaskLaunch(
        TaskKey("cuda", 0, "main", 0), "cuda", f"{sys.executable} -c '{CUDA_DEVICES}'",
        "node0", (last,), gpu_uuids=(UUIDS[last],), memory_mb=8192,
    )  # fmt: skip
    ex = LocalExecutor(tmp_path)
    (handle,) = ex.launch([launch])
    exit = wait_exits(ex, 1, timeout_s=60)[handle.key]
    err = ex.read_log(handle, "stderr", 0, 4096).decode()
    assert exit.exit_code == 0, err
    seen = ex.read_log(handle, "stdout", 0, 4096).decode().split()
    print("devices on this machine:", UUIDS, "seen by the task:", seen)
    assert seen == [UUIDS[last].lower()] or seen == [UUIDS[last]]
