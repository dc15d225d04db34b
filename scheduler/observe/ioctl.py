"""Decode ioctl requests: split any number into the Linux ``_IOC`` fields and name it.

A request number packs four fields (include/uapi/asm-generic/ioctl.h): bits 0-7 ``nr``, bits
8-15 ``type`` (the driver's magic, ``'F'`` for NVIDIA, ``'K'`` for AMD KFD, ``'T'`` for
terminals), bits 16-29 ``size`` of the argument, bits 30-31 the direction (1 write, 2 read).
The same number can mean different things to different drivers, so naming uses the device the
request was sent to when it is known (strace's ``-y`` path, or the path the fd was opened
with): nvidia-uvm numbers are plain integers that only the device identifies.

    >>> r = decode("_IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2a, 0x20)", "/dev/nvidiactl")
    >>> r.name, r.direction, hex(r.number)
    ('NV_ESC_RM_CONTROL', 'read|write', '0xc020462a')
    >>> decode(0x4B, "/dev/nvidia-uvm").name
    'UVM_MM_INITIALIZE'

Tables: :mod:`ioctl_nvidia`, :mod:`ioctl_kfd`, :mod:`ioctl_linux` (each cites its header).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from labhive.scheduler.observe.ioctl_kfd import AMDKFD_IOCTL_BASE, KFD_IOCTLS
from labhive.scheduler.observe.ioctl_linux import SOCKET_IOCTLS, TTY_IOCTLS
from labhive.scheduler.observe.ioctl_nvidia import NV_ESCAPES, NV_IOCTL_MAGIC, UVM_IOCTLS

# include/uapi/asm-generic/ioctl.h
IOC_NRBITS, IOC_TYPEBITS, IOC_SIZEBITS, IOC_DIRBITS = 8, 8, 14, 2
IOC_NRSHIFT = 0
IOC_TYPESHIFT = IOC_NRSHIFT + IOC_NRBITS
IOC_SIZESHIFT = IOC_TYPESHIFT + IOC_TYPEBITS
IOC_DIRSHIFT = IOC_SIZESHIFT + IOC_SIZEBITS
IOC_NONE, IOC_WRITE, IOC_READ = 0, 1, 2

_DIRECTIONS = {0: "none", 1: "write", 2: "read", 3: "read|write"}
_DIR_WORDS = {"_IOC_NONE": 0, "_IOC_WRITE": IOC_WRITE, "_IOC_READ": IOC_READ}
_MACRO_DIRS = {"_IO": 0, "_IOW": IOC_WRITE, "_IOR": IOC_READ, "_IOWR": IOC_READ | IOC_WRITE}
_MACRO_RE = re.compile(r"\s*(_IOC|_IOWR|_IOR|_IOW|_IO)\((.*)\)\s*$")
_COMMENT_RE = re.compile(r"\s*(\S+)\s*/\*\s*(.*?)\s*\*/\s*$")

#: Symbolic names strace prints -> numbers (strace names the requests it knows).
_BY_NAME: dict[str, int] = {
    name: num for table in (TTY_IOCTLS, SOCKET_IOCTLS) for num, name in table.items()
}
_BY_NAME.update({name: num for num, name in UVM_IOCTLS.items()})
#: KFD names strace prints (when the size matches its headers): their size is not known here.
_KFD_BY_NAME: dict[str, int] = {name: nr for nr, name in KFD_IOCTLS.items()}


@dataclass(frozen=True, slots=True)
class IoctlRequest:
    """A decoded request. ``number`` is None only for a name strace printed that no table
    here knows (then the fields are None too and ``name`` is strace's)."""

    number: int | None
    direction: str | None
    type: int | None
    nr: int | None
    size: int | None
    name: str | None
    family: str | None  # "nvidia", "nvidia-uvm", "kfd", "tty", "file", "socket"

    @property
    def type_char(self) -> str | None:
        """The magic as a character (``'F'``) when printable."""
        if self.type is None:
            return None
        return chr(self.type) if 0x20 < self.type < 0x7F else None

    @property
    def label(self) -> str:
        """The name when known, else the raw number in hex."""
        if self.name:
            return self.name
        return "?" if self.number is None else hex(self.number)

    def as_dict(self) -> dict[str, object]:
        return {
            "number": None if self.number is None else hex(self.number),
            "direction": self.direction,
            "type": self.type,
            "type_char": self.type_char,
            "nr": self.nr,
            "size": self.size,
            "name": self.name,
            "family": self.family,
        }


def ioc(direction: int, type_: int, nr: int, size: int) -> int:
    """The number ``_IOC(direction, type, nr, size)`` stands for."""
    return (
        (direction << IOC_DIRSHIFT)
        | (size << IOC_SIZESHIFT)
        | (type_ << IOC_TYPESHIFT)
        | (nr << IOC_NRSHIFT)
    )


def split_request(number: int) -> tuple[int, int, int, int]:
    """(direction, type, nr, size) of a request number."""
    number &= 0xFFFFFFFF
    return (
        (number >> IOC_DIRSHIFT) & ((1 << IOC_DIRBITS) - 1),
        (number >> IOC_TYPESHIFT) & ((1 << IOC_TYPEBITS) - 1),
        (number >> IOC_NRSHIFT) & ((1 << IOC_NRBITS) - 1),
        (number >> IOC_SIZESHIFT) & ((1 << IOC_SIZEBITS) - 1),
    )


def _macro_int(token: str) -> int:
    token = token.strip()
    if len(token) == 3 and token[0] == token[2] == "'":
        return ord(token[1])
    return int(token, 0)


def parse_request(text: str) -> tuple[int | None, str | None]:
    """Turn strace's rendering of a request into (number, name strace gave).

    Forms: ``0xc020462a``, ``0x4b``, ``0x5401 /* TCGETS */``, ``0xc020462a /* _IOC(...) */``,
    ``TCGETS``, ``_IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2a, 0x20)``, ``_IOR('T', 0x30, 0x4)``.
    Raises ValueError for anything else."""
    text = text.strip()
    cm = _COMMENT_RE.match(text)
    if cm is not None:  # -X verbose: the number, then strace's reading of it in a comment
        number, _ = parse_request(cm.group(1))
        inner = cm.group(2)
        return number, (None if inner.startswith("_IO") else inner)
    mm = _MACRO_RE.match(text)
    if mm is not None:
        macro, body = mm.groups()
        parts = [p.strip() for p in body.split(",")]
        if macro == "_IOC":
            if len(parts) != 4:
                raise ValueError(f"not an _IOC(): {text}")
            direction = 0
            for word in parts[0].split("|"):
                direction |= (
                    _DIR_WORDS[word.strip()] if word.strip() in _DIR_WORDS else int(word, 0)
                )
            return ioc(
                direction, _macro_int(parts[1]), _macro_int(parts[2]), _macro_int(parts[3])
            ), None
        want = 2 if macro == "_IO" else 3
        if len(parts) != want:
            raise ValueError(f"not an {macro}(): {text}")
        size = _macro_int(parts[2]) if want == 3 else 0
        return ioc(_MACRO_DIRS[macro], _macro_int(parts[0]), _macro_int(parts[1]), size), None
    if text[:1].isdigit() or text[:1] == "-":
        return int(text, 0) & 0xFFFFFFFF, None
    if re.fullmatch(r"[A-Z_][A-Z0-9_]*", text):
        return _BY_NAME.get(text), text
    raise ValueError(f"not an ioctl request: {text!r}")


def device_family(path: str | None) -> str | None:
    """Which request table a device path selects: "nvidia" (/dev/nvidiactl, /dev/nvidiaN),
    "nvidia-uvm", "kfd", or None for anything else / unknown."""
    if not path or not path.startswith("/dev/"):
        return None
    base = path.rsplit("/", 1)[-1].split("<", 1)[0]
    if base.startswith("nvidia-uvm"):
        return "nvidia-uvm"
    if base == "nvidiactl" or (base.startswith("nvidia") and base[6:].isdigit()):
        return "nvidia"
    if base == "kfd":
        return "kfd"
    return None


@lru_cache(maxsize=4096)
def decode_number(number: int, device: str | None = None) -> IoctlRequest:
    """Decode a request number sent to ``device`` (a path, or None when not known)."""
    number &= 0xFFFFFFFF
    direction, type_, nr, size = split_request(number)
    family = device_family(device)
    name: str | None = None
    fam: str | None = None
    known_device = device is not None and device != ""
    if family == "nvidia-uvm" or (not known_device and number in (0x30000001, 0x30000002)):
        name, fam = UVM_IOCTLS.get(number), "nvidia-uvm"
    elif (
        type_ == NV_IOCTL_MAGIC
        and direction == IOC_READ | IOC_WRITE
        and (family == "nvidia" or not known_device)
    ):
        name, fam = NV_ESCAPES.get(nr), "nvidia"
    elif (
        type_ == AMDKFD_IOCTL_BASE
        and direction != IOC_NONE
        and (family == "kfd" or not known_device)
    ):
        name, fam = KFD_IOCTLS.get(nr), "kfd"
    if name is None:
        if number in TTY_IOCTLS:
            name = TTY_IOCTLS[number]
            fam = "file" if name.startswith("FIO") else "tty"
        elif number in SOCKET_IOCTLS:
            name, fam = SOCKET_IOCTLS[number], "socket"
        elif fam is not None and family is None:
            fam = None  # a guess from the magic alone that named nothing
    return IoctlRequest(number, _DIRECTIONS[direction], type_, nr, size, name, fam)


def decode(request: int | str, device: str | None = None) -> IoctlRequest:
    """Decode a request given as a number or as strace printed it (see :func:`parse_request`).

    ``device`` is the path the fd refers to ("/dev/nvidiactl", "/dev/nvidia-uvm"); without it
    NVIDIA control and KFD requests are still named by their magic, nvidia-uvm ones are not
    (except UVM_INITIALIZE/DEINITIALIZE, whose numbers nothing else uses)."""
    if isinstance(request, int):
        return decode_number(request, device)
    number, strace_name = parse_request(request)
    if number is None:
        if strace_name in _KFD_BY_NAME:
            nr = _KFD_BY_NAME[strace_name]
            return IoctlRequest(None, None, AMDKFD_IOCTL_BASE, nr, None, strace_name, "kfd")
        return IoctlRequest(None, None, None, None, None, strace_name, None)
    got = decode_number(number, device)
    if got.name is None and strace_name:
        return IoctlRequest(
            got.number, got.direction, got.type, got.nr, got.size, strace_name, None
        )
    return got
