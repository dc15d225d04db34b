"""What the isolation tests share: a directory every uid may pass through (pytest's own temp
dirs are 0700 root, which would deny other uids everything for the wrong reason), and a probe
command that reports, as JSON on stdout, who it runs as and what it could read."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from service_fixtures import Live, live_service

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="switching a task's uid needs the service to run as root"
)

UID_A, UID_B = 200101, 200102

PROBE = """
import json, os, sys
out = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
       "home": os.environ.get("HOME"), "cwd": os.getcwd(), "env": sorted(os.environ),
       "tries": {}}
for label, how, path in json.loads(os.environ["PROBE_TARGETS"]):
    path = os.path.expanduser(path)  # "~/x": in the task's own work dir, by absolute path
    try:
        if how == "list":
            os.listdir(path)
        elif how == "write":
            with open(path, "w") as f:
                f.write("mine")
        else:
            with open(path, "rb") as f:
                f.read(1)
        out["tries"][label] = "ok"
    except OSError as err:
        out["tries"][label] = err.errno
print(json.dumps(out), flush=True)
"""


def user_python() -> str:
    """A Python interpreter other uids can execute: the test run's own may live in a 0700
    home (here /root/.pyenv), so the system's is preferred; the probe needs only the stdlib."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", sys.executable):
        if os.path.exists(candidate) and _world_executable(Path(candidate).resolve()):
            return candidate
    pytest.skip("no Python interpreter here that other uids can execute")


def _world_executable(path: Path) -> bool:
    if not os.stat(path).st_mode & 0o001:
        return False
    return all(os.stat(d).st_mode & 0o001 for d in path.parents)


def probe_command() -> str:
    return f"{shlex.quote(user_python())} -c {shlex.quote(PROBE)}"


def probe_env(targets: Sequence[tuple[str, str, str | Path]]) -> dict[str, str]:
    return {"PROBE_TARGETS": json.dumps([(label, how, str(path)) for label, how, path in targets])}


def parse_probe(stdout: bytes) -> dict:
    lines = [line for line in stdout.decode().splitlines() if line.startswith("{")]
    assert lines, f"the probe printed no report: {stdout!r}"
    return json.loads(lines[-1])


@contextmanager
def open_tmp_dir(root: str = "/tmp") -> Iterator[Path]:
    """A fresh directory under ``root`` that every uid may traverse (0755). A task's own /tmp
    is private (``sandbox_mounts``): what a task must see of the host goes under another root,
    ``/var/tmp`` for files, ``/dev`` for device nodes."""
    path = Path(tempfile.mkdtemp(prefix="labhive-iso-", dir=root))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


ALICE_UID = 200201
FIRST_UID = 200300
USERS = f"""
users:
  alice: {{token: alice-token-123, groups: [students], uid: {ALICE_UID}}}
  bob: {{token: bob-token-4567, groups: [students]}}
groups:
  students: {{vcs: [vc1]}}
"""


@contextmanager
def isolated_service(data_dir: Path, **options: Any) -> Iterator[Live]:
    """The service with users alice and bob, each task run as its user's uid (``options``:
    more ``ServeOptions`` fields)."""
    with live_service(
        data_dir, grace_s=1, users=USERS, task_identity="users", first_uid=FIRST_UID, **options
    ) as live:
        yield live
