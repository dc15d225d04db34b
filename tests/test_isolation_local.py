"""Given two users' tasks on the local executor run by root, expect each to run as its own
uid/gid with no supplementary groups, in a 0700 work dir of its own, and to get EACCES for the
other's directories and output, while reaching its own by absolute path."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from isolation_util import (
    UID_A,
    UID_B,
    needs_root,
    open_tmp_dir,
    parse_probe,
    probe_command,
    probe_env,
)
from local_exec_util import launch_one, wait_exits
from waiting import wait_until

from labhive.scheduler.executors.local import LocalExecutor

pytestmark = needs_root


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    with open_tmp_dir() as path:
        yield path


def test_a_task_runs_as_its_uid_and_cannot_read_another_users_task(open_tmp: Path) -> None:
    data = open_tmp / "data"
    ex = LocalExecutor(data, grace_s=1)
    b = launch_one(
        ex, "jb", "echo B-SECRET; echo b-file > secret.txt; exec sleep 60", uid=UID_B, gid=UID_B
    )
    wait_until(lambda: b"B-SECRET" in ex.read_log(b, "stdout", 0, 100), "B's output", 20)
    b_task = Path(b.info["workdir"])
    mine = open_tmp / "data" / "jobs" / "ja" / "0" / "worker-0" / "work" / "mine.txt"
    targets = [
        ("own file by absolute path", "write", mine),
        ("own file read back", "read", mine),
        ("the jobs directory", "list", data / "jobs"),
        ("B's job directory", "list", data / "jobs" / "jb"),
        ("B's task directory", "list", b_task),
        ("B's stdout", "read", b_task / "stdout"),
        ("B's launch record", "read", b_task / "launch.json"),
        ("B's work directory", "list", b_task / "work"),
        ("B's file", "read", b_task / "work" / "secret.txt"),
    ]
    a = launch_one(ex, "ja", probe_command(), uid=UID_A, gid=UID_A, env=probe_env(targets))
    assert wait_exits(ex, 1)[a.key].exit_code == 0, ex.read_log(a, "stderr", 0, 4000)
    report = parse_probe(ex.read_log(a, "stdout", 0, 65536))
    ex.stop([b], grace_s=0)

    assert (report["uid"], report["gid"], report["groups"]) == (UID_A, UID_A, [])
    assert report["home"] == report["cwd"] == a.info["cwd"]
    assert report["tries"] == {
        "own file by absolute path": "ok",
        "own file read back": "ok",
        "the jobs directory": errno.EACCES,
        "B's job directory": errno.EACCES,
        "B's task directory": errno.EACCES,
        "B's stdout": errno.EACCES,
        "B's launch record": errno.EACCES,
        "B's work directory": errno.EACCES,
        "B's file": errno.EACCES,
    }
    assert a.info["run_as"] == {"uid": UID_A, "gid": UID_A, "separated": True}


def test_modes_and_owners_hold_whatever_the_umask(open_tmp: Path) -> None:
    old = os.umask(0)
    try:
        ex = LocalExecutor(open_tmp / "data")
        h = launch_one(ex, "modes", "echo hi > out.txt", uid=UID_A, gid=UID_A)
        assert wait_exits(ex, 1)[h.key].exit_code == 0
    finally:
        os.umask(old)
    task = Path(h.info["workdir"])

    def mode(p: Path) -> tuple[int, int]:
        st = p.stat()
        return stat.S_IMODE(st.st_mode), st.st_uid

    me = os.getuid()
    assert mode(open_tmp / "data") == (0o711, me)
    assert mode(open_tmp / "data" / "jobs") == (0o711, me)
    assert mode(task) == (0o711, me)
    for record in ("stdout", "stderr", "launch.json", "handle.json", "exit.json"):
        assert mode(task / record) == (0o600, me), record
    assert mode(task / "work") == (0o700, UID_A)
    assert (task / "work" / "out.txt").stat().st_uid == UID_A


def test_strace_observes_a_task_that_runs_as_its_user(open_tmp: Path) -> None:
    ex = LocalExecutor(open_tmp / "data")
    h = launch_one(ex, "traced", "id -u; cat /etc/hostname", observe="strace", uid=UID_A, gid=UID_A)
    assert wait_exits(ex, 1)[h.key].exit_code == 0, ex.read_log(h, "stderr", 0, 4000)
    assert ex.read_log(h, "stdout", 0, 100).split()[0] == str(UID_A).encode()
    (log,) = ex.observations(h)
    assert "execve(" in Path(log).read_text()
    assert Path(log).stat().st_uid == UID_A


def test_root_is_refused_as_a_tasks_identity(open_tmp: Path) -> None:
    from labhive.scheduler.executors.base import LaunchError

    ex = LocalExecutor(open_tmp / "data")
    with pytest.raises(LaunchError, match="may not run as root"):
        launch_one(ex, "root", "true", uid=0, gid=0)


def test_a_service_that_is_not_root_runs_tasks_as_itself_and_says_so() -> None:
    from labhive.scheduler.executors.workdir import become, run_as

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a child that is no longer root, asking what it would run a task as
        try:
            become(65534, 65534)
            os.write(write, repr(run_as(UID_A, UID_A).record()).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        record = f.read()
    assert record == repr(
        {
            "uid": 65534,
            "gid": 65534,
            "separated": False,
            "why": f"the service runs as uid 65534, not root, so it cannot switch to uid {UID_A}",
        }
    )
