"""Which NVIDIA device nodes a task may open, as a cgroup v2 device filter (an eBPF program).

cgroup v2 has no ``devices`` controller: the kernel asks the ``BPF_PROG_TYPE_CGROUP_DEVICE``
programs attached to a process's v2 cgroup (and its ancestors) whether it may open, mknod or
read/write a device node, and returns EPERM when one says no, whatever the node's file mode.
That hook works even where the unified hierarchy has no controllers (a hybrid host), since cgroup
BPF is not a controller.

The rules (``DeviceRules``), the same on cgroup v1 (``limits._v1_devices``) and v2:
- ``/dev/nvidiaN`` (char 195:N, N < 254): only the task's own GPUs;
- ``nvidiactl`` (195:255), ``nvidia-modeset`` (195:254) and ``nvidia-uvm``/``nvidia-uvm-tools``
  (a dynamic major, read from ``/proc/devices``): only when the task has a GPU;
- every other NVIDIA char major in ``/proc/devices`` (``nvidia-caps`` for MIG,
  ``nvidia-nvswitch``, ``nvidia-nvlink``, ...): denied to every task (nvidia-container-runtime
  does not hand them to containers either; LabHive does not schedule MIG slices);
- every other device (``/dev/null``, ttys, block devices): allowed. The filter is default-allow
  outside NVIDIA's majors, as the v1 rules are: it guards GPUs, not the rest of ``/dev``, which
  file modes guard.

The program, written here as raw instructions (runc's ``devices/ebpf`` and crun's ``ebpf.c``
build theirs the same way), reads the device's type, major and minor from its context
(``struct bpf_cgroup_dev_ctx``: ``access_type`` = access << 16 | type, ``major``, ``minor``) and
returns 1 (allow) or 0 (deny).
"""

from __future__ import annotations

import contextlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from labhive.scheduler.executors import bpf

NVIDIA_MAJOR = 195
#: /dev/nvidia0.. are minors 0..253; 254 is nvidia-modeset, 255 nvidiactl.
GPU_MINORS = range(0, 254)
SHARED_MINORS = (254, 255)
_DEV_CHAR = 2  # BPF_DEVCG_DEV_CHAR
PROGRAM_NAME = "labhive_devices"


@dataclass(frozen=True, slots=True)
class NvidiaMajors:
    """The host's NVIDIA char majors: 195 (GPUs, control, modeset), uvm's, and the others."""

    uvm: int | None = None
    others: tuple[int, ...] = ()


def nvidia_majors(proc_devices: str) -> NvidiaMajors:
    """Parse ``/proc/devices``: its character section names each driver's major."""
    uvm, others = None, []
    chars = proc_devices.split("Block devices:")[0]
    for line in chars.splitlines():
        parts = line.split()
        if len(parts) != 2 or not parts[0].isdigit() or not parts[1].startswith("nvidia"):
            continue
        major = int(parts[0])
        if parts[1] == "nvidia-uvm":
            uvm = major
        elif major != NVIDIA_MAJOR:
            others.append(major)
    return NvidiaMajors(uvm, tuple(sorted(set(others))))


def host_nvidia_majors(path: Path = Path("/proc/devices")) -> NvidiaMajors:
    with contextlib.suppress(OSError):
        return nvidia_majors(path.read_text())
    return NvidiaMajors()


@dataclass(frozen=True, slots=True)
class DeviceRules:
    """A task's NVIDIA device rules: ``gpus`` are the minors of its own ``/dev/nvidiaN``."""

    gpus: tuple[int, ...]
    majors: NvidiaMajors = NvidiaMajors()

    def allows(self, kind: str, major: int, minor: int) -> bool:
        """What the program decides (``kind`` "c" or "b"), spelled out for tests and docs."""
        if kind != "c":
            return True
        if major == NVIDIA_MAJOR:
            return minor in self.gpus or (bool(self.gpus) and minor in SHARED_MINORS)
        if major == self.majors.uvm:
            return bool(self.gpus)
        return major not in self.majors.others

    def denied(self) -> str:
        """The denial in words, for the task's limits record."""
        others = "".join(f", {m}" for m in self.majors.others)
        uvm = f", nvidia-uvm {self.majors.uvm}" if self.majors.uvm is not None else ""
        if not self.gpus:
            return f"every NVIDIA device (char major {NVIDIA_MAJOR}{uvm}{others})"
        tail = f"; every device of major{others[1:]}" if others else ""
        return f"/dev/nvidia* (major {NVIDIA_MAJOR}) but its own GPUs{tail}"


# ---- the program ---------------------------------------------------------------------------

_LDX_W = 0x61  # BPF_LDX | BPF_MEM | BPF_W
_AND_K = 0x57  # BPF_ALU64 | BPF_AND | BPF_K
_MOV_K = 0xB7  # BPF_ALU64 | BPF_MOV | BPF_K
_JA = 0x05  # BPF_JMP | BPF_JA
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JNE_K = 0x55  # BPF_JMP | BPF_JNE | BPF_K
_EXIT = 0x95  # BPF_JMP | BPF_EXIT
_R0, _R1, _TYPE, _MAJOR, _MINOR = 0, 1, 2, 3, 4

#: One instruction: (code, dst register, immediate, label jumped to or None).
_Insn = tuple[int, int, int, str | None]


def program(rules: DeviceRules) -> bytes:
    """The filter's instructions::

      type = ctx.access_type & 0xffff; major = ctx.major; minor = ctx.minor
      if type != char: allow
      if major != 195: goto majors
      if minor is one of the task's GPUs (or, with a GPU, 254/255): allow
      deny
    majors:
      if major == uvm: allow if the task has a GPU, else deny
      if major is another NVIDIA major: deny
      allow
    """
    code: list[_Insn | str] = [  # a str marks where a label is
        (_LDX_W, _TYPE, 0, None),
        (_AND_K, _TYPE, 0xFFFF, None),
        (_LDX_W, _MAJOR, 4, None),
        (_LDX_W, _MINOR, 8, None),
        (_JNE_K, _TYPE, _DEV_CHAR, "allow"),
        (_JNE_K, _MAJOR, NVIDIA_MAJOR, "majors"),
    ]
    granted = sorted(set(rules.gpus)) + (list(SHARED_MINORS) if rules.gpus else [])
    code += [(_JEQ_K, _MINOR, minor, "allow") for minor in granted]
    code += [(_JA, 0, 0, "deny"), "majors"]
    if rules.majors.uvm is not None:
        code.append((_JEQ_K, _MAJOR, rules.majors.uvm, "allow" if rules.gpus else "deny"))
    code += [(_JEQ_K, _MAJOR, major, "deny") for major in rules.majors.others]
    code += ["allow", (_MOV_K, _R0, 1, None), (_EXIT, 0, 0, None)]
    code += ["deny", (_MOV_K, _R0, 0, None), (_EXIT, 0, 0, None)]
    return _assemble(code)


def _assemble(code: list[_Insn | str]) -> bytes:
    """Encode ``struct bpf_insn``s, a jump's offset counted from the instruction after it. The
    loads read the context (r1) at the immediate's offset."""
    places: dict[str, int] = {}
    insns: list[_Insn] = []
    for item in code:
        if isinstance(item, str):
            places[item] = len(insns)
        else:
            insns.append(item)
    out = []
    for i, (op, dst, imm, label) in enumerate(insns):
        if op == _LDX_W:
            out.append(struct.pack("<BBhi", op, (_R1 << 4) | dst, imm, 0))
            continue
        off = 0 if label is None else places[label] - (i + 1)
        out.append(struct.pack("<BBhi", op, dst, off, imm))
    return b"".join(out)


# ---- loading and attaching -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Attached:
    """A filter on a cgroup: the kernel's id of the program (``bpftool prog show id N``)."""

    prog_id: int


def attach(cgroup: Path, rules: DeviceRules) -> Attached:
    """Load the task's filter and attach it to its cgroup v2 directory (OSError when the kernel
    refuses: not root, no cgroup BPF). The attachment holds the program: our fd is closed
    here, and the program goes when the cgroup is removed."""
    prog = bpf.load_device_program(program(rules), PROGRAM_NAME)
    try:
        target = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
        try:
            bpf.attach_device_program(target, prog)
        finally:
            os.close(target)
        return Attached(bpf.prog_id(prog))
    finally:
        os.close(prog)
