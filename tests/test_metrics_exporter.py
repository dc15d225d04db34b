"""Given a cluster with a recorded H100 and a few jobs, expect /metrics text that
prometheus_client's parser reads, under dcgm-exporter's names, types, units and labels, with
the LabHive job, VC and user on the GPU alice's job holds."""

from __future__ import annotations

import re

import pytest
from metrics_world import ALICE, HOST, full_text, h100_sample, snapshot
from prometheus_client.parser import text_string_to_metric_families

from labhive.scheduler.observe.prometheus import (
    DCGM_FIELDS,
    HistogramData,
    ServiceSnapshot,
    render,
)

DCGM_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "job", "vc", "user"}


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def one(fam, **labels) -> float:
    found = [s for s in fam.samples if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, found
    return found[0].value


def test_dcgm_names_units_and_labels() -> None:
    text = full_text()
    fams = families(text)
    util = fams["DCGM_FI_DEV_GPU_UTIL"]
    assert util.type == "gauge"
    (s,) = util.samples
    assert set(s.labels) == DCGM_LABELS
    assert s.labels == {
        "gpu": "0",
        "UUID": "GPU-e7c046e5-9dbd-ca41-9060-91d5a385b88f",
        "pci_bus_id": "00000000:00:06.0",
        "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": HOST,
        "job": "42",
        "vc": "vc1",
        "user": "alice",
    }
    assert s.value == 100
    assert one(fams["DCGM_FI_DEV_MEM_COPY_UTIL"]) == 8
    assert one(fams["DCGM_FI_DEV_FB_USED"]) == pytest.approx(1870.8, abs=0.05)  # MiB
    assert one(fams["DCGM_FI_DEV_FB_FREE"]) == 83055804416 / 2**20
    assert one(fams["DCGM_FI_DEV_GPU_TEMP"]) == 51  # °C
    assert one(fams["DCGM_FI_DEV_POWER_USAGE"]) == pytest.approx(291.789)  # W
    assert one(fams["DCGM_FI_DEV_SM_CLOCK"]) == 1980  # MHz
    assert one(fams["DCGM_FI_DEV_MEM_CLOCK"]) == 2619
    assert one(fams["DCGM_FI_DEV_XID_ERRORS"]) == 79
    assert one(fams["DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"]) == 4
    energy = fams["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    assert energy.type == "counter" and one(energy) == 10087366  # mJ
    # on the wire the counter keeps dcgm-exporter's exact name (no _total suffix added)
    assert re.search(r"^DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION\{.*\} 10087366$", text, re.M)
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text


def test_every_dcgm_type_matches_dcgm_exporter() -> None:
    fams = families(full_text())
    for name, kind, _, _ in DCGM_FIELDS:
        if name == "DCGM_FI_DEV_FAN_SPEED":  # the H100 SXM has no fan: NVML said NotSupported
            assert name not in fams
            continue
        assert fams[name].type == kind, name
        assert f"# TYPE {name} {kind}" in full_text()


def test_unsupported_field_has_no_series_and_unheld_gpu_has_empty_owner() -> None:
    text = render(None, [h100_sample()])
    fams = families(text)
    assert "DCGM_FI_DEV_FAN_SPEED" not in fams
    (s,) = fams["DCGM_FI_DEV_GPU_UTIL"].samples
    assert (s.labels["job"], s.labels["vc"], s.labels["user"]) == ("", "", "")


def test_per_process_memory_carries_the_job() -> None:
    fams = families(full_text())
    mem = fams["labhive_gpu_process_memory_used_mib"]
    (s,) = mem.samples
    assert s.labels["pid"] == "1118" and s.labels["job"] == ALICE.job
    assert s.value == pytest.approx(1862.0, abs=0.05)
    assert one(fams["labhive_gpu_process_sm_util"], pid="1118") == 5
    assert one(fams["labhive_gpu_lost"]) == 0
    assert one(fams["labhive_gpu_xid_errors"]) == 1


def test_labhive_scheduling_metrics() -> None:
    fams = families(full_text())
    jobs = fams["labhive_jobs"]
    assert one(jobs, vc="vc1", state="RUNNING") == 1
    assert one(jobs, vc="vc2", state="WAITING") == 1
    assert one(jobs, vc="vc2", state="FAILED") == 0  # every state of every VC, zeros included
    assert one(fams["labhive_queue_length"], vc="vc2") == 1
    assert one(fams["labhive_queue_oldest_wait_seconds"], vc="vc2") == 125
    gpus = fams["labhive_vc_gpus"]
    assert one(gpus, vc="vc1", state="allocated") == 1
    assert one(gpus, vc="vc1", state="idle") == 3
    assert one(gpus, vc="vc2", state="opportunistic") == 1
    assert one(fams["labhive_vc_guaranteed_gpus"], vc="vc2") == 4
    assert fams["labhive_preemptions"].type == "counter"
    assert one(fams["labhive_preemptions"], vc="vc1") == 1
    assert one(fams["labhive_job_retries"], vc="vc1") == 2
    assert one(fams["labhive_submissions"], vc="vc1") == 5
    assert one(fams["labhive_job_failures"], vc="vc1", reason="oom_killed") == 1
    assert one(fams["labhive_node_healthy"], node="gpu-node-2") == 0
    assert one(fams["labhive_node_healthy"], node="gpu-node-2", reason="GPU 2 lost") == 0
    assert one(fams["labhive_node_gpus"], node=HOST, state="used") == 1
    assert one(fams["labhive_cluster_virtual"]) == 0
    cluster = fams["labhive_gpus"]
    assert one(cluster, state="allocated") == 1 and one(cluster, state="idle") == 3
    assert one(cluster, state="unhealthy") == 4


def test_queue_wait_histogram_per_vc() -> None:
    fams = families(full_text())
    waits = fams["labhive_queue_wait_seconds"]
    assert waits.type == "histogram"
    buckets = {
        s.labels["le"]: s.value
        for s in waits.samples
        if s.name.endswith("_bucket") and s.labels["vc"] == "vc1"
    }
    # waits 0.5, 3, 40 and 7200 s: cumulative counts at the bucket bounds
    assert buckets["1.0"] == 1 and buckets["5.0"] == 2 and buckets["60.0"] == 3
    assert buckets["3600.0"] == 3 and buckets["+Inf"] == 4
    count = [s for s in waits.samples if s.name.endswith("_count") and s.labels["vc"] == "vc1"]
    assert count[0].value == 4
    lat = fams["labhive_scheduling_decision_seconds"]
    assert [s.value for s in lat.samples if s.name.endswith("_count")] == [3]


def test_histogram_data_edges() -> None:
    h = HistogramData.of([1.0, 1.0000001, 0.0], (1.0, 2.0))
    assert h.counts == (2, 1, 0)  # a value on a bound counts under it (Prometheus "le")
    assert h.cumulative() == [("1.0", 2), ("2.0", 3), ("+Inf", 3)]


def test_label_values_are_escaped() -> None:
    text = render(ServiceSnapshot(jobs={('v"c\\1\n', "RUNNING"): 1}))
    fams = families(text)
    assert one(fams["labhive_jobs"], vc='v"c\\1\n', state="RUNNING") == 1


def test_virtual_cluster_exports_slots_without_readings() -> None:
    snap = snapshot()
    virtual = ServiceSnapshot(vcs=snap.vcs, nodes=snap.nodes, jobs=snap.jobs, virtual=True)
    fams = families(render(virtual, samples=()))
    assert one(fams["labhive_cluster_virtual"]) == 1
    assert not [n for n in fams if n.startswith("DCGM_")]
    assert one(fams["labhive_node_gpus"], node=HOST, state="free") == 3
