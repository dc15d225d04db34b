"""Given the job service with the local executor and podman, expect a job naming an image the
cluster lacks to be refused at submit with the names of those it has, a job naming one it has
to run in a container, and, after a kill -9 of ``labhive serve`` while containers run, the
restarted service to re-adopt them and settle each with its container's real exit code."""

from __future__ import annotations

import errno
import json
import shlex
import signal
from pathlib import Path

import pytest
from container_support import (
    containers_of,
    podman_or_skip,
    python_image,
    remove_containers,
    tiny_image,
)
from service_process import spawn_service
from waiting import wait_until

from labhive.scheduler.client import Client, LabHiveError
from labhive.scheduler.executors.env import free_port

__all__ = ["python_image", "tiny_image"]  # fixtures, used by name
pytest_plugins = ["service_fixtures"]


@pytest.fixture(autouse=True, scope="module")
def podman() -> None:
    podman_or_skip()


def test_a_job_naming_an_unknown_image_is_refused_with_the_images_there_are(
    live_sqlite, tiny_image
):
    c = live_sqlite.client()
    with pytest.raises(LabHiveError) as refused:
        c.submit(command="true", vc="vc1", gpus=1, image="labhive/nope")
    assert refused.value.status == 422
    assert "image 'labhive/nope' is not available on this cluster" in refused.value.message
    assert tiny_image in refused.value.message.split("images it has: ")[1]
    assert c.jobs() == []  # nothing stored


def test_labhive_submit_image_runs_in_it_or_says_which_images_there_are(
    live_sqlite, tiny_image, capsys
):
    from labhive.scheduler.cli import main

    base = ["submit", "--url", live_sqlite.url, "--token", live_sqlite.admin, "--vc", "vc1"]
    code = main([*base, "--image", tiny_image, "--wait", "--json", "--", "pwd"])
    out = capsys.readouterr().out
    assert code == 0 and json.loads(out)["state"] == "SUCCEEDED"
    assert live_sqlite.client().logs(json.loads(out)["id"]).data == "/labhive/task\n"
    code = main([*base, "--image", "labhive/absent", "--", "pwd"])
    err = capsys.readouterr().err
    assert code == 2 and "image 'labhive/absent' is not available" in err and tiny_image in err


def test_the_submit_magic_takes_an_image(live_sqlite, tiny_image, monkeypatch):
    from IPython.testing import globalipapp

    monkeypatch.setenv("LABHIVE_URL", live_sqlite.url)
    monkeypatch.setenv("LABHIVE_TOKEN", live_sqlite.admin)
    globalipapp.start_ipython()
    shell = globalipapp.get_ipython()
    shell.run_line_magic("load_ext", "labhive.kernel_ext")
    job = shell.run_line_magic("submit", f"--vc vc1 --image {tiny_image} --wait -- pwd")
    assert job.refresh().state == "SUCCEEDED"
    assert live_sqlite.client().logs(job.id).data == "/labhive/task\n"


def test_a_job_naming_an_image_runs_in_a_container(live_sqlite, tiny_image):
    c = live_sqlite.client()
    job = c.submit(command="cat /proc/1/cmdline; echo; pwd", vc="vc1", gpus=1, image=tiny_image)
    assert job.wait(60, 0.05).state == "SUCCEEDED"
    assert (
        c.logs(job.id).data
        == "/bin/sh\x00-c\x00cat /proc/1/cmdline; echo; pwd\x00\n/labhive/task\n"
    )


def test_an_openpai_job_runs_in_the_image_its_role_names(live_sqlite, tiny_image):
    job = live_sqlite.client().submit(
        {
            "protocolVersion": 2,
            "name": "pai-boxed",
            "prerequisites": [{"type": "dockerimage", "name": "box", "uri": tiny_image}],
            "taskRoles": {
                "main": {
                    "instances": 1,
                    "dockerImage": "box",
                    "resourcePerInstance": {"gpu": 1, "cpu": 1, "memoryMB": 256},
                    "commands": ["readlink /proc/self/ns/mnt > /dev/null && pwd"],
                }
            },
            "defaults": {"virtualCluster": "vc1"},
        }
    )
    assert job.wait(60, 0.05).state == "SUCCEEDED"
    assert live_sqlite.client().logs(job.id).data == "/labhive/task\n"


def test_an_oom_kill_is_what_the_failed_job_says(live_sqlite, tiny_image):
    hog = "a=$(head -c 100000000 /dev/zero | tr '\\0' a)"
    job = live_sqlite.client().submit(command=hog, vc="vc1", gpus=1, memory_mb=32, image=tiny_image)
    assert (job.wait(60, 0.05).state, job.exit_code) == ("FAILED", 137)
    assert job.data["why"].endswith("(killed: over its memory limit of 32 MiB))"), job.data["why"]


@pytest.fixture
def data_dir(tmp_path: Path):
    data = tmp_path / "data"
    yield data
    remove_containers(data)  # a failed test must not leave its containers waiting forever


def test_after_kill_9_of_the_service_containers_are_readopted_with_real_exit_codes(
    data_dir, tiny_image
):
    port = free_port()
    first = spawn_service(data_dir, port)
    c = Client(f"http://127.0.0.1:{port}/api/v1", (data_dir / "admin.token").read_text().strip())
    wait = "while [ ! -e go ]; do sleep 0.05; done; "  # go: a file in the task's own directory
    try:
        ok = c.submit(command=wait + "echo done", vc="vc1", gpus=1, name="ok", image=tiny_image)
        bad = c.submit(command=wait + "exit 4", vc="vc1", gpus=1, name="bad", image=tiny_image)
        jobs = (ok, bad)
        dirs = {}

        def running() -> bool:
            for j in jobs:
                found = list(data_dir.glob(f"jobs/{j.id}/*/*/handle.json"))
                if found:
                    dirs[j.id] = found[0].parent
            return len(dirs) == 2 and all(containers_of(str(j.id), data_dir) for j in jobs)

        wait_until(running, what="both containers to run")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    second = spawn_service(data_dir, port)
    try:
        assert [j.refresh().state for j in jobs] == ["RUNNING", "RUNNING"]
        for d in dirs.values():
            (d / "work" / "go").touch()  # the task's working directory, mounted
        assert ok.wait(30, 0.05).state == "SUCCEEDED"
        assert (bad.wait(30, 0.05).state, bad.exit_code) == ("FAILED", 4)
        assert c.logs(ok.id).data == "done\n"
        for job in jobs:  # the same containers carried on, and are gone once settled
            assert [e["reason"] for e in job.events()].count("started") == 1
            assert containers_of(str(job.id), data_dir) == []
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=30)


def test_a_users_container_runs_as_their_uid_and_reaches_nothing_else(python_image):
    """As the bare-process test in test_isolation_service.py, in a container: alice's job runs
    as her uid; her own directory is writable, the service's files and bob's are not there."""
    from isolation_util import ALICE_UID, isolated_service, open_tmp_dir, parse_probe, probe_env
    from isolation_util import PROBE as probe_script

    with open_tmp_dir() as tmp, isolated_service(tmp / "data") as live:
        data = live.data_dir
        bob = live.client("bob-token-4567").submit(
            name="bob", command="echo BOB-SECRET", vc="vc1", gpus=0, image=python_image
        )
        assert bob.wait(60, 0.05).state == "SUCCEEDED"
        bob_task = data / "jobs" / str(bob.id) / "1" / f"{bob.tasks[0]['role']}-0"
        targets = [
            ("its own file", "write", "~/mine.txt"),
            ("the data directory", "list", data),
            ("the database", "read", data / "labhive.db"),
            ("the admin token", "read", data / "admin.token"),
            ("bob's stdout", "read", bob_task / "stdout"),
            ("bob's work directory", "list", bob_task / "work"),
        ]
        env = probe_env(targets)["PROBE_TARGETS"]
        command = f"export PROBE_TARGETS={shlex.quote(env)}; python3 -c {shlex.quote(probe_script)}"
        alice = live.client("alice-token-123").submit(
            name="alice", command=command, vc="vc1", gpus=0, image=python_image
        )
        assert alice.wait(60, 0.05).state == "SUCCEEDED", alice.logs(stream="stderr").data
        report = parse_probe(alice.logs().data.encode())
        assert (report["uid"], report["gid"], report["home"]) == (
            ALICE_UID,
            ALICE_UID,
            "/labhive/task",
        )
        assert report["tries"] == {  # not in its mount namespace: ENOENT rather than EACCES
            label: "ok" if label == "its own file" else errno.ENOENT for label, _, _ in targets
        }
        assert alice.tasks[0]["run_as"] == {"uid": ALICE_UID, "gid": ALICE_UID, "separated": True}
