"""A recorded NVML: replays ``nvml_h100.json`` through pynvml's own function names.

The sampler under test receives this object where the service passes the real ``pynvml``
module, so the sampler's code path is the real one. Constants and error classes are the real
pynvml ones (importing pynvml needs no driver), so what the sampler catches is what a real
driver raises. A recorded ``"ERROR NVMLError_NotSupported(3)"`` raises that error; a call the
recording has no value for raises ``NVMLError_NoData``, never an invented reading.

Scenario keys a test may add to a device: ``"lost": true`` (every call raises GpuIsLost, as a
GPU that fell off the bus does), ``"xid_events": [79, ...]`` (queued critical XID events) and
``"ecc_errors": {"corrected_volatile": n, "uncorrected_volatile": n, ...}``.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "strace"
H100 = DATA / "nvml_h100.json"


def load_h100() -> dict[str, Any]:
    return json.loads(H100.read_text())


def nvml_loads() -> bool:
    """Whether the real NVML library loads here (a GPU host): tests that need a machine
    without the driver, and cannot fake one (a subprocess), skip there."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


class _Handle:
    def __init__(self, index: int) -> None:
        self.index = index


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class RecordedNVML:
    """Offers the pynvml calls the sampler makes, answering from a recording."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.recording = copy.deepcopy(recording)
        self.calls: list[str] = []
        self.initialised = False
        self._queued = [
            (d["index"], xid) for d in self.recording["devices"] for xid in d.get("xid_events", ())
        ]
        self._registered: set[int] = set()

    # Constants and error classes: the real module's.
    def __getattr__(self, name: str) -> Any:
        if name.startswith(("NVML", "nvmlMemory", "nvmlEventType")):
            return getattr(pynvml, name)
        raise AttributeError(name)

    # ---- helpers ---------------------------------------------------------------------------
    def _device(self, handle: _Handle) -> dict[str, Any]:
        device = self.recording["devices"][handle.index]
        if device.get("lost"):
            raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return device

    def _value(self, handle: _Handle, key: str) -> Any:
        value = self._device(handle).get(key)
        if value is None:
            raise _error(pynvml.NVML_ERROR_NO_DATA)
        if isinstance(value, str) and value.startswith("ERROR "):
            code = re.search(r"\((\d+)\)", value)
            assert code, f"a recorded error names its NVML code, as 'ERROR ... (15)': {value!r}"
            raise _error(int(code.group(1)))
        return value

    def _log(self, name: str) -> None:
        if not self.initialised:
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
        self.calls.append(name)

    # ---- session ---------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self._log("nvmlSystemGetDriverVersion")
        return self.recording["driver"]

    def nvmlDeviceGetCount(self) -> int:
        self._log("nvmlDeviceGetCount")
        return self.recording["count"]

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._log("nvmlDeviceGetHandleByIndex")
        if index >= self.recording["count"]:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        handle = _Handle(index)
        if self.recording["devices"][index].get("lost"):
            raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return handle

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:
        return handle.index

    # ---- identity --------------------------------------------------------------------------
    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._value(handle, "uuid")

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._value(handle, "name")

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> SimpleNamespace:
        return SimpleNamespace(busId=self._value(handle, "pci_bus_id"))

    def nvmlDeviceGetMinorNumber(self, handle: _Handle) -> int:
        return self._value(handle, "minor_number")

    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:
        return list(self._value(handle, "mig_mode"))  # [current, pending], as pynvml's

    # ---- readings --------------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> SimpleNamespace:
        return SimpleNamespace(**self._value(handle, "utilization"))

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None) -> Any:
        key = "memory_info_v2" if version else "memory_info"
        return SimpleNamespace(**self._value(handle, key))

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._value(handle, "temperature_gpu_C")

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return self._value(handle, "power_usage_mW")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        return self._value(handle, "power_limit_mW")

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> int:
        return self._value(handle, "total_energy_mJ")

    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock: int) -> int:
        key = {pynvml.NVML_CLOCK_SM: "clock_sm_MHz", pynvml.NVML_CLOCK_MEM: "clock_mem_MHz"}
        return self._value(handle, key[clock])

    def nvmlDeviceGetFanSpeed(self, handle: _Handle) -> int:
        return self._value(handle, "fan_speed")

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, kind: int, counter: int) -> int:
        errors = self._value(handle, "ecc_errors")
        name = "corrected" if kind == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else "uncorrected"
        scope = "volatile" if counter == pynvml.NVML_VOLATILE_ECC else "aggregate"
        return errors[f"{name}_{scope}"]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[SimpleNamespace]:
        return [SimpleNamespace(**p) for p in self._value(handle, "compute_procs")]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: _Handle) -> list[SimpleNamespace]:
        return [SimpleNamespace(**p) for p in self._value(handle, "graphics_procs")]

    def nvmlDeviceGetProcessUtilization(self, handle: _Handle, since: int) -> list[Any]:
        samples = [
            SimpleNamespace(
                pid=s["pid"], smUtil=s["sm"], memUtil=s["mem"], timeStamp=s.get("timeStamp", 0)
            )
            for s in self._value(handle, "process_utilization")
            if s.get("timeStamp", 0) >= since
        ]
        if not samples:  # what NVML answers when no sample is newer than ``since``
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        return samples

    # ---- XID events ------------------------------------------------------------------------
    def nvmlDeviceGetSupportedEventTypes(self, handle: _Handle) -> int:
        return self._value(handle, "xid_supported_events")

    def nvmlEventSetCreate(self) -> object:
        self._log("nvmlEventSetCreate")
        return object()

    def nvmlDeviceRegisterEvents(self, handle: _Handle, types: int, events: object) -> None:
        assert types & pynvml.nvmlEventTypeXidCriticalError
        self._registered.add(handle.index)

    def nvmlEventSetWait_v2(self, events: object, timeout_ms: int) -> SimpleNamespace:
        pending = [q for q in self._queued if q[0] in self._registered]
        if not pending:
            raise _error(pynvml.NVML_ERROR_TIMEOUT)
        self._queued.remove(pending[0])
        index, xid = pending[0]
        return SimpleNamespace(
            device=_Handle(index),
            eventType=pynvml.nvmlEventTypeXidCriticalError,
            eventData=xid,
        )

    def nvmlEventSetFree(self, events: object) -> None:
        self._registered.clear()
