"""How long one ``/metrics`` scrape takes to render for a large cluster: 4,096 GPUs on 512
hosts (each GPU held by a job, two processes per GPU) and 10,000 jobs in 20 VCs. Prints the
median and worst of a few renders and the page size; no assertion."""

from __future__ import annotations

import statistics
import time

from labhive.scheduler.core.model import NodeView, VCView
from labhive.scheduler.observe.nvml import GpuReading, ProcessReading, Sample
from labhive.scheduler.observe.prometheus import (
    DECISION_BUCKETS,
    WAIT_BUCKETS,
    HistogramData,
    Owner,
    ServiceSnapshot,
    render,
)

HOSTS, GPUS, VCS = 512, 8, 20


def world() -> tuple[ServiceSnapshot, list[Sample], dict, dict]:
    samples, gpu_owners, proc_owners = [], {}, {}
    for h in range(HOSTS):
        host = f"node-{h:03d}"
        gpus = []
        for g in range(GPUS):
            job = h * GPUS + g
            pids = (100_000 + 2 * job, 100_001 + 2 * job)
            gpus.append(
                GpuReading(
                    index=g, uuid=f"GPU-{h:04x}-{g}", name="NVIDIA H100 80GB HBM3",
                    pci_bus_id=f"00000000:{g:02x}:00.0", gpu_util=87, mem_copy_util=20,
                    fb_used_mib=40_000.0, fb_free_mib=41_559.0, fb_total_mib=81_559.0,
                    temperature_c=61, power_w=512.3, power_limit_w=700.0, energy_mj=10**9,
                    sm_clock_mhz=1980, mem_clock_mhz=2619, ecc_sbe_volatile=0,
                    ecc_dbe_volatile=0, ecc_sbe_aggregate=0, ecc_dbe_aggregate=0,
                    processes=tuple(ProcessReading(p, 20_000.0, 40, 10) for p in pids),
                )
            )  # fmt: skip
            owner = Owner(str(job), f"vc{job % VCS}", f"user{job % 97}")
            gpu_owners[(host, g)] = owner
            proc_owners.update(dict.fromkeys(pids, owner))
        samples.append(Sample(time=0.0, hostname=host, gpus=tuple(gpus)))
    vcs = [VCView(f"vc{v}", HOSTS * GPUS // VCS, 200, 4, 300) for v in range(VCS)]
    nodes = [
        NodeView(f"node-{h:03d}", "H100", tuple(range(GPUS)), used=dict.fromkeys(range(GPUS), "1"))
        for h in range(HOSTS)
    ]
    waits = [float(i % 5000) for i in range(10_000)]
    snapshot = ServiceSnapshot(
        vcs=vcs,
        nodes=nodes,
        jobs={(f"vc{v}", s): 100 for v in range(VCS) for s in ("WAITING", "RUNNING", "FAILED")},
        oldest_wait_s={f"vc{v}": 600.0 for v in range(VCS)},
        queue_wait={f"vc{v}": HistogramData.of(waits[v::VCS], WAIT_BUCKETS) for v in range(VCS)},
        submissions={f"vc{v}": 500 for v in range(VCS)},
        preemptions={f"vc{v}": 5 for v in range(VCS)},
        retries={f"vc{v}": 7 for v in range(VCS)},
        decision_latency=HistogramData.of([0.0003] * 1000, DECISION_BUCKETS),
    )
    return snapshot, samples, gpu_owners, proc_owners


def main() -> None:
    snapshot, samples, gpu_owners, proc_owners = world()
    times, size = [], 0
    for _ in range(7):
        began = time.perf_counter()
        size = len(render(snapshot, samples, gpu_owners, proc_owners))
        times.append(time.perf_counter() - began)
    lines = render(snapshot, samples, gpu_owners, proc_owners).count("\n")
    print(
        f"/metrics render, {HOSTS * GPUS} GPUs on {HOSTS} hosts, {VCS} VCs: "
        f"median {statistics.median(times) * 1000:.0f} ms, worst {max(times) * 1000:.0f} ms, "
        f"{size / 1e6:.1f} MB, {lines} lines"
    )


if __name__ == "__main__":
    main()
