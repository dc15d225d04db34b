"""The few ``bpf(2)`` commands a cgroup device filter needs, called through ctypes.

No libbpf, no bpftool, no new dependency: runc and crun load their device filters the same way.
Each command takes a ``union bpf_attr``; only the leading fields a command reads are declared
here, and the rest of the 128 bytes passed stays zero, as the kernel requires of the fields it
knows and we do not set. Errors come back as ``OSError`` with the kernel's errno (EPERM: not
root / no CAP_BPF; EINVAL: a kernel without cgroup BPF, or a program it refuses, whose verifier
log is then in the message).
"""

from __future__ import annotations

import ctypes
import os
import platform

#: The syscall's number per architecture (asm/unistd.h); others: not supported here.
_SYS_BPF = {"x86_64": 321, "aarch64": 280, "ppc64le": 361, "s390x": 351}

BPF_PROG_LOAD = 5
BPF_PROG_ATTACH = 8
BPF_PROG_DETACH = 9
BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_PROG_TYPE_CGROUP_DEVICE = 15
BPF_CGROUP_DEVICE = 6
#: Several programs on one cgroup and its ancestors all run; a device is allowed only when
#: every one allows it (so a filter of systemd's or a container engine's above still holds).
BPF_F_ALLOW_MULTI = 2
_ATTR_SIZE = 128
_LOG_SIZE = 1 << 16


class _ProgLoad(ctypes.Structure):
    _fields_ = [
        ("prog_type", ctypes.c_uint32),
        ("insn_cnt", ctypes.c_uint32),
        ("insns", ctypes.c_uint64),
        ("license", ctypes.c_uint64),
        ("log_level", ctypes.c_uint32),
        ("log_size", ctypes.c_uint32),
        ("log_buf", ctypes.c_uint64),
        ("kern_version", ctypes.c_uint32),
        ("prog_flags", ctypes.c_uint32),
        ("prog_name", ctypes.c_char * 16),
        ("prog_ifindex", ctypes.c_uint32),
        ("expected_attach_type", ctypes.c_uint32),
        ("_rest", ctypes.c_uint8 * (_ATTR_SIZE - 72)),
    ]


class _ProgAttach(ctypes.Structure):
    _fields_ = [
        ("target_fd", ctypes.c_uint32),
        ("attach_bpf_fd", ctypes.c_uint32),
        ("attach_type", ctypes.c_uint32),
        ("attach_flags", ctypes.c_uint32),
        ("_rest", ctypes.c_uint8 * (_ATTR_SIZE - 16)),
    ]


class _GetId(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint32),
        ("next_id", ctypes.c_uint32),
        ("open_flags", ctypes.c_uint32),
        ("_rest", ctypes.c_uint8 * (_ATTR_SIZE - 12)),
    ]


class _InfoByFd(ctypes.Structure):
    _fields_ = [
        ("bpf_fd", ctypes.c_uint32),
        ("info_len", ctypes.c_uint32),
        ("info", ctypes.c_uint64),
        ("_rest", ctypes.c_uint8 * (_ATTR_SIZE - 16)),
    ]


class _ProgInfo(ctypes.Structure):  # struct bpf_prog_info, its first fields
    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("_rest", ctypes.c_uint8 * 8)]


_libc = ctypes.CDLL(None, use_errno=True)


def _bpf(cmd: int, attr: ctypes.Structure) -> int:
    number = _SYS_BPF.get(platform.machine())
    if number is None:
        raise OSError(0, f"bpf(2) is not wired up for {platform.machine()} in LabHive")
    ret = int(_libc.syscall(number, cmd, ctypes.byref(attr), ctypes.sizeof(attr)))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


def load_device_program(insns: bytes, name: str) -> int:
    """Load a ``BPF_PROG_TYPE_CGROUP_DEVICE`` program; return its fd. A refused program raises
    with the verifier's log (asked for on a second try only: the log costs time)."""
    code = ctypes.create_string_buffer(insns, len(insns))
    license = ctypes.create_string_buffer(b"GPL")  # no GPL-only helpers are called; any works
    attr = _ProgLoad(
        prog_type=BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt=len(insns) // 8,
        insns=ctypes.addressof(code),
        license=ctypes.addressof(license),
        prog_name=name.encode()[:15],
        expected_attach_type=BPF_CGROUP_DEVICE,
    )
    try:
        return _bpf(BPF_PROG_LOAD, attr)
    except OSError as err:
        if err.errno != 22:  # EINVAL: the verifier may say why
            raise
    log = ctypes.create_string_buffer(_LOG_SIZE)
    attr.log_level, attr.log_size, attr.log_buf = 1, _LOG_SIZE, ctypes.addressof(log)
    try:
        return _bpf(BPF_PROG_LOAD, attr)
    except OSError as err:
        verifier = log.value.decode(errors="replace").strip()
        raise OSError(err.errno, f"{err.strerror}; verifier: {verifier[-2000:]}") from None


def attach_device_program(cgroup_fd: int, prog_fd: int) -> None:
    """Attach to the cgroup (an fd of its directory), alongside programs already there."""
    attr = _ProgAttach(
        target_fd=cgroup_fd,
        attach_bpf_fd=prog_fd,
        attach_type=BPF_CGROUP_DEVICE,
        attach_flags=BPF_F_ALLOW_MULTI,
    )
    _bpf(BPF_PROG_ATTACH, attr)


def prog_id(prog_fd: int) -> int:
    """The kernel's id of a loaded program (what ``bpftool prog show id N`` names)."""
    info = _ProgInfo()
    attr = _InfoByFd(bpf_fd=prog_fd, info_len=ctypes.sizeof(info), info=ctypes.addressof(info))
    _bpf(BPF_OBJ_GET_INFO_BY_FD, attr)
    return int(info.id)


def prog_loaded(ident: int) -> bool:
    """Whether a program of that id is still in the kernel (freed once nothing holds it)."""
    try:
        fd = _bpf(BPF_PROG_GET_FD_BY_ID, _GetId(id=ident))
    except FileNotFoundError:
        return False
    os.close(fd)
    return True
