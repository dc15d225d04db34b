"""Images for the container tests, built for real: a tiny busybox image in every run, and a
Debian image with python3 built once per machine (mmdebstrap, about 80 s) into a cache the suite
reuses. Tests skip, saying why, where podman, runc, busybox-static or a Debian mirror is missing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.executors import container, images, limits

TINY = "labhive/test-tiny"
PYTHON_PACKAGES = ("python3",)
CACHE = Path(os.environ.get("LABHIVE_TEST_IMAGES", Path.home() / ".cache/labhive-test-images"))


def podman_or_skip() -> container.Support:
    support = container.detect()
    if support.podman is None:
        pytest.skip(f"containers cannot run here: {support.why_not} (see .ci/deps.sh)")
    if os.geteuid() != 0:
        pytest.skip("the container tests run podman as root, as the service does")
    return support


def _has(image: str) -> bool:
    return images._short(image) in {i.name for i in images.list_images()}


@pytest.fixture(scope="session")
def tiny_image() -> Iterator[str]:
    """busybox in a 2 MB image, imported in this run under a name of its own (another test run
    on this host may be re-importing its own at the same moment), removed at the end."""
    podman_or_skip()
    name = f"{TINY}-{os.getpid()}"
    try:
        images.busybox_image(name)
    except UserError as err:
        pytest.skip(str(err))
    yield name
    subprocess.run(["podman", "rmi", "--force", name], capture_output=True, check=False)


@pytest.fixture(scope="session")
def python_image() -> str:
    """Debian minbase with python3, built once per machine (keyed by its package list)."""
    podman_or_skip()
    key = hashlib.sha256(",".join(PYTHON_PACKAGES).encode()).hexdigest()[:12]
    name = f"labhive/test-python3-{key}"
    if _has(name):
        return name
    if shutil.which("mmdebstrap") is None:
        pytest.skip("mmdebstrap is not installed (apt-get install mmdebstrap)")
    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        images.build(name, PYTHON_PACKAGES, tarball=CACHE / f"{key}.tar", progress=print)
    except UserError as err:
        pytest.skip(f"cannot build the Debian test image (no mirror reachable?): {err}")
    return name


def containers_of(job_id: str, data_dir: Path) -> list[str]:
    """Names of the containers podman still has for a job of the service with this data dir
    (stopped ones included); other test runs' containers, on this host too, are not counted."""
    scope = limits.scope_name(data_dir.resolve())
    filters = [
        "--filter",
        f"label=labhive.job={job_id}",
        "--filter",
        f"label=labhive.service={scope}",
    ]
    done = subprocess.run(
        ["podman", "ps", "--all", "--format", "{{.Names}}", *filters],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def remove_containers(data_dir: Path) -> None:
    """Whatever a failed test left running for this service's data dir goes (others' stay)."""
    scope = limits.scope_name(data_dir.resolve())
    names = subprocess.run(
        [
            "podman",
            "ps",
            "--all",
            "--format",
            "{{.Names}}",
            "--filter",
            f"label=labhive.service={scope}",
        ],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    if names:
        subprocess.run(["podman", "rm", "--force", "--time", "0", *names], capture_output=True)
