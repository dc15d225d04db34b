"""GPU readings through NVML (NVIDIA's ``nvidia-ml-py`` bindings, imported as ``pynvml``).

``sample_from(nvml)`` is the one code path that reads GPUs: it takes anything offering pynvml's
functions and constants, so the service passes the real module and the tests pass a replay of a
recorded reading. Every field is read on its own: a GPU that does not support a field (fan speed
on an SXM board), a field the service may not read, or a GPU that fell off the bus costs that
field, never the sample; the reason lands in ``GpuReading.missing``. Units are converted to the
ones dcgm-exporter publishes (MiB, W, MHz, °C, mJ), so the exporter only renames.

``Sampler`` owns the NVML session (init once, XID event set, shutdown); without a driver it says
so once and every ``sample()`` returns None, so a virtual cluster shows slots and no readings.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

MIB = 1024 * 1024

#: XIDs after which NVIDIA's XID guide says the GPU needs a reset or the node a drain: double-bit
#: ECC (48), uncontained ECC (95), row-remap failure (64), micro-controller halts (61, 62, 119,
#: 120), NVLink (74), fallen off the bus (79), high single-bit rate (92). Application faults
#: (13, 31, 43, 45) are the job's problem, not the node's, and are deliberately absent.
CRITICAL_XIDS: frozenset[int] = frozenset({48, 61, 62, 64, 74, 79, 92, 95, 119, 120})


@dataclass(frozen=True, slots=True)
class ProcessReading:
    """One process holding a context on a GPU; None where NVML would not say."""

    pid: int
    used_mib: float | None = None
    sm_util: int | None = None
    mem_util: int | None = None


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU at one instant, in dcgm-exporter's units. None means "not read": see ``missing``."""

    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    minor: int | None = None
    gpu_util: int | None = None  # %
    mem_copy_util: int | None = None  # %
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    fb_total_mib: float | None = None
    fb_reserved_mib: float | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    energy_mj: int | None = None  # since the driver loaded
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    fan_speed_pct: int | None = None
    ecc_sbe_volatile: int | None = None
    ecc_dbe_volatile: int | None = None
    ecc_sbe_aggregate: int | None = None
    ecc_dbe_aggregate: int | None = None
    last_xid: int = 0  # dcgm-exporter's DCGM_FI_DEV_XID_ERRORS: the last XID seen, 0 for none
    new_xids: tuple[int, ...] = ()  # XIDs that arrived since the previous sample
    xid_count: int = 0  # XIDs seen since the sampler started
    lost: bool = False
    #: MIG mode on (``nvmlDeviceGetMigMode``'s current mode): the GPU is split into MIG
    #: instances, so LabHive hands out no shares of it (``gpu_share_env.MigGpus``); False for
    #: a GPU without MIG (NVML: not supported), None when it could not be read.
    mig: bool | None = None
    processes: tuple[ProcessReading, ...] = ()
    util_seen_us: int = 0  # NVML's timestamp of the newest per-process sample read
    missing: Mapping[str, str] = field(default_factory=dict)  # field -> why it was not read

    @property
    def device(self) -> str:
        """The device node name (``nvidia0``), as dcgm-exporter labels it."""
        return f"nvidia{self.minor if self.minor is not None else self.index}"


@dataclass(frozen=True, slots=True)
class Sample:
    """All GPUs of one machine at one instant."""

    time: float
    hostname: str
    gpus: tuple[GpuReading, ...] = ()
    driver: str | None = None
    error: str | None = None  # the whole machine could not be read (count failed)


def _reason(nvml: Any, err: Exception) -> str:
    code = getattr(err, "value", None)
    names = {
        getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3): "not supported",
        getattr(nvml, "NVML_ERROR_NO_PERMISSION", 4): "no permission",
        getattr(nvml, "NVML_ERROR_GPU_IS_LOST", 15): "GPU is lost",
        getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13): "not in this driver",
        getattr(nvml, "NVML_ERROR_NO_DATA", 21): "no data",
    }
    return names.get(code, str(err) or type(err).__name__)


class _Guard:
    """Calls NVML functions on one GPU, each on its own, keeping what failed and why.

    Once the GPU reports itself lost, later calls are skipped: on a lost GPU each call can block
    for seconds and none can succeed.
    """

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml, self.handle = nvml, handle
        self.missing: dict[str, str] = {}
        self.lost = False

    def call(self, key: str, function: str, *args: Any, empty_on: tuple[int, ...] = ()) -> Any:
        """``function(handle, *args)``, or None with the reason kept; the codes in ``empty_on``
        mean "nothing to report" rather than a missing field."""
        if self.lost:
            self.missing[key] = "GPU is lost"
            return None
        fn = getattr(self.nvml, function, None)
        if fn is None:
            self.missing[key] = "not in this nvidia-ml-py"
            return None
        try:
            return fn(self.handle, *args)
        except self.nvml.NVMLError as err:
            if getattr(err, "value", None) in empty_on:
                return None
            if getattr(err, "value", None) == self.nvml.NVML_ERROR_GPU_IS_LOST:
                self.lost = True
            self.missing[key] = _reason(self.nvml, err)
            return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _mib(value: Any) -> float | None:
    return None if value is None else value / MIB


def _watts(milliwatts: Any) -> float | None:
    return None if milliwatts is None else milliwatts / 1000.0


def _identity(g: _Guard) -> dict[str, Any]:
    pci = g.call("pci_bus_id", "nvmlDeviceGetPciInfo")
    return {
        "uuid": _text(g.call("uuid", "nvmlDeviceGetUUID")),
        "name": _text(g.call("name", "nvmlDeviceGetName")),
        "pci_bus_id": _text(getattr(pci, "busId", None)),
        "minor": g.call("minor", "nvmlDeviceGetMinorNumber"),
    }


def _memory(g: _Guard) -> dict[str, Any]:
    """Framebuffer use as nvidia-smi shows it: v2 (used excludes the driver's reservation),
    falling back to v1 on drivers without it."""
    v2 = getattr(g.nvml, "nvmlMemory_v2", None)
    mem = g.call("fb", "nvmlDeviceGetMemoryInfo", v2) if v2 is not None else None
    if mem is None and not g.lost:
        g.missing.pop("fb", None)
        mem = g.call("fb", "nvmlDeviceGetMemoryInfo")
    if mem is None:
        return {}
    return {
        "fb_used_mib": _mib(mem.used),
        "fb_free_mib": _mib(mem.free),
        "fb_total_mib": _mib(mem.total),
        "fb_reserved_mib": _mib(getattr(mem, "reserved", None)),
    }


def _ecc(g: _Guard) -> dict[str, Any]:
    n = g.nvml
    out = {}
    for key, kind, counter in (
        ("ecc_sbe_volatile", n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC),
        ("ecc_dbe_volatile", n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC),
        ("ecc_sbe_aggregate", n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_AGGREGATE_ECC),
        ("ecc_dbe_aggregate", n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_AGGREGATE_ECC),
    ):
        out[key] = g.call(key, "nvmlDeviceGetTotalEccErrors", kind, counter)
    return out


def _mig(g: _Guard) -> bool | None:
    """Whether MIG mode is on now (a pending change counts once the GPU is reset); a GPU
    that cannot do MIG answers "not supported": False, not missing."""
    unsupported = g.nvml.NVML_ERROR_NOT_SUPPORTED
    mode = g.call("mig", "nvmlDeviceGetMigMode", empty_on=(unsupported,))
    if mode is None:
        return None if "mig" in g.missing else False
    return bool(mode[0] == getattr(g.nvml, "NVML_DEVICE_MIG_ENABLE", 1))


def _processes(g: _Guard, since_us: int) -> tuple[tuple[ProcessReading, ...], int]:
    """Per-process memory (compute and graphics contexts) joined with per-process utilization.

    NVML returns utilization samples newer than ``since_us`` only, so the caller carries the
    newest timestamp forward; "no samples yet" (NotFound) is normal, not a missing field.
    """
    used: dict[int, float | None] = {}
    for key, fn in (
        ("compute_processes", "nvmlDeviceGetComputeRunningProcesses"),
        ("graphics_processes", "nvmlDeviceGetGraphicsRunningProcesses"),
    ):
        for p in g.call(key, fn) or ():
            mib = _mib(p.usedGpuMemory)
            used[p.pid] = max(mib, used.get(p.pid) or 0.0) if mib is not None else used.get(p.pid)
    util: dict[int, tuple[int, int, int]] = {}
    seen = since_us
    samples = g.call(
        "process_utilization",
        "nvmlDeviceGetProcessUtilization",
        since_us,
        empty_on=(g.nvml.NVML_ERROR_NOT_FOUND,),
    )
    for s in samples or ():
        stamp = int(getattr(s, "timeStamp", 0))
        if s.pid not in util or stamp >= util[s.pid][0]:
            util[s.pid] = (stamp, s.smUtil, s.memUtil)
        seen = max(seen, stamp)
    procs = tuple(
        ProcessReading(
            pid=pid,
            used_mib=used.get(pid),
            sm_util=util[pid][1] if pid in util else None,
            mem_util=util[pid][2] if pid in util else None,
        )
        for pid in sorted(set(used) | set(util))
    )
    return procs, seen


#: Events read per sample at most: an XID storm must not stall sampling (the rest wait).
MAX_EVENTS_PER_SAMPLE = 256


def _drain_xids(nvml: Any, events: Any) -> dict[int, list[int]]:
    """XID events waiting in the event set, by GPU index (non-blocking)."""
    found: dict[int, list[int]] = {}
    if events is None:
        return found
    for _ in range(MAX_EVENTS_PER_SAMPLE):
        try:
            data = nvml.nvmlEventSetWait_v2(events, 0)
        except nvml.NVMLError:  # Timeout: the set is empty (any other error: try next sample)
            return found
        if not data.eventType & nvml.nvmlEventTypeXidCriticalError:
            continue
        try:
            index = nvml.nvmlDeviceGetIndex(data.device)
        except nvml.NVMLError:
            continue
        found.setdefault(index, []).append(int(data.eventData))
    return found


def _read_gpu(nvml: Any, index: int, before: GpuReading | None, xids: list[int]) -> GpuReading:
    last_xid = xids[-1] if xids else (before.last_xid if before else 0)
    xid_count = (before.xid_count if before else 0) + len(xids)
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except nvml.NVMLError as err:  # no handle, no readings: keep what was known of the GPU
        known = before or GpuReading(index)
        return GpuReading(
            index=index,
            uuid=known.uuid,
            name=known.name,
            pci_bus_id=known.pci_bus_id,
            minor=known.minor,
            last_xid=last_xid,
            new_xids=tuple(xids),
            xid_count=xid_count,
            lost=getattr(err, "value", None) == nvml.NVML_ERROR_GPU_IS_LOST,
            util_seen_us=known.util_seen_us,
            missing={"handle": _reason(nvml, err)},
        )
    g = _Guard(nvml, handle)
    ident = _identity(g)
    if before is not None:  # a GPU lost mid-read keeps the identity it had
        ident = {k: v if v is not None else getattr(before, k) for k, v in ident.items()}
    rates = g.call("utilization", "nvmlDeviceGetUtilizationRates")
    values: dict[str, Any] = {
        "gpu_util": getattr(rates, "gpu", None),
        "mem_copy_util": getattr(rates, "memory", None),
        **_memory(g),
        "temperature_c": g.call(
            "temperature_c", "nvmlDeviceGetTemperature", nvml.NVML_TEMPERATURE_GPU
        ),
        "power_w": _watts(g.call("power_w", "nvmlDeviceGetPowerUsage")),
        "power_limit_w": _watts(g.call("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit")),
        "energy_mj": g.call("energy_mj", "nvmlDeviceGetTotalEnergyConsumption"),
        "sm_clock_mhz": g.call("sm_clock_mhz", "nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_SM),
        "mem_clock_mhz": g.call("mem_clock_mhz", "nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_MEM),
        "fan_speed_pct": g.call("fan_speed_pct", "nvmlDeviceGetFanSpeed"),
        **_ecc(g),
    }
    values["mig"] = _mig(g)
    procs, seen = _processes(g, before.util_seen_us if before else 0)
    return GpuReading(
        index=index,
        **ident,
        **values,
        last_xid=last_xid,
        new_xids=tuple(xids),
        xid_count=xid_count,
        lost=g.lost,
        processes=procs,
        util_seen_us=seen,
        missing=g.missing,
    )


def sample_from(
    nvml: Any,
    *,
    hostname: str,
    time: float,
    previous: Sample | None = None,
    events: Any = None,
) -> Sample:
    """Read every GPU through ``nvml`` (pynvml, or anything offering its calls); NVML is
    already initialised. ``previous`` carries what NVML only reports as deltas or may stop
    reporting: per-process utilization timestamps, the last XID, a lost GPU's identity.
    ``events`` is an NVML event set registered for XIDs, drained without blocking."""
    try:
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as err:
        return Sample(time=time, hostname=hostname, error=f"nvmlDeviceGetCount: {err}")
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
    except nvml.NVMLError:
        driver = None
    before = {g.index: g for g in previous.gpus} if previous else {}
    xids = _drain_xids(nvml, events)
    gpus = tuple(_read_gpu(nvml, i, before.get(i), xids.get(i, [])) for i in range(count))
    return Sample(time=time, hostname=hostname, gpus=gpus, driver=driver)


def register_xid_events(nvml: Any) -> Any:
    """An event set receiving critical XIDs from every GPU that supports them, or None."""
    try:
        events = nvml.nvmlEventSetCreate()
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as err:
        log.info("NVML: no XID events (%s)", err)
        return None
    for i in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            if nvml.nvmlDeviceGetSupportedEventTypes(handle) & nvml.nvmlEventTypeXidCriticalError:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
        except nvml.NVMLError as err:
            log.info("NVML: GPU %d gives no XID events (%s)", i, err)
    return events


def _import_pynvml() -> Any:
    import pynvml

    return pynvml


class Sampler:
    """The NVML session of one machine: ``sample()`` returns a ``Sample``, or None without a
    driver (said once, at ``start``: a warning where GPUs were expected, else for the log).
    """

    def __init__(
        self,
        nvml: Any | None = None,
        *,
        hostname: str | None = None,
        clock: Callable[[], float] = time.time,
        expect_gpus: bool = True,
    ) -> None:
        self._nvml = nvml
        self.expect_gpus = expect_gpus  # no driver where GPUs are expected is worth a warning
        self.hostname = hostname or socket.gethostname()
        self._clock = clock
        self._events: Any = None
        self._last: Sample | None = None
        self.available: bool | None = None  # None until start()
        self.why_unavailable = ""
        self._lock = threading.Lock()

    def start(self) -> bool:
        if self.available is not None:
            return self.available
        try:
            nvml = self._nvml if self._nvml is not None else _import_pynvml()
            nvml.nvmlInit()
        except ImportError as err:
            return self._unavailable(f"nvidia-ml-py is not installed ({err})")
        except Exception as err:  # NVMLError_LibraryNotFound / DriverNotLoaded / ...
            return self._unavailable(f"no NVIDIA driver ({err})")
        self._nvml = nvml
        self._events = register_xid_events(nvml)
        self.available = True
        return True

    def _unavailable(self, why: str) -> bool:
        self.available, self.why_unavailable = False, why
        level = logging.WARNING if self.expect_gpus else logging.INFO
        log.log(level, "GPU sampler off: %s; GPU slots are shown without readings.", why)
        return False

    def sample(self) -> Sample | None:
        if not self.start():
            return None
        with self._lock:
            self._last = sample_from(
                self._nvml,
                hostname=self.hostname,
                time=self._clock(),
                previous=self._last,
                events=self._events,
            )
            return self._last

    @property
    def last(self) -> Sample | None:
        return self._last

    def close(self) -> None:
        nvml = self._nvml
        if not self.available or nvml is None:
            return
        with self._lock:
            try:
                if self._events is not None:
                    nvml.nvmlEventSetFree(self._events)
                nvml.nvmlShutdown()
            except nvml.NVMLError as err:
                log.info("NVML shutdown: %s", err)
            self.available, self._events = None, None


class SamplingThread(threading.Thread):
    """Calls ``sampler.sample()`` every ``interval_s`` and hands each sample to ``on_sample``.

    Does nothing at all when the sampler has no driver, so a virtual cluster pays no thread.
    A failing sample or ``on_sample`` is logged and the loop goes on: monitoring must not die
    of one bad reading.
    """

    def __init__(
        self,
        sampler: Sampler,
        interval_s: float,
        on_sample: Callable[[Sample], None],
    ) -> None:
        super().__init__(name="labhive-gpu-sampler", daemon=True)
        self.sampler, self.interval_s, self.on_sample = sampler, interval_s, on_sample
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                sample = self.sampler.sample()
                if sample is None:
                    return
                self.on_sample(sample)
            except Exception:
                log.exception("GPU sampling failed; trying again next interval")
            self._stop_event.wait(self.interval_s)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout)


def start_sampling(
    interval_s: float, on_sample: Callable[[Sample], None], sampler: Sampler | None = None
) -> SamplingThread | None:
    """Start sampling, or return None when the interval is 0 (off) or there is no driver."""
    if interval_s <= 0:
        return None
    sampler = sampler or Sampler()
    if not sampler.start():
        return None
    thread = SamplingThread(sampler, interval_s, on_sample)
    thread.start()
    return thread
