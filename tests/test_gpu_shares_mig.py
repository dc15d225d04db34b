"""Given a GPU that NVML reports in MIG mode (the recorded H100 with ``mig_mode`` switched on,
served through pynvml's own function names: no GPU here), expect the sampler to say so, and the
service to refuse a share placed on that GPU at launch, saying which GPU and what to do, while
a whole-GPU job on it runs as before. Untested on MIG hardware."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pynvml
from isolation_util import isolated_service, needs_root
from nvml_recorded import RecordedNVML, load_h100
from sim_helpers import ONE_GPU
from waiting import wait_until

from labhive.scheduler.core.config import GpuSharing
from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import TaskPlacement
from labhive.scheduler.executors.base import LaunchError
from labhive.scheduler.executors.gpu_share_env import MigGpus, with_gpu_shares
from labhive.scheduler.observe.nvml import Sampler, sample_from


def recording(mig_mode: Any) -> dict[str, Any]:
    rec = load_h100()
    if mig_mode is None:
        del rec["devices"][0]["mig_mode"]
    else:
        rec["devices"][0]["mig_mode"] = mig_mode
    return rec


def read(mig_mode: Any):
    nvml = RecordedNVML(recording(mig_mode))
    nvml.nvmlInit()
    return sample_from(nvml, hostname="localhost", time=1.0).gpus[0]


def test_the_sampler_reads_mig_mode_as_nvml_reports_it():
    assert read([0, 0]).mig is False  # the H100 as recorded
    assert read([1, 1]).mig is True
    assert read([0, 1]).mig is False  # pending until the GPU is reset
    unsupported = read(f"ERROR NVMLError_NotSupported({pynvml.NVML_ERROR_NOT_SUPPORTED})")
    assert unsupported.mig is False and "mig" not in unsupported.missing  # no MIG on it
    unread = read(None)
    assert unread.mig is None and unread.missing["mig"] == "no data"


def test_a_share_on_a_mig_gpu_is_refused_at_launch_a_whole_gpu_is_not():
    mig = MigGpus()
    mig.update("n0", frozenset({1}))
    build = with_gpu_shares(lambda job, spec, placed: [], GpuSharing(), mig)
    quarter = parse_job({"name": "q", "vc": "vc1", "gpus": 0.25, "command": "true"})
    whole = parse_job({"name": "w", "vc": "vc1", "gpus": 1, "command": "true"})
    on = (TaskPlacement("main", 0, "n0", (1,)),)
    off = (TaskPlacement("main", 0, "n0", (0,)),)
    try:
        build({}, quarter, on)
        raise AssertionError("a share on a MIG GPU was launched")
    except LaunchError as err:
        assert "GPU 1 of node n0 is in MIG mode" in str(err)
        assert "--gpus 1" in str(err) and "nvidia-smi -i 1 -mig 0" in str(err)
    assert build({}, quarter, off) == [] and build({}, whole, on) == []
    mig.update("n0", frozenset())  # MIG turned off again (the next sample): shares go
    assert build({}, quarter, on) == []


@needs_root
def test_the_service_refuses_a_share_on_the_gpu_its_sampler_saw_in_mig_mode(tmp_path: Path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(ONE_GPU)
    nvml = RecordedNVML(recording([1, 1]))
    with isolated_service(tmp_path / "data", cluster=str(cluster), gpu_sample_s=0.05) as live:
        monitoring = live.running.service.monitoring
        monitoring.sampler = Sampler(nvml, hostname="localhost")
        monitoring.start()
        try:
            wait_until(lambda: nvml.calls.count("nvmlDeviceGetCount") >= 2, "two samples")
            alice = live.client("alice-token-123")
            share = alice.submit(name="quarter", command="true", vc="vc1", gpus=0.25)
            wait_until(lambda: share.refresh().done, "the share's end", 60)
            assert share.state == "FAILED"
            why = share.data["why"]  # the user reads it in `labhive show` and the widget
            assert "cannot start the task: GPU 0 of node localhost is in MIG mode" in why, why
            whole = alice.submit(name="whole", command="true", vc="vc1", gpus=1)
            wait_until(lambda: whole.refresh().done, "the whole GPU job's end", 60)
            assert whole.state == "SUCCEEDED", whole.data
        finally:
            monitoring.stop()
