"""Given ``labhive image``, expect the images jobs can name to be listed, and every mistake or
missing tool to end with exit code 2 and a message that says what to do (no traceback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from container_support import podman_or_skip, tiny_image

__all__ = ["tiny_image"]  # a fixture, used by name


def labhive(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=path) if path is not None else None
    cmd = [sys.executable, "-m", "labhive.scheduler.cli", "image", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


def test_ls_lists_the_images_jobs_can_name(tiny_image):
    listed = labhive("ls")
    assert listed.returncode == 0 and tiny_image in listed.stdout.split()
    names = [row["name"] for row in json.loads(labhive("ls", "--json").stdout)]
    assert tiny_image in names


def test_rm_of_an_unknown_image_says_so():
    podman_or_skip()
    done = labhive("rm", "no-such-image")
    assert done.returncode == 2
    assert "removing image labhive/no-such-image failed" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "path", "message"),
    [
        (["ls"], "/nonexistent", "podman is not installed here: install it (apt-get install"),
        (["build", "x", "--packages", "python3"], "/nonexistent", "mmdebstrap is not installed"),
        (["build", "x", "--packages", "python3;rm"], None, "not a Debian package name"),
        (["build", "Bad Name"], None, "bad image name 'Bad Name'"),
    ],
)
def test_mistakes_and_missing_tools_end_with_a_message(args, path, message):
    done = labhive(*args, path=path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
