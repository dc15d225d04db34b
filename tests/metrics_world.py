"""A small cluster for the exporter tests: two VCs, a node with a real H100 reading, one job.

Job 42 of alice runs in vc1 on GPU 0 of ``gpu-node-1`` (the recorded H100, whose process 1118
is alice's training script); vc2 has one job waiting. The H100 recording gets ECC counters
and an XID so that every GPU family LabHive can export is present.
"""

from __future__ import annotations

from nvml_recorded import RecordedNVML, load_h100

from labhive.scheduler.core.model import NodeView, VCView
from labhive.scheduler.observe.nvml import Sample, Sampler
from labhive.scheduler.observe.prometheus import (
    DECISION_BUCKETS,
    WAIT_BUCKETS,
    HistogramData,
    Owner,
    ServiceSnapshot,
    render,
)

HOST = "gpu-node-1"
ALICE = Owner(job="42", vc="vc1", user="alice")


def h100_sample(hostname: str = HOST, **device_changes: object) -> Sample:
    rec = load_h100()
    rec["devices"][0].update(
        {
            "ecc_errors": {
                "corrected_volatile": 0,
                "uncorrected_volatile": 0,
                "corrected_aggregate": 4,
                "uncorrected_aggregate": 0,
            },
            **device_changes,
        }
    )
    sample = Sampler(RecordedNVML(rec), hostname=hostname, clock=lambda: 1000.0).sample()
    assert sample is not None
    return sample


def snapshot() -> ServiceSnapshot:
    return ServiceSnapshot(
        vcs=(
            VCView("vc1", guaranteed_gpus=4, used_gpus=1, opportunistic_gpus=0, waiting=0),
            VCView("vc2", guaranteed_gpus=4, used_gpus=0, opportunistic_gpus=1, waiting=1),
        ),
        nodes=(
            NodeView(HOST, "H100", gpus=(0, 1, 2, 3), used={0: "42"}),
            NodeView("gpu-node-2", "H100", gpus=(0, 1, 2, 3), healthy=False, reason="GPU 2 lost"),
        ),
        jobs={("vc1", "RUNNING"): 1, ("vc1", "SUCCEEDED"): 3, ("vc2", "WAITING"): 1},
        oldest_wait_s={"vc2": 125.0},
        queue_wait={"vc1": HistogramData.of([0.5, 3.0, 40.0, 7200.0], WAIT_BUCKETS)},
        submissions={"vc1": 5, "vc2": 1},
        preemptions={"vc1": 1},
        retries={"vc1": 2},
        failures={("vc1", "oom_killed"): 1, ("vc1", "failed"): 2},
        decision_latency=HistogramData.of([0.0002, 0.0004, 0.003], DECISION_BUCKETS),
    )


def full_text() -> str:
    return render(
        snapshot(),
        [h100_sample(xid_events=[79])],
        gpu_owners={(HOST, 0): ALICE},
        process_owners={1118: ALICE},
    )
