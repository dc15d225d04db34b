"""A small real file system for the disk tests: a tmpfs of a few MiB mounted for one test, so
"the disk is full" is the kernel's ENOSPC, not a mock."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

MIB = 1024 * 1024


@contextmanager
def small_fs(where: Path, size_mib: int) -> Iterator[Path]:
    """A tmpfs of ``size_mib`` MiB at ``where`` (root only: skipped otherwise), unmounted after."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0711", "tmpfs", str(where)],
        check=True,
    )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def free_mib(path: Path) -> float:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize / MIB


def fill(path: Path) -> None:
    """Write zeros into ``path`` until the file system says ENOSPC (what a runaway task does)."""
    block = bytes(MIB)
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(block)
        except OSError:
            pass
        # the last partial block: byte by byte would be slow; 4 KiB steps reach the end
        try:
            while True:
                f.write(block[:4096])
        except OSError:
            pass
