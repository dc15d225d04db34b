"""Given the local executor and a job with an image, expect each task to run as a real podman
container (runc on this cgroup v1 host): as the uid it was given, in its own directory and
nothing else of the host's files, with a memory limit whose OOM kill is reported as such, a CPU
quota it cannot exceed, a gang that rendezvouses over the host network, strace that shows the
runtime's namespaces, and containers that are found again by their labels."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from container_support import containers_of, podman_or_skip, python_image, tiny_image
from local_exec_util import task, wait_exits

from labhive.scheduler.executors.base import TaskHandle, TaskKey
from labhive.scheduler.executors.local import LocalExecutor

__all__ = ["python_image", "tiny_image"]  # fixtures, used by name

pytestmark = pytest.mark.usefixtures("podman")


@pytest.fixture(scope="session")
def podman() -> None:
    podman_or_skip()


@pytest.fixture
def ex(tmp_path: Path):
    executor = LocalExecutor(tmp_path / "data", grace_s=1.0)
    yield executor
    executor.stop([t.handle for t in list(executor._tasks.values())], grace_s=0)


def run(ex: LocalExecutor, job: str, command: str, **kw) -> tuple[int | None, str, str, Path]:
    """Launch one containerized task, wait for its end: (exit code, reason, stdout, task dir)."""
    (handle,) = ex.launch([task(job, command, **kw)])
    (end,) = wait_exits(ex, 1, timeout_s=60).values()
    work = Path(handle.info["workdir"])
    return end.exit_code, end.reason, (work / "stdout").read_text(), work


def test_a_container_task_runs_as_its_uid_in_its_own_directory(ex, tiny_image):
    code, _, out, work = run(
        ex, "uid", "id -u; id -g; pwd; echo hi > mine; echo $PAI_TASK_INDEX", image=tiny_image,
        uid=4242, gid=4343,
    )  # fmt: skip
    assert (code, out.split()) == (0, ["4242", "4343", "/labhive/task", "0"])
    mine = work / "work" / "mine"  # the task's working directory (workdir.py), mounted
    assert (mine.stat().st_uid, mine.stat().st_gid, mine.read_text()) == (4242, 4343, "hi\n")
    assert containers_of("uid", ex.data_dir) == []  # removed once settled


def test_a_container_tasks_output_is_capped_by_the_relay_and_not_kept_by_podman(
    tmp_path, tiny_image
):
    ex = LocalExecutor(tmp_path / "data", grace_s=1.0, output_cap=1024 * 1024)
    cmd = "yes 0123456789abcdef 2>/dev/null | head -c 5242880; echo done >&2"
    code, _, out, work = run(ex, "chatty", cmd, image=tiny_image)
    assert code == 0
    kept, notice = out[: 1024 * 1024], out[1024 * 1024 :]
    assert kept.startswith("0123456789abcdef\n")
    assert notice.startswith("\nlabhive: output past 1 MiB dropped") and notice.count("\n") == 2
    assert (work / "stderr").read_text() == "done\n"
    launch = json.loads((work / "launch.json").read_text())
    assert launch["argv"][launch["argv"].index("--log-driver") + 1] == "none"


def test_a_container_cannot_see_another_jobs_directory_or_the_data_dir(ex, tiny_image):
    _, _, _, work_b = run(ex, "b-secret", "echo b-private", image=tiny_image, uid=5001)
    data_dir = ex.data_dir
    probe = f"cat {work_b}/stdout; ls {data_dir}; cat {data_dir}/admin.token; ls /labhive"
    _, _, out, work_a = run(ex, "a-snoop", probe, image=tiny_image, uid=5002, gid=5002)
    err = (work_a / "stderr").read_text()
    assert "b-private" not in out
    # not in its mount namespace at all
    assert f"can't open '{work_b}/stdout': No such file or directory" in err
    assert f"ls: {data_dir}: No such file or directory" in err
    assert f"can't open '{data_dir}/admin.token': No such file or directory" in err
    assert out.split() == ["task"]  # all it has of the host: its own directory


def test_a_container_gets_the_tasks_environment_not_the_services(ex, tiny_image, monkeypatch):
    monkeypatch.setenv("SERVICE_ONLY_SECRET", "s3cret")
    monkeypatch.setenv("PGPASSWORD", "pg-pass")
    code, _, out, _ = run(ex, "envs", "env", image=tiny_image, env={"JOB_LEVEL": "yes"})
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert code == 0 and not {"SERVICE_ONLY_SECRET", "PGPASSWORD"} & set(env)
    assert (env["JOB_LEVEL"], env["PAI_JOB_NAME"], env["CUDA_VISIBLE_DEVICES"]) == (
        "yes",
        "envs",
        "0",
    )
    assert env["LABHIVE_JOB_ID"] == "envs" and env["PAI_TASK_ROLE_NAME"] == "worker"


def test_an_oom_kill_is_detected_and_reported(ex, tiny_image):
    hog = "a=$(head -c 100000000 /dev/zero | tr '\\0' a); echo survived"
    code, reason, out, _ = run(ex, "oom", hog, image=tiny_image, memory_mb=32)
    assert (code, reason, out) == (137, "killed: over its memory limit of 32 MiB", "")
    small = "a=$(head -c 4000000 /dev/zero | tr '\\0' a); echo survived"
    code, reason, out, _ = run(ex, "fits", small, image=tiny_image, memory_mb=32)
    assert (code, reason, out) == (0, "exit code 0", "survived\n")


def test_shared_memory_over_the_limit_is_stopped(ex, tiny_image):
    fill = "dd if=/dev/zero of=/dev/shm/big bs=1M count=100 2>/dev/null; echo wrote $?"
    code, reason, out, _ = run(ex, "shm", fill, image=tiny_image, memory_mb=32)
    assert out != "wrote 0\n", "100 MB of tmpfs pages got past a 32 MiB limit"
    assert code == 137 or out.startswith("wrote 1"), (code, reason, out)


def test_a_cpu_quota_is_observed(ex, python_image):
    burn = (
        "import os, time\n"
        "start = time.monotonic()\n"
        "while time.monotonic() - start < 2: pass\n"
        "t = os.times(); print((t.user + t.system) / (time.monotonic() - start))\n"
    )
    quota = "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cat /sys/fs/cgroup/cpu.max"
    command = f"{quota}; python3 -c '{burn}'"
    code, _, out, _ = run(ex, "cpu", command, image=python_image, cpu=0.25)
    quota_line, share = out.split()
    assert code == 0 and quota_line.split()[0] == "25000"
    assert float(share) < 0.4, f"used {share} of a core under a quota of 0.25"


def test_a_containerized_gang_rendezvouses_over_the_host_network(ex, python_image):
    script = (
        "import os, socket, time\n"
        "rank, world = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])\n"
        "addr, port = os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT'])\n"
        "if rank == 0:\n"
        "    s = socket.create_server((addr, port)); c, _ = s.accept()\n"
        "    print('rank 0 of', world, 'got', c.recv(64).decode(), flush=True)\n"
        "else:\n"
        "    for _ in range(600):\n"
        "        try: c = socket.create_connection((addr, port)); break\n"
        "        except OSError: time.sleep(0.05)\n"
        "    c.sendall(b'hello from rank 1'); print('rank 1 of', world, 'sent', flush=True)\n"
    )
    command = f'python3 -c "{script}"'
    handles = ex.launch([task("gang", command, i, image=python_image) for i in (0, 1)])
    ends = wait_exits(ex, 2, timeout_s=60)
    assert [e.exit_code for e in ends.values()] == [0, 0]
    logs = [Path(h.info["stdout"]).read_text() for h in handles]
    assert logs == ["rank 0 of 2 got hello from rank 1\n", "rank 1 of 2 sent\n"]


def test_strace_follows_the_runtime_into_the_container(ex, tiny_image):
    (handle,) = ex.launch([task("traced", "cat /proc/self/status", image=tiny_image,
                                observe="strace")])  # fmt: skip
    (end,) = wait_exits(ex, 1, timeout_s=60).values()
    (log,) = ex.observations(handle)
    text = Path(log).read_text()
    assert end.exit_code == 0
    assert re.search(r"(unshare|clone3?)\(.*CLONE_NEWNS.*CLONE_NEWPID", text)
    assert "pivot_root(" in text  # runc moving into the image's root
    assert 'execve("/bin/sh", ["/bin/sh", "-c", "cat /proc/self/status"]' in text


def test_a_stopped_container_is_removed(ex, tiny_image):
    (handle,) = ex.launch([task("stopme", "sleep 60", image=tiny_image)])
    from waiting import wait_until

    wait_until(lambda: containers_of("stopme", ex.data_dir) != [], what="the container to exist")
    ex.stop([handle], grace_s=0.5)
    assert containers_of("stopme", ex.data_dir) == []


def test_stop_gives_the_container_its_term_signal_within_the_grace_period(ex, tiny_image):
    trap = "trap 'echo got TERM; exit 0' TERM; echo up; while true; do sleep 0.1; done"
    (handle,) = ex.launch([task("graceful", trap, image=tiny_image)])
    out = Path(handle.info["stdout"])
    from waiting import wait_until

    wait_until(lambda: out.read_text() == "up\n", what="the container to start")
    ex.stop([handle], grace_s=30)
    assert out.read_text() == "up\ngot TERM\n"  # it ended on TERM, not on the KILL after 30 s
    assert containers_of("graceful", ex.data_dir) == []


def test_a_container_the_service_never_recorded_is_found_by_its_labels(tmp_path, tiny_image):
    first = LocalExecutor(tmp_path / "data")
    (handle,) = first.launch([task("lost", "exit 7", image=tiny_image)])
    work = Path(handle.info["workdir"])
    from waiting import wait_until

    wait_until(lambda: (work / "exit.json").exists(), what="the task to end")
    (work / "handle.json").unlink()  # as if the service died before recording the launch
    first._tasks.clear()
    second = LocalExecutor(tmp_path / "data")
    (end,) = second.adopt([TaskHandle(TaskKey("lost", 0, "worker", 0), {})])
    assert (end.exit_code, "found by its labels" in end.reason) == (7, True)
    assert containers_of("lost", tmp_path / "data") == []


def test_the_launch_record_says_what_the_container_enforces(ex, tiny_image):
    (handle,) = ex.launch([task("rec", "true", image=tiny_image, cpu=0.5, memory_mb=64)])
    wait_exits(ex, 1, timeout_s=60)
    launch = json.loads((Path(handle.info["workdir"]) / "launch.json").read_text())
    assert launch["argv"][:2] == [launch["argv"][0], "run"] and "--network" in launch["argv"]
    limits = handle.info["limits"]
    assert limits["memory"]["bytes"] == 64 << 20 and limits["cpu"]["cores"] == 0.5
    assert "rlimits" not in limits and "cgroup" not in limits  # podman itself runs unlimited


@pytest.mark.parametrize("gpus", [(), (1,)], ids=["no GPU", "GPU 1"])
def test_an_nvidia_node_put_into_a_containers_mounts_cannot_be_opened(ex, tiny_image, gpus):
    """The task's directory is bind-mounted into its container: a device node that appears
    there (made by root on the host, mode 0666) is still refused by the container's device
    cgroup (runc's), which allows only the standard nodes and the --device'd GPUs."""
    import dataclasses
    import os
    import stat

    from waiting import wait_until

    command = "while [ ! -e nvidia0 ]; do sleep 0.05; done; cat nvidia0 nvidia1 2>&1; true"
    launch = dataclasses.replace(
        task("node", command, image=tiny_image, uid=4242, gid=4242), gpus=gpus, virtual=False
    )
    (handle,) = ex.launch([launch])
    work = Path(handle.info["cwd"])
    wait_until(work.exists, "the task's directory")
    for minor in (1, 0):  # nvidia0 last: the task starts reading when it appears
        os.mknod(work / f"nvidia{minor}", 0o666 | stat.S_IFCHR, os.makedev(195, minor))
        os.chmod(work / f"nvidia{minor}", 0o666)
    wait_exits(ex, 1, timeout_s=60)
    out = (Path(handle.info["workdir"]) / "stdout").read_text()
    assert out.count("Operation not permitted") == 2, out
    devices = handle.info["limits"]["devices"]
    assert devices["enforced"] and devices["by"].startswith("container"), devices
    assert devices["granted_gpus"] == []  # no /dev/nvidia1 on this host to hand over


def test_podman_itself_runs_on_the_allow_list_and_its_own_settings(ex, tiny_image, monkeypatch):
    """podman runs as the service, around the container: it gets the kept variables, its
    config and the task's variables (read by name), none of the service's secrets."""
    monkeypatch.setenv("PGPASSWORD", "pg-pass")
    (handle,) = ex.launch([task("podenv", "sleep 30", image=tiny_image)])
    try:
        raw = Path(f"/proc/{handle.info['pid']}/environ").read_bytes()
    finally:
        ex.stop([handle], grace_s=0)
    names = {item.split(b"=", 1)[0].decode() for item in raw.split(b"\0") if b"=" in item}
    assert "PGPASSWORD" not in names
    assert {"PATH", "CONTAINERS_CONF", "PAI_JOB_NAME", "LABHIVE_JOB_ID"} <= names
