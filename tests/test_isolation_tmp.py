"""Given a root service running alice's (uid A) and bob's (uid B) tasks on the local executor,
expect each task's /tmp and /dev/shm to be its own (bob cannot read what alice leaves there,
even while her task runs), capped at the task's memory limit and gone, with everything in them,
when the task ends (an OOM kill included); its new files 0600/0700 (umask 077); other users'
processes and the service's command line hidden from it; and what a task needs (shared memory
for multiprocessing, its work dir under /tmp, /dev) to work as before."""

from __future__ import annotations

import errno
import json
import os
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from container_support import tiny_image
from isolation_util import (
    UID_A,
    UID_B,
    needs_root,
    open_tmp_dir,
    parse_probe,
    probe_command,
    probe_env,
    user_python,
)
from local_exec_util import launch_one, wait_exits
from waiting import wait_until

from labhive.scheduler.executors import limits, sandbox_mounts
from labhive.scheduler.executors.base import TaskHandle
from labhive.scheduler.executors.local import LocalExecutor
from labhive.scheduler.executors.workdir import run_as

pytestmark = needs_root
__all__ = ["tiny_image"]  # a fixture, used by name
MIB = 1 << 20


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    with open_tmp_dir() as path:
        yield path


@pytest.fixture
def name() -> Iterator[str]:
    """A file name of this test's own; should a task's file reach the host's /tmp or /dev/shm
    (the isolation failed), it is removed there afterwards, not left to the next run."""
    unique = f"labhive-test-{uuid.uuid4().hex[:12]}"
    yield unique
    for shared in ("/tmp", "/dev/shm"):
        for left in Path(shared).glob(f"{unique}*"):
            shutil.rmtree(left) if left.is_dir() else left.unlink()


def command_pid(handle: TaskHandle) -> int:
    """The task's command: the supervisor's child (the one that exec'd it)."""
    kids = wait_until(lambda: psutil.Process(handle.info["pid"]).children(), "the command", 20)
    return int(kids[0].pid)


def mounts_named(source: str) -> list[str]:
    """Every mount, in every process's mount namespace on this machine, whose source is
    ``source``: a task's tmpfs is findable as long as anything keeps it."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            table = (proc / "mountinfo").read_text()
        except OSError:
            continue
        found += [f"{proc.name}: {line}" for line in table.splitlines() if f" {source} " in line]
    return found


def run_python(script: str) -> str:
    return f"{shlex.quote(user_python())} -c {shlex.quote(script)}"


def test_bob_cannot_read_what_alice_left_in_tmp_or_shm_even_while_her_task_runs(
    open_tmp: Path, name: str
) -> None:
    ex = LocalExecutor(open_tmp / "data", grace_s=1)
    alice = launch_one(
        ex, "alice",
        f"echo SECRET > /tmp/{name}; echo SECRET > /dev/shm/{name}; chmod 644 /tmp/{name} "
        f"/dev/shm/{name}; echo ready; exec sleep 60",
        uid=UID_A, gid=UID_A,
    )  # fmt: skip
    wait_until(lambda: b"ready" in ex.read_log(alice, "stdout", 0, 100), "alice's files", 30)
    pid = command_pid(alice)
    targets = [
        ("alice's /tmp file", "read", f"/tmp/{name}"),
        ("alice's /dev/shm file", "read", f"/dev/shm/{name}"),
        ("alice's /tmp through her /proc root", "read", f"/proc/{pid}/root/tmp/{name}"),
        ("its own /tmp", "write", f"/tmp/{name}"),
    ]
    bob = launch_one(ex, "bob", probe_command(), uid=UID_B, gid=UID_B, env=probe_env(targets))
    assert wait_exits(ex, 1)[bob.key].exit_code == 0, ex.read_log(bob, "stderr", 0, 4000)
    report = parse_probe(ex.read_log(bob, "stdout", 0, 65536))
    ex.stop([alice], grace_s=0)

    assert report["tries"] == {
        "alice's /tmp file": errno.ENOENT,
        "alice's /dev/shm file": errno.ENOENT,
        "alice's /tmp through her /proc root": errno.ENOENT,
        "its own /tmp": "ok",  # the same name, in bob's own /tmp: no clash, no overwrite
    }
    assert not Path("/tmp", name).exists() and not Path("/dev/shm", name).exists()


def test_files_in_tmp_and_shm_are_gone_everywhere_when_the_task_ends(
    open_tmp: Path, name: str
) -> None:
    ex = LocalExecutor(open_tmp / "data", grace_s=1)
    h = launch_one(
        ex, "leaves", f"head -c 8M /dev/zero > /dev/shm/{name}; echo x > /tmp/{name}; "
        "echo ready; exec sleep 60", uid=UID_A, gid=UID_A, memory_mb=256,
    )  # fmt: skip
    wait_until(lambda: b"ready" in ex.read_log(h, "stdout", 0, 100), "the task's files", 30)
    source = h.info["limits"]["sandbox"]["source"]
    assert mounts_named(source), "the task's tmpfs is not found while it runs"
    ex.stop([h], grace_s=0)
    wait_until(lambda: not mounts_named(source), "the tmpfs to go", 10)


def test_shared_memory_of_an_oom_killed_task_is_gone_with_it(open_tmp: Path, name: str) -> None:
    if "memory" not in limits.detect_v1() and limits.detect().cgroup_parent is None:
        pytest.skip("no memory cgroup here to kill the task")
    ex = LocalExecutor(open_tmp / "data", grace_s=1)
    h = launch_one(
        ex, "oom", f"exec dd if=/dev/zero of=/dev/shm/{name} bs=1M count=400", memory_mb=64,
        uid=UID_A, gid=UID_A,
    )  # fmt: skip
    source = h.info["limits"]["sandbox"]["source"]
    exit = wait_exits(ex, 1, timeout_s=60)[h.key]
    assert exit.exit_code == 137 and exit.reason.startswith("killed: over its memory limit")
    assert not mounts_named(source)
    assert not Path("/dev/shm", name).exists()


def test_tmp_and_shm_together_cannot_exceed_the_memory_limit_without_a_cgroup(
    open_tmp: Path, name: str
) -> None:
    """An rlimit (the fallback without cgroups) does not count tmpfs: the tmpfs's size does."""
    no_cgroups = limits.LimitSupport(None, "none, for this test")
    ex = LocalExecutor(open_tmp / "data", limit_support=no_cgroups)
    h = launch_one(
        ex, "cap",
        f"head -c 20M /dev/zero > /tmp/{name}; echo tmp=$?; "
        f"dd if=/dev/zero of=/dev/shm/{name} bs=1M count=100 2>/dev/null; echo shm=$?; "
        f"echo sizes $(stat -c %s /tmp/{name} /dev/shm/{name})",
        memory_mb=32, uid=UID_A, gid=UID_A,
    )  # fmt: skip
    assert wait_exits(ex, 1)[h.key].exit_code == 0, ex.read_log(h, "stderr", 0, 2000)
    out = ex.read_log(h, "stdout", 0, 1000).decode().split()
    assert h.info["limits"]["memory"]["by"] == "rlimit-data"
    assert h.info["limits"]["sandbox"]["bytes"] == 32 * MIB
    assert out[:2] == ["tmp=0", "shm=1"], out  # dd: "No space left on device"
    tmp_size, shm_size = int(out[3]), int(out[4])
    assert tmp_size == 20 * MIB and 0 < shm_size <= 12 * MIB, out


def test_tmpfs_pages_count_against_the_tasks_memory_cgroup_v1(open_tmp: Path, name: str) -> None:
    if "memory" not in limits.detect_v1() or limits.detect().cgroup_parent is not None:
        pytest.skip("no cgroup v1 memory controller in use here")
    ex = LocalExecutor(open_tmp / "data", grace_s=1)
    h = launch_one(
        ex, "charged", f"head -c 48M /dev/zero > /dev/shm/{name}; echo ready; exec sleep 60",
        memory_mb=256, uid=UID_A, gid=UID_A,
    )  # fmt: skip
    wait_until(lambda: b"ready" in ex.read_log(h, "stdout", 0, 100), "the write", 30)
    memcg = Path(h.info["limits"]["memory"]["cgroup"])
    stat = dict(line.split() for line in (memcg / "memory.stat").read_text().splitlines())
    usage = int((memcg / "memory.usage_in_bytes").read_text())
    ex.stop([h], grace_s=0)
    assert int(stat["shmem"]) >= 48 * MIB, stat
    assert usage >= 48 * MIB


def test_a_tasks_new_files_are_its_own_and_tmp_is_private(open_tmp: Path, name: str) -> None:
    ex = LocalExecutor(open_tmp / "data")
    h = launch_one(
        ex, "modes",
        f"touch f; mkdir d; touch /tmp/{name}; mkdir /tmp/{name}.d; umask; echo TMPDIR=$TMPDIR; "
        f"stat -c '%a %u' /tmp /dev/shm /tmp/{name} /tmp/{name}.d",
        uid=UID_A, gid=UID_A,
    )  # fmt: skip
    assert wait_exits(ex, 1)[h.key].exit_code == 0, ex.read_log(h, "stderr", 0, 2000)
    lines = ex.read_log(h, "stdout", 0, 4000).decode().splitlines()
    work = Path(h.info["cwd"])
    assert oct((work / "f").stat().st_mode & 0o777) == "0o600"
    assert oct((work / "d").stat().st_mode & 0o777) == "0o700"
    assert lines[:2] == ["0077", "TMPDIR=/tmp"]
    assert lines[2:] == [f"700 {UID_A}", f"700 {UID_A}", f"600 {UID_A}", f"700 {UID_A}"]


def test_a_task_sees_only_its_users_processes(open_tmp: Path) -> None:
    ex = LocalExecutor(open_tmp / "data", grace_s=1)
    bob = launch_one(ex, "bob", "exec sleep 60", uid=UID_B, gid=UID_B)
    bob_pid = command_pid(bob)
    targets = [
        ("bob's cmdline", "read", f"/proc/{bob_pid}/cmdline"),
        ("bob's /proc entry", "list", f"/proc/{bob_pid}"),
        ("the service's cmdline", "read", f"/proc/{os.getpid()}/cmdline"),
        ("init's cmdline", "read", "/proc/1/cmdline"),
        ("its supervisor's cmdline", "read", "/proc/PARENT/cmdline"),
        ("its own cmdline", "read", "/proc/self/cmdline"),
    ]
    owners = (
        "import json, os\n"
        "print(json.dumps(sorted({os.stat(f'/proc/{p}').st_uid for p in os.listdir('/proc')"
        " if p.isdigit()})))"
    )
    alice = launch_one(
        ex, "alice",
        f'PROBE_TARGETS=$(echo "$PROBE_TARGETS" | sed "s/PARENT/$PPID/") {probe_command()}; '
        f"{run_python(owners)}; ps -e -o user= | sort -u",
        uid=UID_A, gid=UID_A, env=probe_env(targets),
    )  # fmt: skip
    assert wait_exits(ex, 1)[alice.key].exit_code == 0, ex.read_log(alice, "stderr", 0, 4000)
    out = ex.read_log(alice, "stdout", 0, 65536).decode().splitlines()
    ex.stop([bob], grace_s=0)
    report = parse_probe(out[0].encode())

    assert report["tries"] == {
        "bob's cmdline": errno.ENOENT,
        "bob's /proc entry": errno.ENOENT,
        "the service's cmdline": errno.ENOENT,
        "init's cmdline": errno.ENOENT,
        "its supervisor's cmdline": errno.ENOENT,
        "its own cmdline": "ok",
    }
    assert json.loads(out[1]) == [UID_A]
    assert out[2:] == [str(UID_A)]  # ps lists its user's processes only
    assert alice.info["limits"]["sandbox"]["proc"] == "hidepid=invisible"


def test_multiprocessing_with_shared_memory_works_in_a_task(open_tmp: Path) -> None:
    script = (
        "import multiprocessing as mp\n"
        "from multiprocessing import shared_memory\n"
        "def fill(name, i):\n"
        "    shm = shared_memory.SharedMemory(name=name)\n"
        "    shm.buf[i] = i + 1\n"
        "    shm.close()\n"
        "if __name__ == '__main__':\n"
        "    shm = shared_memory.SharedMemory(create=True, size=4)\n"
        "    lock = mp.Lock()\n"  # a POSIX semaphore: /dev/shm/sem.*
        "    with mp.Pool(2) as pool:\n"
        "        pool.starmap(fill, [(shm.name, i) for i in range(4)])\n"
        "    with lock:\n"
        "        print(list(shm.buf[:4]), shm.name)\n"
        "    shm.close(); shm.unlink()\n"
    )
    ex = LocalExecutor(open_tmp / "data")
    h = launch_one(ex, "mp", run_python(script), uid=UID_A, gid=UID_A)
    assert wait_exits(ex, 1, timeout_s=60)[h.key].exit_code == 0, ex.read_log(h, "stderr", 0, 4000)
    values, name = ex.read_log(h, "stdout", 0, 1000).decode().rsplit(" ", 1)
    assert values == "[1, 2, 3, 4]"
    assert not Path("/dev/shm", name.strip()).exists()  # it lived in the task's own /dev/shm


def test_the_record_says_what_was_applied_and_why_not(open_tmp: Path) -> None:
    ex = LocalExecutor(open_tmp / "data")
    separated = launch_one(ex, "sep", "umask", uid=UID_A, gid=UID_A, memory_mb=100)
    as_service = launch_one(ex, "svc", "umask")
    exits = wait_exits(ex, 2)
    assert {e.exit_code for e in exits.values()} == {0}

    applied = separated.info["limits"]["sandbox"]
    assert applied["enforced"] and applied["private"] == ["/tmp", "/dev/shm"]
    assert (applied["bytes"], applied["owner"]) == (100 * MIB, [UID_A, UID_A])
    assert applied["keep"] == [str(open_tmp / "data")]  # the data dir lies under /tmp here
    launch = json.loads((Path(separated.info["workdir"]) / "launch.json").read_text())
    assert launch["limits"]["sandbox"] == applied
    assert as_service.info["limits"]["sandbox"] == {
        "enforced": False,
        "why": "private /tmp: not enforced: the task runs as the service's own uid 0 "
        "(users are not separated)",
        "umask": "0077",
    }
    # umask 077 holds for every task
    assert ex.read_log(as_service, "stdout", 0, 100) == b"0077\n"
    # a data dir that is /tmp itself would be bound back over the private one: refused
    in_tmp = sandbox_mounts.plan(run_as(UID_A, UID_A), MIB, Path("/tmp"), "t")
    assert in_tmp["why"] == (
        "private /tmp: not enforced: the data directory is /tmp itself: give the service another"
    )


def test_a_service_that_is_not_root_says_private_tmp_is_not_enforced() -> None:
    from labhive.scheduler.executors.workdir import become

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a child that is no longer root, planning a task's mounts
        try:
            become(65534, 65534)
            record = sandbox_mounts.plan(run_as(UID_A, UID_A), MIB, Path("/srv"), "t")
            os.write(write, json.dumps(record).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        record = json.loads(f.read())
    assert record == {
        "enforced": False,
        "why": "private /tmp: not enforced: the service runs as uid 65534, not root",
        "umask": "0077",
    }


def test_a_container_task_has_its_own_tmp_shm_and_proc_already(
    open_tmp: Path, tiny_image: str, name: str
) -> None:
    """podman gives a container these itself: recorded, not redone."""
    ex = LocalExecutor(open_tmp / "data")
    h = launch_one(
        ex, "ctr",
        f"echo x > /tmp/{name}; echo x > /dev/shm/{name}; umask; "
        "df -k /dev/shm | tail -1; ls /proc | grep -c '^[0-9]'",
        image=tiny_image, uid=UID_A, gid=UID_A,
    )  # fmt: skip
    assert wait_exits(ex, 1, timeout_s=120)[h.key].exit_code == 0, ex.read_log(h, "stderr", 0, 2000)
    umask, df, nprocs = ex.read_log(h, "stdout", 0, 4000).decode().splitlines()
    assert h.info["limits"]["sandbox"] == sandbox_mounts.container(h_memory_bytes(h))
    assert not Path("/tmp", name).exists() and not Path("/dev/shm", name).exists()
    # its own /dev/shm, sized to its memory limit as a bare task's (not podman's 64 MB)
    assert int(df.split()[1]) * 1024 == h.info["limits"]["sandbox"]["bytes"]
    assert int(nprocs) <= 3  # its own pid namespace: the shell, ls, grep
    assert umask == "0077"  # as a bare task's (podman's own is 0022)


def h_memory_bytes(h: TaskHandle) -> int:
    return int(h.info["limits"]["memory"]["bytes"])


WITHOUT_SYS_ADMIN = """
import json, sys
from pathlib import Path
from local_exec_util import launch_one, wait_exits
from labhive.scheduler.executors.local import LocalExecutor
ex = LocalExecutor(Path(sys.argv[1]))
h = launch_one(ex, "nocap", "id -u; umask; echo TMPDIR=${TMPDIR:-unset}", uid=int(sys.argv[2]),
               gid=int(sys.argv[2]))
code = wait_exits(ex, 1)[h.key].exit_code
print(json.dumps({"code": code, "out": ex.read_log(h, "stdout", 0, 1000).decode(),
                  "sandbox": h.info["limits"]["sandbox"]}))
"""


def test_a_root_service_without_cap_sys_admin_runs_tasks_and_says_why_not(open_tmp: Path) -> None:
    """As in a container started without CAP_SYS_ADMIN: root, able to switch uids, not to mount."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    drop = ["--inh-caps=-sys_admin", "--bounding-set=-sys_admin"]
    env = {k: v for k, v in os.environ.items() if k != "TMPDIR"}  # the task's, if it gets one
    env["PYTHONPATH"] = str(Path(__file__).parent)
    done = subprocess.run(
        [setpriv, *drop, sys.executable, "-c", WITHOUT_SYS_ADMIN, str(open_tmp / "data"),
         str(UID_A)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["code"] == 0 and got["out"].split() == [str(UID_A), "0077", "TMPDIR=unset"], got
    assert got["sandbox"] == {
        "enforced": False,
        "why": "private /tmp: not enforced: this machine refuses a mount namespace: "
        "unshare(CLONE_NEWNS): Operation not permitted",
        "umask": "0077",
    }


def test_a_notebook_server_and_a_kernel_run_in_a_task_with_private_mounts(open_tmp: Path) -> None:
    """jupyter writes its runtime files (the kernel's connection file too) under $HOME, the work
    dir; a kernel it starts runs code, in the task's private /tmp."""
    import urllib.request

    from jupyter_client import BlockingKernelClient

    from labhive.scheduler.executors.env import free_port

    jupyter = Path(sys.prefix, "bin", "jupyter")
    if not all(os.stat(d).st_mode & 0o001 for d in [*jupyter.parents, jupyter]):
        pytest.skip(f"{jupyter} is not executable by other uids here")
    port, token = free_port(), uuid.uuid4().hex
    ex = LocalExecutor(open_tmp / "data", grace_s=2)
    h = launch_one(
        ex, "nb",
        f"exec {jupyter} server --no-browser --ServerApp.ip=127.0.0.1 "
        f"--ServerApp.port={port} --IdentityProvider.token={token}",
        uid=UID_A, gid=UID_A,
    )  # fmt: skip

    def call(path: str, method: str = "GET", timeout: float = 5.0) -> dict | None:
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/api{path}", method=method,
            headers={"Authorization": f"token {token}"},
        )  # fmt: skip
        try:
            return json.loads(urllib.request.urlopen(req, timeout=timeout).read())
        except OSError:
            return None

    outputs: list[str] = []
    try:
        wait_until(lambda: call("/status"), "the notebook server", 90)
        kernel = call("/kernels", "POST", timeout=90)  # a kernel's start: seconds when busy
        assert kernel is not None
        runtime = Path(h.info["cwd"], ".local", "share", "jupyter", "runtime")
        connection = runtime / f"kernel-{kernel['id']}.json"
        wait_until(connection.exists, "the kernel's connection file in $HOME", 60)
        client = BlockingKernelClient(connection_file=str(connection))
        client.load_connection_file()
        # no heartbeat: its 1 s time-to-dead calls a live kernel dead on a loaded machine
        # ("Kernel died before replying to kernel_info"); the replies below are the proof
        client.start_channels(hb=False)
        try:
            # the kernel answers kernel_info once its iopub reaches us: output sent before
            # that is lost (ZeroMQ's late subscriber), and the wait for it never ends
            client.wait_for_ready(timeout=90)
            code = "import os, tempfile; print(os.getuid(), tempfile.gettempdir(), os.umask(0))"
            client.execute_interactive(
                code, timeout=90,
                output_hook=lambda msg: outputs.append(msg["content"].get("text", "")),
            )  # fmt: skip
        finally:
            client.stop_channels()
    finally:
        ex.stop([h], grace_s=2)
    assert "".join(outputs).split() == [str(UID_A), "/tmp", str(0o077)], outputs
