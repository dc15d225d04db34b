"""Given a job submitted from a directory, expect its tasks to run there when the user may read
it (``python train.py`` finds train.py), and otherwise to fail saying why, without root ever
entering the directory on the user's behalf; and expect ``labhive logs`` and ``labhive show``
of a failed job to print the end of its stderr, where the reason is."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from isolation_util import ALICE_UID, isolated_service, needs_root, open_tmp_dir, user_python
from service_fixtures import Live, live_service

from labhive.scheduler.cli import main

ALICE = "alice-token-123"
TRAIN = "import os\nprint('trained in', os.getcwd())\nopen('model.txt', 'w').write('weights')\n"


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    with open_tmp_dir("/var/tmp") as path:  # not /tmp: a task's /tmp is its own
        yield path


@pytest.fixture
def alice_service(open_tmp: Path) -> Iterator[Live]:
    with isolated_service(open_tmp / "data") as live:
        yield live


def submit(live: Live, token: str, *words: str) -> int:
    """``labhive submit --wait`` as typed in a shell, in the current directory."""
    return main(["submit", "--url", live.url, "--token", token, "--gpus", "0", "--vc", "vc1",
                 "--wait", "--", *words])  # fmt: skip


def alice_lab_dir(open_tmp: Path) -> Path:
    lab = open_tmp / "home-alice" / "lab3"
    lab.mkdir(parents=True)
    (lab / "train.py").write_text(TRAIN)
    for path in (lab.parent, lab, lab / "train.py"):
        os.chown(path, ALICE_UID, ALICE_UID)
    lab.parent.chmod(0o700)  # her home: no one else's to read
    return lab


@needs_root
def test_python_train_py_submitted_from_the_directory_holding_it_runs_there(
    alice_service: Live, open_tmp: Path, monkeypatch: pytest.MonkeyPatch
):
    lab = alice_lab_dir(open_tmp)
    monkeypatch.chdir(lab)
    assert submit(alice_service, ALICE, f"{shlex.quote(user_python())} train.py") == 0
    (job,) = alice_service.client(ALICE).jobs()
    assert job.state == "SUCCEEDED"
    assert job.logs().data == f"trained in {lab}\n"
    model = lab / "model.txt"
    assert model.read_text() == "weights"
    assert (model.stat().st_uid, model.stat().st_gid) == (ALICE_UID, ALICE_UID)


@needs_root
def test_a_cwd_the_user_cannot_read_fails_with_the_reason_and_root_never_enters_it(
    alice_service: Live, open_tmp: Path, capsys: pytest.CaptureFixture[str]
):
    """The attack: a directory the user could not reach (its parent is root's, 0700) holding a
    world-readable file. Entered as root before dropping privileges, the task would sit inside
    it and read the file; entered as the user, the chdir is refused."""
    locked = open_tmp / "root-only"
    inside = locked / "open-inside"
    inside.mkdir(parents=True)
    (inside / "secret.txt").write_text("ROOT-SECRET\n")
    (inside / "secret.txt").chmod(0o644)
    inside.chmod(0o755)
    locked.chmod(0o700)
    args = ["submit", "--url", alice_service.url, "--token", ALICE, "--gpus", "0", "--vc", "vc1"]
    code = main([*args, "--cwd", str(inside), "--wait", "--", "cat secret.txt"])
    out = capsys.readouterr()
    assert code == 1
    (job,) = alice_service.client(ALICE).jobs()
    assert job.state == "FAILED"
    assert "ROOT-SECRET" not in job.logs().data
    why = f"cannot run in {inside} as uid {ALICE_UID}: Permission denied"
    assert why in (job.info.why or job.info.reason), job.data
    assert why in out.err  # submit --wait printed the stderr tail
    assert "stderr (last 1 lines):" in out.err


@needs_root
def test_a_cwd_that_does_not_exist_fails_saying_so(alice_service: Live, open_tmp: Path):
    gone = open_tmp / "no-such-dir"
    job = alice_service.client(ALICE).submit(
        name="lost", command="true", gpus=0, vc="vc1", cwd=str(gone)
    )
    assert job.wait(timeout=60).state == "FAILED"
    assert f"cannot run in {gone} as uid {ALICE_UID}: No such file or directory" in (
        job.info.why or job.info.reason
    )


def test_a_job_without_cwd_runs_in_a_fresh_work_dir_and_a_relative_cwd_is_refused(
    tmp_path: Path,
):
    """An older client sends no cwd: its tasks run where they always did."""
    with live_service(tmp_path / "data") as live:
        job = live.client().submit(name="old", command="pwd", gpus=0)
        assert job.wait(timeout=60).state == "SUCCEEDED"
        where = job.logs().data.strip()
        assert where.startswith(str(tmp_path / "data")) and where.endswith("/work")
        with pytest.raises(Exception, match="cwd: must be an absolute path"):
            live.client().submit(name="rel", command="true", gpus=0, cwd="lab3")


def test_labhive_logs_of_a_failing_job_prints_its_stderr_tail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    with live_service(tmp_path / "data") as live:
        noisy = "; ".join(f"echo err-{i} >&2" for i in range(30))
        job = live.client().submit(name="bad", command=f"echo partial; {noisy}; exit 3", gpus=0)
        assert job.wait(timeout=60).state == "FAILED"
        capsys.readouterr()
        assert main(["logs", str(job.id), "--url", live.url, "--token", live.admin]) == 0
        out = capsys.readouterr()
        assert out.out == "partial\n"
        tail = "\n".join(f"err-{i}" for i in range(10, 30))
        assert out.err == f"stderr (last 20 lines):\n{tail}\n"
        assert main(["show", str(job.id), "--url", live.url, "--token", live.admin]) == 0
        assert f"stderr (last 20 lines):\n{tail}\n" in capsys.readouterr().out

        big = live.client().submit(
            name="big",
            command="head -c 300000 /dev/zero | tr '\\0' x >&2; echo >&2; echo last >&2; false",
            gpus=0,
        )
        assert big.wait(timeout=60).state == "FAILED"
        assert live.client().log_tail(big.id, 1) == "last"  # found from the end, not read all


def test_labhive_submit_sends_limits_and_where_it_runs_in_either_job_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    here = tmp_path / "project"
    here.mkdir()
    (here / "job.yaml").write_text(
        "protocolVersion: 2\nname: openpai-pwd\n"
        "taskRoles: {main: {resourcePerInstance: {gpu: 0}, commands: [pwd]}}\n"
    )
    monkeypatch.chdir(here)
    with live_service(tmp_path / "data") as live:
        auth = ["--url", live.url, "--token", live.admin]
        assert main(["submit", *auth, "--wait", "job.yaml"]) == 0
        sizes = ["--cpu", "0.1", "--cpu-limit", "2", "--memory-mb", "100", "--memory-limit", "300"]
        assert (
            main(["submit", *auth, "--gpus", "0", *sizes, "--no-cwd", "--wait", "--", "pwd"]) == 0
        )
        client = live.client()
        openpai, short = (client.job(j.id) for j in sorted(client.jobs(), key=lambda j: j.id))
        assert openpai.spec["extras"] == {"labhive": {"cwd": str(here)}}
        assert openpai.logs().data == f"{here}\n"
        assert (short.spec["cpu_limit"], short.spec["memory_limit_mb"]) == (2, 300)
        assert "cwd" not in short.spec and short.logs().data.strip().endswith("/work")
        (task,) = short.data["tasks"]
        assert task["limits"]["memory"]["bytes"] == 300 << 20
