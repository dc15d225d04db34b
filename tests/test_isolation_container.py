"""Given the local executor, a job with an image (a podman container) and two tenants on one
machine, expect the container to be held as a bare task is: its new files its user's alone
(umask 077), a /dev/shm of its own sized to its memory limit, and a fork bomb stopped at the
executor's per-task pids cap rather than podman's own (2048) or the host's pid_max; and another
tenant, in a container or bare, neither reading its /tmp and /dev/shm nor signalling it while it
runs (the attacks of test_isolation_tmp.py, against a container)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from container_support import podman_or_skip, tiny_image
from isolation_util import UID_A, UID_B, needs_root, open_tmp_dir
from local_exec_util import launch_one, wait_exits
from waiting import wait_until

from labhive.scheduler.executors.local import LocalExecutor

__all__ = ["tiny_image"]  # a fixture, used by name

pytestmark = [needs_root]


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    podman_or_skip()
    with open_tmp_dir() as path:
        yield path


def test_another_tenants_file_made_in_a_container_is_not_readable(open_tmp: Path, tiny_image):
    """Tenant A's container writes results and opens its work dir for a colleague to reach one
    named file (chmod 711); tenant B, a bare task, tries to read the rest. Under podman's umask
    022 the file was 0644 and B read it."""
    ex = LocalExecutor(open_tmp / "data", grace_s=1.0)
    a = launch_one(
        ex, "a-ctr", "echo a-secret > results.txt; mkdir runs; chmod 711 .; umask",
        image=tiny_image, uid=UID_A, gid=UID_A,
    )  # fmt: skip
    assert wait_exits(ex, 1, timeout_s=120)[a.key].exit_code == 0, ex.read_log(a, "stderr", 0, 999)
    assert ex.read_log(a, "stdout", 0, 100) == b"0077\n"
    made = Path(a.info["cwd"]) / "results.txt"
    assert (made.stat().st_uid, made.stat().st_mode & 0o777) == (UID_A, 0o600)
    assert (made.parent / "runs").stat().st_mode & 0o777 == 0o700

    b = launch_one(ex, "b-snoop", f"cat {made}; ls {made.parent}/runs", uid=UID_B, gid=UID_B)
    assert wait_exits(ex, 1, timeout_s=60)[b.key].exit_code != 0
    assert ex.read_log(b, "stdout", 0, 1000) == b""  # nothing of A's read
    err = ex.read_log(b, "stderr", 0, 2000).decode()
    assert f"{made}: Permission denied" in err and "runs': Permission denied" in err


def test_a_containers_dev_shm_is_its_own_and_sized_to_its_memory_limit(open_tmp, tiny_image):
    ex = LocalExecutor(open_tmp / "data", grace_s=1.0)
    h = launch_one(
        ex, "shm", "df -k /dev/shm | tail -1; stat -c %a /dev/shm; touch /dev/shm/x; "
        "stat -c %a /dev/shm/x", image=tiny_image, uid=UID_A, gid=UID_A, memory_mb=48,
    )  # fmt: skip
    assert wait_exits(ex, 1, timeout_s=120)[h.key].exit_code == 0, ex.read_log(h, "stderr", 0, 999)
    df, _, mode = ex.read_log(h, "stdout", 0, 1000).decode().splitlines()
    assert df.split()[1] == str(48 * 1024)  # not podman's 64000 KiB, not the host's RAM
    assert mode == "600"
    assert h.info["limits"]["sandbox"]["bytes"] == 48 * 1024 * 1024


#: Forks sleepers, one line in ``started`` for each that started, until fork fails (busybox's
#: sh then ends: "can't fork") or 400 are up; the sleepers hold their pids meanwhile.
FORK_BOMB = "n=0; while [ $n -lt 400 ]; do sleep 30 & echo $! >> started; n=$((n+1)); done"


def test_a_fork_bomb_in_a_container_stops_at_the_executors_pids_cap(open_tmp, tiny_image):
    ex = LocalExecutor(open_tmp / "data", grace_s=1.0, pids_max=64)
    h = launch_one(ex, "bomb", FORK_BOMB, image=tiny_image, uid=UID_A, gid=UID_A)
    end = wait_exits(ex, 1, timeout_s=120)[h.key]
    started = (Path(h.info["cwd"]) / "started").read_text().split()
    # the shell itself holds one of the 64; podman's own default would have let all 400 go
    assert 32 <= len(started) < 64, f"{len(started)} processes started under a cap of 64"
    assert "can't fork" in ex.read_log(h, "stderr", 0, 2000).decode()
    assert end.exit_code == 2
    assert h.info["limits"]["pids"] == {"enforced": True, "by": "container", "max": 64}


def container_pid(ex: LocalExecutor, handle) -> int:
    """The host pid of the task's container's first process (podman's account of it)."""
    name = handle.info["limits"]["container"]["name"]
    done = subprocess.run(
        ["podman", "inspect", "--type", "container", "--format", "{{.State.Pid}}", name],
        capture_output=True, text=True, env={**os.environ, **ex._podman_env()}, check=True,
    )  # fmt: skip
    return int(done.stdout)


def test_bob_neither_reads_alices_tmp_and_shm_nor_signals_her_while_her_container_runs(
    open_tmp, tiny_image
):
    """The attacks of test_isolation_tmp against a container: alice's /tmp and /dev/shm files
    and her process, from bob's container and from bob's bare task, while she runs."""
    ex = LocalExecutor(open_tmp / "data", grace_s=1.0)
    alice = launch_one(
        ex, "alice", "echo a-secret > /tmp/a-secret; echo a-secret > /dev/shm/a-secret; "
        "echo up; sleep 120", image=tiny_image, uid=UID_A, gid=UID_A,
    )  # fmt: skip
    wait_until(lambda: ex.read_log(alice, "stdout", 0, 10) == b"up\n", "alice's container", 60)
    pid = container_pid(ex, alice)
    snoop = f"cat /tmp/a-secret; cat /dev/shm/a-secret; kill -9 {pid}; echo tried"
    in_container = launch_one(ex, "bob-ctr", snoop, image=tiny_image, uid=UID_B, gid=UID_B)
    bare = launch_one(ex, "bob-bare", snoop, uid=UID_B, gid=UID_B)
    ends = wait_exits(ex, 2, timeout_s=120)
    assert set(ends) == {in_container.key, bare.key}  # alice still runs
    for bob, no_kill in ((in_container, "No such process"), (bare, "Operation not permitted")):
        assert ex.read_log(bob, "stdout", 0, 1000) == b"tried\n"
        err = ex.read_log(bob, "stderr", 0, 2000).decode()
        assert err.count("No such file or directory") == 2, err
        assert no_kill in err, err
    assert psutil.pid_exists(pid) and ex.read_log(alice, "stdout", 0, 10) == b"up\n"
    ex.stop([alice], grace_s=0)
