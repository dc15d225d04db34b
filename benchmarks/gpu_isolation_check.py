"""On a real NVIDIA host: does a task reach only the GPUs it was given, even when it unsets
``CUDA_VISIBLE_DEVICES``? Run as root (the service's user), through the local executor:

    python benchmarks/gpu_isolation_check.py [--uid 65534]
    python benchmarks/gpu_isolation_check.py --dry-run     # any host: fake nodes, no torch

Two tasks, each running ``env -u CUDA_VISIBLE_DEVICES python -c PROBE``:
(a) a task with no GPU opens ``/dev/nvidia0``, ``/dev/nvidiactl``, ``/dev/nvidia-uvm``: each
    must fail with EPERM (the device filter), and torch must see no GPU;
(b) a task given the host's last GPU opens every ``/dev/nvidiaN``: only its own opens, and
    ``torch.cuda.device_count()`` must be 1 (its GPU, by UUID through NVML where
    nvidia-ml-py is installed).
Each task's limits record (how its devices were enforced) is printed. Exit status 0 when
every check passed, 1 when one failed, 2 when the host cannot run the check (no GPU, not
root). Needs: Linux, root, the NVIDIA driver, Python with torch (nvidia-ml-py optional); no
strace, no podman. ``--dry-run`` makes fake nodes (``mknod c 195 N``) in a temp dir instead of
using /dev, and skips torch: what it checks is the executor and the filter, not the driver.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import os
import re
import shlex
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from labhive.scheduler.executors import limits
from labhive.scheduler.executors.base import TaskKey, TaskLaunch
from labhive.scheduler.executors.env import nvml_uuids
from labhive.scheduler.executors.local import LocalExecutor

#: What a task runs: open each node, then (unless told not to) ask torch what it sees.
PROBE = r"""
import errno, json, os, sys
nodes, use_torch = json.loads(sys.argv[1]), sys.argv[2] == "1"
out = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "opened": {}}
for node in nodes:
    try:
        os.close(os.open(node, os.O_RDWR))
        out["opened"][node] = "ok"
    except OSError as err:
        out["opened"][node] = errno.errorcode.get(err.errno, str(err.errno))
if use_torch:
    try:
        import torch
        n = torch.cuda.device_count()
        out["torch_device_count"] = n
        out["torch_devices"] = [str(torch.cuda.get_device_properties(i).uuid) for i in range(n)]
    except Exception as err:  # a task without GPUs: CUDA may refuse to start at all
        out["torch_error"] = f"{type(err).__name__}: {err}"
print(json.dumps(out), flush=True)
"""


@dataclasses.dataclass
class Host:
    dev: Path  # where the nodes are: /dev, or a temp dir of fake ones
    gpus: int
    uuids: list[str]
    use_torch: bool


def fake_host(tmp: Path, gpus: int = 2) -> Host:
    """Fake NVIDIA nodes: GPUs 0..gpus-1, nvidiactl (195:255); mode 0666, as on the H200."""
    tmp.mkdir(mode=0o755)
    for minor in range(gpus):
        _mknod(tmp / f"nvidia{minor}", minor)
    _mknod(tmp / "nvidiactl", 255)
    return Host(tmp, gpus, [], use_torch=False)


def _mknod(path: Path, minor: int) -> None:
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(limits.NVIDIA_MAJOR, minor))
    os.chmod(path, 0o666)


def real_host() -> Host:
    uuids = nvml_uuids()
    return Host(Path("/dev"), len(uuids), list(uuids), use_torch=True)


def run_task(
    ex: LocalExecutor, name: str, gpus: tuple[int, ...], host: Host, uid: int | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Launch one task through the executor, wait for it; (its report, its limits record)."""
    nodes = [str(host.dev / f"nvidia{i}") for i in range(host.gpus)]
    nodes += [str(p) for p in (host.dev / "nvidiactl", host.dev / "nvidia-uvm") if p.exists()]
    args = [json.dumps(nodes), "1" if host.use_torch else "0"]
    command = "exec env -u CUDA_VISIBLE_DEVICES " + shlex.join([sys.executable, "-c", PROBE, *args])
    launch = TaskLaunch(
        TaskKey(name, 1, "main", 0), name, command, "node0", gpus,
        gpu_uuids=tuple(host.uuids[g] for g in gpus if g < len(host.uuids)),
        virtual=False, memory_mb=16384, uid=uid, gid=uid,
    )  # fmt: skip
    (handle,) = ex.launch([launch])
    deadline = time.monotonic() + 300
    ended: list[Any] = []
    while not ended and time.monotonic() < deadline:
        ended = ex.poll()
        time.sleep(0.05)
    out = ex.read_log(handle, "stdout", 0, 1 << 20).decode()
    err = ex.read_log(handle, "stderr", 0, 1 << 20).decode()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"task {name} printed no report; stderr:\n{err}")
    return json.loads(lines[-1]), handle.info["limits"]


def check(ok: bool, what: str, failures: list[str]) -> None:
    print(f"  [{'PASS' if ok else 'FAIL'}] {what}")
    if not ok:
        failures.append(what)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="fake nodes in a temp dir, no torch")
    ap.add_argument("--uid", type=int, default=None, help="run the tasks as this uid")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("run as root: the executor makes cgroups and attaches the device filter")
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="labhive-gpucheck-", dir="/tmp"))
    os.chmod(tmp, 0o755)
    try:
        host = fake_host(tmp / "dev") if args.dry_run else real_host()
        if host.gpus == 0:
            print("no NVIDIA GPU here (NVML reports none): try --dry-run")
            return 2
        return run_checks(LocalExecutor(tmp / "data"), host, args.uid)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_checks(ex: LocalExecutor, host: Host, uid: int | None) -> int:
    support = ex.limit_support
    print(f"GPU devices on this host: {support.devices_enforced()}")
    print(f"GPUs: {host.gpus} ({host.dev}); tasks run with CUDA_VISIBLE_DEVICES unset")
    failures: list[str] = []

    print("\n(a) a task with no GPU")
    report, record = run_task(ex, "gpucheck-none", (), host, uid)
    print(f"  devices record: {json.dumps(record.get('devices'))}")
    print(f"  opened: {json.dumps(report['opened'])}")
    check(report["cuda_visible_devices"] is None, "CUDA_VISIBLE_DEVICES is unset", failures)
    for node, result in report["opened"].items():
        check(result == errno.errorcode[errno.EPERM], f"{node}: EPERM (got {result})", failures)
    if host.use_torch:
        seen = report.get("torch_device_count", 0)
        note = report.get("torch_error", f"device_count() = {seen}")
        check(seen == 0, f"torch sees no GPU ({note})", failures)

    last = host.gpus - 1  # the last: "the first one" cannot pass by accident
    print(f"\n(b) a task given GPU {last}")
    report, record = run_task(ex, "gpucheck-one", (last,), host, uid)
    print(f"  devices record: {json.dumps(record.get('devices'))}")
    print(f"  opened: {json.dumps(report['opened'])}")
    check(report["cuda_visible_devices"] is None, "CUDA_VISIBLE_DEVICES is unset", failures)
    own = str(host.dev / f"nvidia{last}")
    for node, result in report["opened"].items():
        # its own /dev/nvidiaN opens, no other; nvidiactl and nvidia-uvm: a GPU task needs them
        want_ok = node == own or not re.fullmatch(r"nvidia\d+", Path(node).name)
        allowed = result != errno.errorcode[errno.EPERM]
        # on fake nodes an allowed open reaches no driver: ENXIO
        check(allowed == want_ok, f"{node}: {'opens' if want_ok else 'EPERM'} (got {result})",
              failures)  # fmt: skip
    if host.use_torch:
        seen = report.get("torch_device_count")
        check(seen == 1, f"torch.cuda.device_count() == 1 (got {seen})", failures)
        devices = report.get("torch_devices", [])
        want = host.uuids[last].lower().removeprefix("gpu-")
        check(
            [d.lower().removeprefix("gpu-") for d in devices] == [want],
            f"the one GPU torch sees is GPU {last}, {host.uuids[last]} (got {devices})",
            failures,
        )
    else:
        print("  (torch not checked: --dry-run)")
    print(f"\n{'all checks passed' if not failures else f'{len(failures)} check(s) FAILED'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
