"""Container images for jobs: build them from Debian packages, list them, remove them.

No public registry is reachable from many clusters this platform runs on, so images are built
locally: ``mmdebstrap --variant=minbase`` writes a Debian root filesystem with the requested
packages into a tarball, and ``podman import`` turns it into an image named ``labhive/NAME``.
Where a registry is reachable, podman pulls a job's image as usual (``--pull missing`` at the
launch; the service accepts such names only when ``LABHIVE_IMAGE_PULL=1``, since it cannot tell
otherwise whether a registry answers: that path is not exercised by the tests here).

Images live in podman's storage of the user that runs the commands: build them as the user that
runs ``labhive serve`` (root, for a service that runs tasks as their users).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from labhive.scheduler.core.errors import UserError

PREFIX = "labhive/"
#: The environment an imported root filesystem lacks (``podman import`` keeps no config).
IMAGE_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_SUITE = "bookworm"
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9.+-]*$")
#: How long a listing of the images serves the submit-time check before it is asked again.
LIST_TTL_S = 2.0


@dataclass(frozen=True, slots=True)
class Image:
    name: str  # as a job names it: labhive/NAME:latest is also reachable as labhive/NAME
    id: str
    size: int
    created: float


def podman() -> str:
    """The podman binary, or a UserError that says what to install."""
    found = shutil.which("podman")
    if found is None:
        raise UserError(
            "podman is not installed here: install it (apt-get install podman runc) "
            "to run jobs in containers and to manage images"
        )
    return found


def qualified(name: str) -> str:
    """``numpy`` -> ``labhive/numpy``; a name with a slash is kept as it is."""
    return name if "/" in name else PREFIX + name


def _run(argv: Sequence[str], what: str, timeout_s: float = 120) -> str:
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        raise UserError(f"{what} took longer than {timeout_s:.0f} s: is podman stuck?") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no message"]
        raise UserError(f"{what} failed: {detail[0]}")
    return done.stdout


def list_images() -> list[Image]:
    """Every tagged image in podman's storage, by the names a job can use."""
    out = _run([podman(), "images", "--format", "json"], "listing the images (podman images)")
    images = []
    for row in json.loads(out or "[]"):
        for name in row.get("Names") or []:
            images.append(
                Image(
                    name=_short(name),
                    id=str(row.get("Id", ""))[:12],
                    size=int(row.get("Size") or 0),
                    created=float(row.get("Created") or 0),
                )
            )
    return sorted(images, key=lambda i: i.name)


def _short(name: str) -> str:
    """podman reports ``localhost/labhive/x:latest``; jobs write ``labhive/x``."""
    name = name.removeprefix("localhost/")
    return name.removesuffix(":latest")


def remove(name: str) -> None:
    _run([podman(), "rmi", qualified(name)], f"removing image {qualified(name)}")


class Catalog:
    """Which images a job may name: those in local storage, or any when pulls are allowed."""

    def __init__(self, pull: bool | None = None) -> None:
        self.pull = os.environ.get("LABHIVE_IMAGE_PULL") == "1" if pull is None else pull
        self._names: frozenset[str] = frozenset()
        self._at = float("-inf")

    def names(self) -> frozenset[str]:
        if time.monotonic() - self._at > LIST_TTL_S:
            self._names = frozenset(i.name for i in list_images())
            self._at = time.monotonic()
        return self._names

    def check(self, image: str) -> None:
        """Raise a UserError naming the available images when ``image`` cannot be had."""
        if self.pull or _short(image) in self.names():
            return
        self._at = float("-inf")  # built a moment ago? ask podman again before refusing
        if _short(image) in self.names():
            return
        have = ", ".join(sorted(self.names())) or "none (an admin makes one: labhive image build)"
        raise UserError(
            f"image {image!r} is not available on this cluster and no registry is configured; "
            f"images it has: {have}"
        )


# ---- build ---------------------------------------------------------------------------------


def parse_packages(text: str) -> list[str]:
    packages = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in packages if not _PACKAGE.match(p)]
    if bad:
        raise UserError(f"not a Debian package name: {bad[0]!r} (write --packages a,b,c)")
    return packages


def build(
    name: str,
    packages: Sequence[str],
    *,
    suite: str = DEFAULT_SUITE,
    mirror: str | None = None,
    progress: Callable[[str], None] = print,
    tarball: Path | None = None,
) -> str:
    """mmdebstrap a minbase root filesystem with ``packages`` and import it; return its name.

    With ``tarball``, the root filesystem is kept there and, when it already exists, reused
    (the test suite builds its Debian image once per machine this way)."""
    if not _NAME.match(name.removeprefix(PREFIX)):
        raise UserError(f"bad image name {name!r}: lowercase letters, digits, '.', '_', '-'")
    tool = shutil.which("mmdebstrap")
    if tool is None:
        raise UserError("mmdebstrap is not installed here: install it (apt-get install mmdebstrap)")
    image = qualified(name)
    with tempfile.TemporaryDirectory(prefix="labhive-image-") as tmp:
        rootfs = tarball or Path(tmp) / "rootfs.tar"
        if not rootfs.exists():
            what = ", ".join(packages) or "minbase"
            progress(f"building {image} from Debian {suite} with {what} (about 80 s)")
            partial = rootfs.with_name(f".{rootfs.name}.partial")
            argv = [tool, "--variant=minbase", "--mode=auto", "--format=tar"]
            if packages:
                argv.append("--include=" + ",".join(packages))
            _stream([*argv, suite, str(partial), *([mirror] if mirror else [])], progress)
            partial.replace(rootfs)
        import_rootfs(rootfs, image, progress)
    progress(f"built {image}")
    return image


def import_rootfs(rootfs: Path, image: str, progress: Callable[[str], None] = print) -> None:
    """``podman import`` a root filesystem tarball as ``image``, with a usable PATH; the image
    it replaces is removed (unless a container still uses it) rather than left dangling."""
    progress(f"importing {rootfs.stat().st_size // (1 << 20)} MiB into podman as {image}")
    before = subprocess.run(
        [podman(), "image", "inspect", "--format", "{{.Id}}", image],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    new = _run(
        [podman(), "import", "--quiet", "--change", f"ENV {IMAGE_PATH}", str(rootfs), image],
        f"importing {image} (podman import)",
        timeout_s=600,
    ).strip()
    if before and before not in new:
        subprocess.run([podman(), "rmi", before], capture_output=True, check=False)


def _stream(argv: Sequence[str], progress: Callable[[str], None]) -> None:
    """Run a long command and pass its lines on as progress; keep the tail for the error."""
    tail: list[str] = []
    with subprocess.Popen(
        list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            tail = [*tail[-4:], line]
            if line.startswith(("I:", "W:", "E:")):
                progress(f"  {line}")
    if proc.returncode != 0:
        detail = " / ".join(tail) or "no output"
        raise UserError(
            f"mmdebstrap failed (exit {proc.returncode}): {detail}; "
            "building needs a reachable Debian mirror (pass --mirror URL for a local one)"
        )


# ---- a tiny image without a mirror ---------------------------------------------------------

BUSYBOX = "/bin/busybox"


def busybox_image(name: str = "labhive/busybox", busybox: str = BUSYBOX) -> str:
    """A 2 MB image of busybox-static and its applets, made offline (tests, labs, benchmarks):
    no mirror is needed, only Debian's busybox-static package on the host."""
    if not os.path.exists(busybox) or _dynamic(busybox):
        raise UserError("busybox-static is not installed here: apt-get install busybox-static")
    with tempfile.TemporaryDirectory(prefix="labhive-image-") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True)
        with tarfile.open(tarball, "w") as tar:
            for d, mode in (("bin", 0o755), ("etc", 0o755), ("tmp", 0o1777)):
                info = tarfile.TarInfo(d)
                info.type, info.mode = tarfile.DIRTYPE, mode
                tar.addfile(info)
            tar.add(busybox, "bin/busybox")
            for applet in applets.stdout.split():
                if applet != "busybox":
                    link = tarfile.TarInfo(f"bin/{applet}")
                    link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                    tar.addfile(link)
        import_rootfs(tarball, qualified(name), progress=lambda _: None)
    return qualified(name)


def _dynamic(path: str) -> bool:
    """Whether the binary needs a dynamic loader (then it cannot run alone in an image)."""
    with open(path, "rb") as f:
        return b"ld-linux" in f.read(1 << 16)
