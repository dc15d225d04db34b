"""Given ioctl requests as numbers or as strace prints them, expect the Linux _IOC fields and
the names from NVIDIA's and Linux's headers (checked against strace's own renderings)."""

from __future__ import annotations

import pytest

from labhive.scheduler.observe.ioctl import decode, device_family, ioc, parse_request, split_request
from labhive.scheduler.observe.ioctl_kfd import KFD_IOCTLS
from labhive.scheduler.observe.ioctl_nvidia import NV_ESCAPES, UVM_IOCTLS


def test_ioc_layout_round_trips() -> None:
    # strace printed 0xc020462a as _IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2a, 0x20)
    assert split_request(0xC020462A) == (3, 0x46, 0x2A, 0x20)
    assert ioc(3, 0x46, 0x2A, 0x20) == 0xC020462A
    # and 0x30000001 (UVM_INITIALIZE) as _IOC(_IOC_NONE, 0, 0x1, 0x3000)
    assert split_request(0x30000001) == (0, 0, 1, 0x3000)


@pytest.mark.parametrize(
    ("text", "number", "name"),
    [
        ("0xc020462a", 0xC020462A, None),
        ("_IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2a, 0x20)", 0xC020462A, None),
        ("0xc020462a /* _IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2a, 0x20) */", 0xC020462A, None),
        ("0x5401 /* TCGETS */", 0x5401, "TCGETS"),
        ("TCGETS", 0x5401, "TCGETS"),
        ("_IOC(_IOC_NONE, 0, 0x1, 0x3000)", 0x30000001, None),
        ("0x4b", 0x4B, None),
        ("_IOR('T', 0x30, 0x4)", 0x80045430, None),
        ("_IO(0x54, 0x41)", 0x5441, None),
    ],
)
def test_strace_renderings_parse(text: str, number: int, name: str | None) -> None:
    assert parse_request(text) == (number, name)


@pytest.mark.parametrize(
    "text", ["", "_IOC(1, 2)", "not a request", "0xzz", "_IOC(_IOC_FOO, 1, 2, 3)"]
)
def test_garbage_requests_raise_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_request(text)


@pytest.mark.parametrize(
    ("text", "device", "name"),
    [
        # the requests in the H100 logs, as strace printed them
        ("_IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2a, 0x20)", "/dev/nvidiactl", "NV_ESC_RM_CONTROL"),
        ("_IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2b, 0x30)", "/dev/nvidiactl", "NV_ESC_RM_ALLOC"),
        ("_IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x29, 0x10)", "/dev/nvidiactl", "NV_ESC_RM_FREE"),
        ("_IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x4e, 0x38)", "/dev/nvidiactl", "NV_ESC_RM_MAP_MEMORY"),
        ("_IOC(_IOC_READ|_IOC_WRITE, 0x46, 0xc8, 0x900)", "/dev/nvidiactl", "NV_ESC_CARD_INFO"),
        ("0xc04846d2", "/dev/nvidiactl", "NV_ESC_CHECK_VERSION_STR"),
        ("0xc00846d6", "/dev/nvidiactl", "NV_ESC_SYS_PARAMS"),
        ("_IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x27, 0x38)", "/dev/nvidia0", "NV_ESC_RM_ALLOC_MEMORY"),
        ("_IOC(_IOC_READ|_IOC_WRITE, 0x46, 0xc9, 0x4)", "/dev/nvidia0", "NV_ESC_REGISTER_FD"),
        ("_IOC(_IOC_READ|_IOC_WRITE, 0x46, 0xce, 0x10)", "/dev/nvidia0", "NV_ESC_ALLOC_OS_EVENT"),
        ("0xc23046d7", "/dev/nvidia0", "NV_ESC_NUMA_INFO"),
        ("0xc00846da", "/dev/nvidia0", "NV_ESC_WAIT_OPEN_COMPLETE"),
        ("_IOC(_IOC_NONE, 0, 0x1, 0x3000)", "/dev/nvidia-uvm", "UVM_INITIALIZE"),
        ("0x30000002", "/dev/nvidia-uvm", "UVM_DEINITIALIZE"),
        ("0x4b", "/dev/nvidia-uvm", "UVM_MM_INITIALIZE"),
        ("_IOC(_IOC_NONE, 0, 0x49, 0)", "/dev/nvidia-uvm", "UVM_CREATE_EXTERNAL_RANGE"),
        ("_IOC(_IOC_NONE, 0, 0x21, 0)", "/dev/nvidia-uvm", "UVM_MAP_EXTERNAL_ALLOCATION"),
        ("_IOC(_IOC_NONE, 0, 0x1b, 0)", "/dev/nvidia-uvm", "UVM_REGISTER_CHANNEL"),
        ("_IOC(_IOC_NONE, 0, 0x25, 0)", "/dev/nvidia-uvm", "UVM_REGISTER_GPU"),
        # KFD: strace's own name, and the raw number
        ("AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", "/dev/kfd", "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU"),
        ("0xc0284b16", "/dev/kfd", "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU"),
        ("0x80084b01", "/dev/kfd", "AMDKFD_IOC_GET_VERSION"),
        ("_IOC(_IOC_READ|_IOC_WRITE, 0x4b, 0x16, 0x10)", None, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU"),
        # tty, file and socket requests from the local logs
        ("0x5401 /* TCGETS */", "/dev/pts/0", "TCGETS"),
        ("TIOCGWINSZ", "/dev/pts/0", "TIOCGWINSZ"),
        ("0x80045430 /* TIOCGPTN */", "/dev/ptmx", "TIOCGPTN"),
        ("0x40045431", "/dev/ptmx", "TIOCSPTLCK"),
        ("0x5441", "/dev/ptmx", "TIOCGPTPEER"),
        ("0x541b", "socket", "FIONREAD"),
        ("FIONBIO", "socket:[6304]", "FIONBIO"),
        ("0x5451", "/tmp/x", "FIOCLEX"),
        ("0x8933 /* SIOCGIFINDEX */", "UDP:[1]", "SIOCGIFINDEX"),
        ("0x8912", "UDP:[1]", "SIOCGIFCONF"),
        ("0x8913", None, "SIOCGIFFLAGS"),
    ],
)
def test_requests_are_named(text: str, device: str | None, name: str) -> None:
    assert decode(text, device).name == name


def test_fields_and_family() -> None:
    r = decode("0xc020462a", "/dev/nvidiactl")
    assert (r.direction, r.type, r.type_char, r.nr, r.size) == ("read|write", 0x46, "F", 0x2A, 32)
    assert r.family == "nvidia" and r.label == "NV_ESC_RM_CONTROL"
    assert decode(0x5401).family == "tty" and decode(0x5421).family == "file"
    assert (
        decode(0x8933).family == "socket" and decode(0x4B, "/dev/nvidia-uvm").family == "nvidia-uvm"
    )


def test_the_device_decides_between_meanings() -> None:
    # a plain number is a UVM request only on the UVM device
    assert decode(0x4B).name is None and decode(0x4B, "/dev/nvidia-uvm").name == "UVM_MM_INITIALIZE"
    # the NVIDIA number sent to a pty (ENOTTY in local_tty_socket_ioctls.strace) is not named
    pty = decode("_IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2a, 0x20)", "/dev/pts/0")
    assert pty.name is None and pty.label == "0xc020462a" and pty.family is None
    # without a device, the 'F' magic with _IOWR still reads as NVIDIA
    assert decode(0xC020462A).name == "NV_ESC_RM_CONTROL"
    # framebuffer requests share 'F' but are _IO: not NVIDIA
    assert decode(0x4600).name is None


def test_unknown_names_strace_prints_are_kept() -> None:
    r = decode("BLKGETSIZE64", "/dev/sda")
    assert r.number is None and r.name == "BLKGETSIZE64" and r.label == "BLKGETSIZE64"


def test_device_families() -> None:
    assert device_family("/dev/nvidiactl") == "nvidia"
    assert device_family("/dev/nvidia7") == "nvidia"
    assert (
        device_family("/dev/nvidia-uvm") == device_family("/dev/nvidia-uvm-tools") == "nvidia-uvm"
    )
    assert device_family("/dev/nvidia-modeset") is None
    assert device_family("/dev/kfd") == "kfd"
    assert device_family("/tmp/nvidiactl") is None and device_family(None) is None


def test_tables_hold_the_header_values() -> None:
    # nv_escape.h / nv-ioctl-numbers.h / nv-ioctl-numa.h / uvm_ioctl.h / kfd_ioctl.h
    assert NV_ESCAPES[0x2A] == "NV_ESC_RM_CONTROL" and NV_ESCAPES[200] == "NV_ESC_CARD_INFO"
    assert NV_ESCAPES[215] == "NV_ESC_NUMA_INFO" and NV_ESCAPES[0x5E].endswith("MAPPING_INFO")
    assert UVM_IOCTLS[0x30000001] == "UVM_INITIALIZE" and UVM_IOCTLS[75] == "UVM_MM_INITIALIZE"
    assert UVM_IOCTLS[73] == "UVM_CREATE_EXTERNAL_RANGE" and 21 not in UVM_IOCTLS
    assert (
        KFD_IOCTLS[0x01] == "AMDKFD_IOC_GET_VERSION" and KFD_IOCTLS[0x26] == "AMDKFD_IOC_DBG_TRAP"
    )
    assert len(set(NV_ESCAPES.values())) == len(NV_ESCAPES)
