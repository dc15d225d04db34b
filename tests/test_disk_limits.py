"""Given one local task that writes without end, expect it to be held to its limits on a real
(small, tmpfs) file system: its stdout and stderr keep the first 100 MiB and one line saying the
rest was dropped, however it writes (through a reopened /proc/self/fd/1 too); over its work-dir
quota it is stopped with the reason; a task that fills the disk ends as a failure that says
"disk full", not as a lost task that would run again."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from disk_support import MIB, small_fs
from isolation_util import open_tmp_dir
from local_exec_util import task, wait_exits

from labhive.scheduler.executors.local import LocalExecutor
from labhive.scheduler.executors.quota import (
    ASSUMED_SPEED,
    MIN_LOOK_S,
    QuotaWatcher,
    next_look,
    usage,
)
from labhive.scheduler.executors.supervise import EXIT_FILE, EXIT_SLOT


@pytest.fixture
def fs(tmp_path: Path):
    with small_fs(tmp_path / "fs", 240) as where:
        yield where


def run_one(ex: LocalExecutor, command: str, timeout_s: float = 60.0):
    (handle,) = ex.launch([task("disk", command)])
    (ended,) = wait_exits(ex, 1, timeout_s).values()
    return handle, ended


def test_a_task_writing_200_mib_keeps_100_mib_of_each_stream_and_one_line_saying_so(fs):
    ex = LocalExecutor(fs, grace_s=1.0)  # the defaults: 100 MiB per stream, the task goes on
    # stdout as inherited; stderr reopened through /proc/self/fd/2, as a task dodging a cap
    # on its file descriptor would; and an attempt to truncate the log from the task
    cmd = (
        "yes 0123456789abcdef 2>/dev/null | head -c 200M; "
        "yes fedcba9876543210 2>/dev/null | head -c 200M > /proc/self/fd/2; "
        "python3 -c 'import os; os.ftruncate(1, 0)' 2>/dev/null; echo still here"
    )
    handle, ended = run_one(ex, cmd)
    assert ended.exit_code == 0  # not killed for its output
    for stream, line in (("stdout", b"0123456789abcdef\n"), ("stderr", b"fedcba9876543210\n")):
        log = Path(handle.info[stream])
        size = log.stat().st_size
        assert 100 * MIB < size < 100 * MIB + 1024  # the first 100 MiB, then one line
        assert ex.read_log(handle, stream, 0, len(line)) == line
        # 100 MiB ends mid-line: the notice starts a line of its own, and is the last one
        tail = ex.read_log(handle, stream, 100 * MIB, 1024).decode()
        assert tail.startswith("\nlabhive: output past 100 MiB dropped") and tail.count("\n") == 2
    record = json.loads(Path(handle.info["exit_file"]).read_text())
    assert record["output"]["stdout"]["dropped"] == 100 * MIB + len(b"still here\n")
    assert record["output"]["stderr"]["dropped"] == 100 * MIB


def test_a_task_past_its_output_cap_is_stopped_when_the_cap_kills(fs):
    ex = LocalExecutor(fs, grace_s=1.0, output_cap=MIB, output_cap_kills=True)
    handle, ended = run_one(ex, "yes; sleep 600")
    assert ended.exit_code == 137
    assert ended.reason == "killed: its stdout went past its cap of 1 MiB"
    assert Path(handle.info["stdout"]).stat().st_size < MIB + 1024


def run_as_user(ex: LocalExecutor, command: str, **kw):
    """One task as uid/gid 4242 (a user's own, as under a root service), until it ends."""
    (handle,) = ex.launch([task("disk", command, uid=4242, gid=4242, **kw)])
    (ended,) = wait_exits(ex, 1, 30).values()
    return handle, ended


def test_a_task_over_its_work_dir_quota_is_stopped_with_the_reason(fs):
    ex = LocalExecutor(fs, grace_s=1.0, work_quota=8 * MIB, quota_interval_s=0.2)
    cmd = "for i in $(seq 60); do head -c 1M /dev/zero > f$i; sleep 0.02; done; sleep 600"
    handle, ended = run_as_user(ex, cmd)
    assert ended.exit_code == 137
    assert ended.reason.startswith("killed: over its disk quota of 8 MiB (its work dir held ")
    written = len(list(Path(handle.info["cwd"]).glob("f*")))
    assert 8 < written < 60  # stopped on the way, not after writing all 60 MiB


#: At full speed: one file (dd), or a thousand of 1 MiB (split), 1 GiB in all at most.
FULL_SPEED = {
    "one file": "dd if=/dev/zero of=big bs=1M count=1024 2>/dev/null; sleep 600",
    "many files": "head -c 1G /dev/zero | split -b 1M - part.; sleep 600",
}


@pytest.mark.parametrize("how", sorted(FULL_SPEED))
def test_a_task_writing_at_full_speed_is_stopped_near_its_quota_not_an_interval_later(how):
    """A 5 s watcher let dd write 2876 MiB past a 64 MiB quota (on the data disk, ext4): the
    watcher now looks again sooner the nearer the task is to its quota."""
    with open_tmp_dir("/var/tmp") as base:  # the real disk: a tmpfs would cap the overshoot
        ex = LocalExecutor(base / "data", grace_s=1.0, work_quota=64 * MIB, quota_interval_s=5.0)
        handle, ended = run_as_user(ex, FULL_SPEED[how])
        held = usage([Path(handle.info["cwd"])])
    assert ended.exit_code == 137
    assert ended.reason.startswith("killed: over its disk quota of 64 MiB")
    assert held < 64 * MIB + 192 * MIB, f"{held / MIB:.0f} MiB held under a 64 MiB quota"


def test_the_watcher_looks_sooner_the_nearer_the_quota_and_the_faster_the_task():
    quota, interval = 10 * 1024 * MIB, 5.0
    assert next_look(quota, 0, 0, interval) == 2.5  # 10 GiB at the assumed 2 GiB/s, halved
    assert next_look(quota, 0, 0, 1.0) == 1.0  # never later than the interval
    assert next_look(quota, quota - 100 * MIB, 0, interval) < 0.03 + MIN_LOOK_S
    assert next_look(quota, quota - 100 * MIB, 0, interval) >= MIN_LOOK_S  # never a busy loop
    # a task measured faster than assumed is looked at sooner
    fast = next_look(quota, quota // 2, 4 * ASSUMED_SPEED, interval)
    assert fast == pytest.approx(quota / 2 / (4 * ASSUMED_SPEED) / 2)


def test_writing_into_its_strace_log_does_not_escape_the_quota(fs):
    """Under strace the task may write its own strace.log (outside work/): it counts too."""
    ex = LocalExecutor(fs, grace_s=1.0, work_quota=8 * MIB, quota_interval_s=0.2)
    cmd = "head -c 20M /dev/zero >> ../strace.log; sleep 600"
    handle, ended = run_as_user(ex, cmd, observe="strace")
    assert ended.exit_code == 137
    assert ended.reason.startswith("killed: over its disk quota of 8 MiB")
    assert Path(handle.info["workdir"], "strace.log").stat().st_size > 8 * MIB


def test_the_quota_counts_a_hard_linked_file_once_and_never_follows_a_symlink(tmp_path):
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (outside / "big").write_bytes(bytes(4 * MIB))
    (work / "data").write_bytes(bytes(MIB))
    os.link(work / "data", work / "again")
    (work / "to-big").symlink_to(outside / "big")
    (work / "to-outside").symlink_to(outside)
    assert MIB <= usage([work]) < MIB + 64 * 1024


def test_a_task_that_fills_the_disk_fails_saying_disk_full_instead_of_being_lost(tmp_path):
    with small_fs(tmp_path / "fs", 16) as fs:
        ex = LocalExecutor(fs, grace_s=1.0, work_quota=None)
        # the task fills the file system, then ends well: its supervisor has no room for
        # exit.json (before: an end with no record, "lost", run again without spending a retry)
        handle, ended = run_one(ex, "head -c 100M /dev/zero > fill; exit 0")
        assert not Path(handle.info["exit_file"]).exists()
        assert json.loads(Path(fs, handle.info["exit_slot"]).read_text())["disk_full"] is True
        assert ended.exit_code == 1  # a failure: a rerun would fill the disk again
        assert ended.reason.startswith("disk full: the data dir's file system filled up")
        assert (Path(handle.info["workdir"]) / EXIT_SLOT).stat().st_size == 4096
        assert not (Path(handle.info["workdir"]) / EXIT_FILE).exists()


def vc_config(disk: object):
    from labhive.scheduler.core.config import load_cluster_config
    from labhive.scheduler.sim.machines import Machine, cluster_dict

    raw = cluster_dict([Machine("n0", 4)])
    raw["virtualClusters"]["default"]["disk"] = disk
    return load_cluster_config(raw).vcs["default"]


def test_a_vc_sets_its_own_output_cap_and_quota_and_a_bad_size_names_the_key():
    from labhive.scheduler.core.config import ConfigError

    vc = vc_config({"outputCap": "1M", "workQuota": "off"})
    assert (vc.output_cap, vc.work_quota) == (MIB, 0)
    with pytest.raises(ConfigError, match=r"virtualClusters.default.disk.workQuota.*10 parsecs"):
        vc_config({"workQuota": "10 parsecs"})


def test_a_task_in_a_vc_with_a_smaller_cap_keeps_only_that_much(tmp_path):
    ex = LocalExecutor(tmp_path, grace_s=1.0, vc_disk={"small": (MIB, 0)})
    (small, other) = ex.launch(
        [
            task("vc", "head -c 3M /dev/zero", index=0, vc="small"),
            task("vc", "head -c 3M /dev/zero", index=1, vc="big"),
        ]
    )
    wait_exits(ex, 2)
    assert MIB < Path(small.info["stdout"]).stat().st_size < MIB + 1024
    assert Path(other.info["stdout"]).stat().st_size == 3 * MIB  # the service's 100 MiB
    assert (
        json.loads(Path(small.info["workdir"], "launch.json").read_text())["quota"]["bytes"] is None
    )


def test_a_task_parked_near_its_quota_costs_its_watcher_a_tenth_of_a_core_at_most(tmp_path):
    """5000 files 1 MiB under the quota: looks come every 50 ms at the nearest, and never sooner
    than nine walks' time, so the watcher's thread spends at most a tenth of its time walking
    (past its first look). A look every 50 ms cost 0.46 s of CPU in 3 s over 60 looks."""
    for i in range(5000):
        (tmp_path / f"f{i}").write_bytes(b"x")
    quota = usage([tmp_path]) + MIB
    stopped: list[str] = []
    watcher = QuotaWatcher([tmp_path], quota, 5.0, stopped.append)
    wall = time.monotonic()
    watcher.start()
    time.sleep(3)
    cpu = thread_cpu(watcher._thread.native_id)  # its own: not other tests' leftover threads
    watcher.finish()
    wall = time.monotonic() - wall
    assert stopped == [] and watcher.looks >= 3
    # a tenth of the time between looks, plus the first look (no wait before it): in 3 s
    # that one walk is a tenth of the total again (0.32 s of CPU in 3.0 s over 10 looks)
    per_look = cpu / watcher.looks
    assert cpu < 0.1 * wall + 1.5 * per_look, (
        f"{cpu:.2f} s of CPU in {wall:.1f} s over {watcher.looks} looks"
    )


def thread_cpu(native_id: int | None) -> float:
    """CPU seconds one thread of this process has used so far (user + system)."""
    import psutil

    for t in psutil.Process().threads():
        if t.id == native_id:
            return float(t.user_time + t.system_time)
    raise AssertionError(f"no thread {native_id} in this process")
