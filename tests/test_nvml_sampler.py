"""Given a real H100 reading (replayed through pynvml's calls), expect the sampler's readings in
dcgm-exporter's units, every unreadable field reported on its own, and no reading at all on a
machine without a driver (its library's load made to fail, so the test holds on GPU hosts too)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from nvml_recorded import RecordedNVML, load_h100

from labhive.scheduler.observe.nvml import Sample, Sampler, sample_from, start_sampling


def read(sampler: Sampler) -> Sample:
    """A sample from a sampler whose NVML starts (a recorded one always does)."""
    got = sampler.sample()
    assert got is not None, "NVML did not start"
    return got


MIB = 1024 * 1024


def _sample(recording: dict, **kw):
    nvml = RecordedNVML(recording)
    nvml.nvmlInit()
    return sample_from(nvml, hostname="gpu-node-1", time=100.0, **kw)


def test_h100_reading_in_dcgm_units() -> None:
    rec = load_h100()
    sample = _sample(rec)
    assert sample.driver == "580.159.04" and sample.error is None
    (gpu,) = sample.gpus
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.uuid == "GPU-e7c046e5-9dbd-ca41-9060-91d5a385b88f"
    assert gpu.pci_bus_id == "00000000:00:06.0"
    assert (gpu.gpu_util, gpu.mem_copy_util) == (100, 8)
    # memory v2: used excludes the driver's reservation, as nvidia-smi shows it (81559 MiB total)
    assert gpu.fb_total_mib == 81559.0
    assert gpu.fb_used_mib == pytest.approx(1961689088 / MIB)
    assert gpu.fb_free_mib == pytest.approx(83055804416 / MIB)
    assert gpu.fb_reserved_mib == 480.0
    assert gpu.temperature_c == 51
    assert gpu.power_w == pytest.approx(291.789)  # mW -> W
    assert gpu.power_limit_w == 700.0
    assert gpu.energy_mj == 10087366
    assert (gpu.sm_clock_mhz, gpu.mem_clock_mhz) == (1980, 2619)
    assert not gpu.lost


def test_not_supported_field_costs_only_that_field() -> None:
    """The H100 SXM has no fan: NVML said NotSupported, and every other field is still read."""
    (gpu,) = _sample(load_h100()).gpus
    assert gpu.fan_speed_pct is None
    assert gpu.missing["fan_speed_pct"] == "not supported"
    assert gpu.temperature_c == 51 and gpu.power_w is not None
    # what the recording holds no value for is reported as such, never invented
    assert gpu.missing["ecc_dbe_volatile"] == "no data"
    assert gpu.ecc_dbe_volatile is None
    assert gpu.device == "nvidia0"  # minor number unknown: the index names the device


def test_no_permission_and_lost_mid_read() -> None:
    rec = load_h100()
    dev = rec["devices"][0]
    dev["power_usage_mW"] = "ERROR NVMLError_NoPermission(4)"
    dev["clock_sm_MHz"] = "ERROR NVMLError_GpuIsLost(15)"
    (gpu,) = _sample(rec).gpus
    assert gpu.missing["power_w"] == "no permission"
    assert gpu.temperature_c == 51  # read before the GPU went away
    assert gpu.lost
    assert gpu.missing["sm_clock_mhz"] == "GPU is lost"
    assert gpu.missing["mem_clock_mhz"] == "GPU is lost"  # not even tried
    assert gpu.uuid == "GPU-e7c046e5-9dbd-ca41-9060-91d5a385b88f"


def test_lost_gpu_keeps_its_identity_from_the_previous_sample() -> None:
    rec = load_h100()
    first = _sample(rec)
    rec["devices"][0]["lost"] = True
    (gpu,) = _sample(rec, previous=first).gpus
    assert gpu.lost and gpu.uuid == first.gpus[0].uuid and gpu.gpu_util is None
    assert gpu.missing == {"handle": "GPU is lost"}


def test_per_process_memory_and_utilization() -> None:
    (gpu,) = _sample(load_h100()).gpus
    (proc,) = gpu.processes
    assert proc.pid == 1118
    assert proc.used_mib == pytest.approx(1952448512 / MIB)
    assert (proc.sm_util, proc.mem_util) == (5, 0)


def test_process_utilization_only_newer_than_previous_sample() -> None:
    rec = load_h100()
    rec["devices"][0]["process_utilization"] = [
        {"pid": 1118, "sm": 40, "mem": 3, "timeStamp": 1_000},
        {"pid": 1118, "sm": 60, "mem": 4, "timeStamp": 2_000},
    ]
    first = _sample(rec)
    assert first.gpus[0].processes[0].sm_util == 60  # the newest of the samples
    assert first.gpus[0].util_seen_us == 2_000
    rec["devices"][0]["process_utilization"] = [{"pid": 1118, "sm": 60, "mem": 4, "timeStamp": 0}]
    (gpu,) = _sample(rec, previous=first).gpus
    # nothing newer: NVML's NotFound means "no samples", not a missing field
    assert gpu.processes[0].sm_util is None and "process_utilization" not in gpu.missing
    assert gpu.processes[0].used_mib is not None


def test_xid_events_and_ecc_counters() -> None:
    rec = load_h100()
    rec["devices"][0]["xid_events"] = [13, 79]
    rec["devices"][0]["ecc_errors"] = {
        "corrected_volatile": 3,
        "uncorrected_volatile": 1,
        "corrected_aggregate": 10,
        "uncorrected_aggregate": 2,
    }
    sampler = Sampler(RecordedNVML(rec), hostname="gpu-node-1", clock=lambda: 5.0)
    first = read(sampler)
    (gpu,) = first.gpus
    assert gpu.new_xids == (13, 79) and gpu.last_xid == 79
    assert (gpu.ecc_sbe_volatile, gpu.ecc_dbe_volatile) == (3, 1)
    assert (gpu.ecc_sbe_aggregate, gpu.ecc_dbe_aggregate) == (10, 2)
    (again,) = read(sampler).gpus
    assert again.new_xids == () and again.last_xid == 79  # dcgm's gauge keeps the last XID
    sampler.close()


def without_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real pynvml on a machine without the driver, wherever the tests run: its loader's
    dlopen of libnvidia-ml fails as it does when no driver is installed (on a GPU host the test
    used to load the real library, sample, and fail). Other libraries load as usual."""
    import ctypes

    import pynvml

    real = ctypes.CDLL

    def dlopen(name: str, *args: Any, **kw: Any) -> ctypes.CDLL:
        if "nvidia-ml" in str(name) or "nvml" in str(name):
            raise OSError(f"{name}: cannot open shared object file: No such file or directory")
        return real(name, *args, **kw)

    monkeypatch.setattr(pynvml, "nvmlLib", None)  # as if not loaded yet in this process
    monkeypatch.setattr(pynvml, "CDLL", dlopen)


@pytest.fixture
def no_nvidia_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    without_driver(monkeypatch)


class _DriverPresent:
    """What dlopen gives on a GPU host, as far as ``nvmlInit`` asks: every call succeeds."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args: 0  # NVML_SUCCESS


def test_the_no_driver_test_holds_on_a_gpu_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given a host where libnvidia-ml loads (the test used to assume none did), expect the
    fake to take the driver away all the same."""
    import pynvml

    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "CDLL", lambda name, *a, **kw: _DriverPresent())
    assert Sampler(hostname="gpu-box").start() is True  # a GPU host: the sampler starts
    without_driver(monkeypatch)
    sampler = Sampler(hostname="gpu-box")
    assert sampler.start() is False and "no NVIDIA driver" in sampler.why_unavailable


@pytest.mark.usefixtures("no_nvidia_driver")
def test_no_driver_is_said_once_and_gives_no_readings(caplog: pytest.LogCaptureFixture) -> None:
    """A machine without an NVIDIA driver: the real pynvml fails to load libnvidia-ml."""
    sampler = Sampler(hostname="cpu-box")
    with caplog.at_level(logging.INFO):
        assert sampler.sample() is None
        assert sampler.sample() is None
    said = [r for r in caplog.records if "GPU sampler off" in r.getMessage()]
    assert len(said) == 1 and "no NVIDIA driver" in said[0].getMessage()
    assert said[0].levelno == logging.WARNING  # GPUs were expected here
    quiet = Sampler(hostname="cpu-box", expect_gpus=False)  # a virtual cluster's sampler
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert quiet.sample() is None
    assert [r.levelno for r in caplog.records if "GPU sampler off" in r.getMessage()] == [
        logging.INFO
    ]
    assert start_sampling(1.0, lambda s: None, sampler) is None  # no thread without a driver
    assert start_sampling(0, lambda s: None) is None  # interval 0: off


def test_sampling_thread_hands_over_samples() -> None:
    import threading

    got: list = []
    done = threading.Event()

    def on_sample(sample) -> None:
        got.append(sample)
        if len(got) == 3:
            done.set()

    sampler = Sampler(RecordedNVML(load_h100()), hostname="gpu-node-1")
    thread = start_sampling(0.01, on_sample, sampler)
    assert thread is not None
    assert done.wait(30)
    thread.stop()
    assert not thread.is_alive()
    assert [len(s.gpus) for s in got[:3]] == [1, 1, 1]


def test_a_failing_handler_does_not_stop_sampling() -> None:
    import threading

    calls: list = []
    done = threading.Event()

    def on_sample(sample) -> None:
        calls.append(sample)
        if len(calls) == 1:
            raise RuntimeError("store unavailable")
        done.set()

    thread = start_sampling(0.01, on_sample, Sampler(RecordedNVML(load_h100()), hostname="n"))
    assert thread is not None and done.wait(30)
    thread.stop()


def test_an_xid_storm_is_read_in_bounded_slices() -> None:
    from labhive.scheduler.observe.nvml import MAX_EVENTS_PER_SAMPLE

    rec = load_h100()
    rec["devices"][0]["xid_events"] = [79] * (MAX_EVENTS_PER_SAMPLE + 10)
    sampler = Sampler(RecordedNVML(rec), hostname="n")
    assert len(read(sampler).gpus[0].new_xids) == MAX_EVENTS_PER_SAMPLE
    (gpu,) = read(sampler).gpus
    assert len(gpu.new_xids) == 10 and gpu.xid_count == MAX_EVENTS_PER_SAMPLE + 10
