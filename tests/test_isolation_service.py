"""Given a root service running tasks as their users (alice's uid named in users.yaml, bob's
allocated), expect alice's job to run as her uid and to get EACCES for the database, the admin
token, the users file, bob's job directory and bob's output, and to be unable to cancel bob's
job with anything it can read; and every user's uid to stay the same across restarts."""

from __future__ import annotations

import errno
import json
import os
import shlex
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from isolation_util import (
    ALICE_UID,
    FIRST_UID,
    USERS,
    isolated_service,
    needs_root,
    open_tmp_dir,
    parse_probe,
    probe_command,
    probe_env,
    user_python,
)
from service_fixtures import Live
from waiting import wait_until

from labhive.scheduler.core.errors import UserError

pytest_plugins = ["service_fixtures"]
CANCEL = """
import json, os, sys, urllib.request, urllib.error
url, job = sys.argv[1], sys.argv[2]
candidates = [None] + [v for k, v in os.environ.items() if "TOKEN" in k]
for path in sys.argv[3:]:
    try:
        candidates += open(path).read().split()
    except OSError:
        pass
codes = []
for token in candidates:
    req = urllib.request.Request(f"{url}/jobs/{job}/cancel", method="POST", data=b"")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        codes.append(urllib.request.urlopen(req, timeout=10).status)
    except urllib.error.HTTPError as err:
        codes.append(err.code)
print(json.dumps({"tried": len(candidates), "codes": codes}))
"""


@pytest.fixture
def service() -> Iterator[Live]:
    with open_tmp_dir() as tmp, isolated_service(tmp / "data") as live:
        yield live


def running(job, what: str):
    return wait_until(lambda: job.refresh().state == "RUNNING" and job, what, 60)


@needs_root
def test_a_users_job_reads_nothing_of_the_service_or_other_users(service: Live) -> None:
    data = service.data_dir
    bob = service.client("bob-token-4567").submit(
        name="bob", command="echo BOB-SECRET; exec sleep 120", vc="vc1", gpus=0
    )
    running(bob, "bob's job")
    wait_until(lambda: "BOB-SECRET" in bob.logs().data, "bob's output", 30)
    bob_task = data / "jobs" / str(bob.id) / "1" / f"{bob.tasks[0]['role']}-0"
    assert (bob_task / "stdout").read_text() == "BOB-SECRET\n"  # the path is the real one
    targets: list[tuple[str, str, str | Path]] = [
        ("its own file by absolute path", "write", "~/mine.txt"),
        ("the data directory", "list", data),
        ("the database", "read", data / "labhive.db"),
        ("the database's WAL", "read", data / "labhive.db-wal"),
        ("the admin token", "read", data / "admin.token"),
        ("the users file", "read", data / "users.yaml"),
        ("bob's job directory", "list", data / "jobs" / str(bob.id)),
        ("bob's stdout", "read", bob_task / "stdout"),
        ("bob's work directory", "list", bob_task / "work"),
    ]
    probe = f"{probe_command()}; {shlex.quote(user_python())} -c {shlex.quote(CANCEL)} " + " ".join(
        shlex.quote(str(p))
        for p in (service.url, bob.id, data / "admin.token", data / "users.yaml")
    )
    env = probe_env(targets)["PROBE_TARGETS"]
    alice = service.client("alice-token-123").submit(
        name="alice", command=f"export PROBE_TARGETS={shlex.quote(env)}; {probe}", vc="vc1", gpus=0
    )
    wait_until(lambda: alice.refresh().done, "alice's probe", 60)
    out = alice.logs().data
    assert alice.state == "SUCCEEDED", (alice.data, out, alice.logs(stream="stderr").data)
    report = parse_probe(out.split("\n", 1)[0].encode())
    cancel = json.loads(out.strip().splitlines()[-1])

    assert (report["uid"], report["gid"], report["groups"]) == (ALICE_UID, ALICE_UID, [])
    assert report["home"].startswith(str(data / "jobs" / str(alice.id)))
    assert report["tries"] == {
        label: "ok" if label.startswith("its own") else errno.EACCES for label, _, _ in targets
    }
    assert cancel["codes"] and set(cancel["codes"]) == {401}, cancel
    assert bob.refresh().state == "RUNNING", "bob's job was cancelled by alice's"
    assert alice.tasks[0]["run_as"] == {"uid": ALICE_UID, "gid": ALICE_UID, "separated": True}
    assert bob.tasks[0]["run_as"]["uid"] == FIRST_UID
    assert stat.S_IMODE(data.stat().st_mode) == 0o711
    for secret in ("labhive.db", "admin.token"):
        assert stat.S_IMODE((data / secret).stat().st_mode) == 0o600, secret
    bob.cancel()


@needs_root
def test_uids_are_allocated_once_and_kept_across_restarts() -> None:
    with open_tmp_dir() as tmp:
        with isolated_service(tmp / "data") as live:
            first = {u: live.client(t).me() for u, t in TOKENS.items()}
        with isolated_service(tmp / "data") as live:
            again = {u: live.client(t).me() for u, t in TOKENS.items()}
    assert first == again
    assert (first["alice"]["uid"], first["bob"]["uid"]) == (ALICE_UID, FIRST_UID)
    assert first["bob"]["gid"] == FIRST_UID


TOKENS = {"alice": "alice-token-123", "bob": "bob-token-4567"}


def test_allocation_skips_configured_uids_and_refuses_a_shared_uid(store) -> None:
    from labhive.scheduler.service.accounts import Accounts

    accounts = Accounts(store, {"carol": (500, 500)}, first_uid=500, count=10)
    accounts.sync()
    assert accounts.of("carol").uid == 500
    assert [accounts.of(u).uid for u in ("dan", "erin")] == [501, 502]
    assert Accounts(store, {"carol": (500, 500)}, first_uid=500).of("erin").uid == 502
    with pytest.raises(UserError, match="uid 501 configured for 'frank' already belongs to 'dan'"):
        Accounts(store, {"frank": (501, 501)}, first_uid=500).sync()


def test_root_and_nonsense_uids_are_refused_in_the_users_file(tmp_path: Path) -> None:
    from labhive.scheduler.service.accounts import load_configured

    for bad in ("0", "-3", "'x'", "true"):
        path = tmp_path / "users.yaml"
        path.write_text(f"users:\n  eve: {{token: eve-token-1, uid: {bad}}}\n")
        with pytest.raises(UserError, match=r"users\.eve\.uid must be a number from 1"):
            load_configured(path)


@needs_root
def test_a_users_file_others_can_read_is_refused_when_tasks_run_as_users() -> None:
    with open_tmp_dir() as tmp:
        from labhive.scheduler.service.server import ServeOptions, build

        users = tmp / "users.yaml"
        users.write_text(USERS)
        os.chmod(users, 0o644)
        opts = ServeOptions(data_dir=tmp / "data", users=users, task_identity="users")
        with pytest.raises(UserError, match=r"chmod 600 .*users.yaml"):
            build(opts)


def test_the_hubs_grants_file_may_name_uids_without_tokens(tmp_path: Path) -> None:
    from labhive.scheduler.service.accounts import load_configured
    from labhive.scheduler.service.auth import load_grants

    grants = tmp_path / "grants.yaml"
    grants.write_text("groups:\n  students: {vcs: [vc1]}\nusers:\n  alice: {uid: 1001}\n")
    assert set(load_grants(grants)) == {"students"}
    assert load_configured(grants) == {"alice": (1001, 1001)}


@needs_root
def test_a_python_users_cannot_run_is_named_at_start_up(monkeypatch) -> None:
    from labhive.scheduler.service.server import ServeOptions, unreachable_python

    with open_tmp_dir() as tmp:
        for folder, mode in (("open", 0o755), ("private", 0o700)):
            (tmp / folder).mkdir(mode=mode)
            os.chmod(tmp / folder, mode)
            (tmp / folder / "python").write_text("")
            os.chmod(tmp / folder / "python", 0o755)
        monkeypatch.setattr("sys.executable", str(tmp / "open" / "python"))
        assert unreachable_python(ServeOptions(task_identity="users")) == ""
        monkeypatch.setattr("sys.executable", str(tmp / "private" / "python"))
        problem = unreachable_python(ServeOptions(task_identity="users"))
        assert f"({tmp / 'private'} is not open to other users)" in problem
        assert "--task-identity service" in problem
        assert unreachable_python(ServeOptions(task_identity="service")) == ""


@needs_root
def test_a_job_killed_for_memory_says_so(service: Live) -> None:
    from labhive.scheduler.executors import limits

    support = limits.detect()
    if support.cgroup_parent is None and "memory" not in support.v1:
        pytest.skip(f"no memory cgroup here: {support.why_not_cgroup}")
    shm = f"/dev/shm/labhive-test-{os.getpid()}-oom"
    try:
        job = service.client("bob-token-4567").submit(
            name="hog", command=f"exec dd if=/dev/zero of={shm} bs=1M count=400", vc="vc1",
            gpus=0, memory_mb=64,
        )  # fmt: skip
        wait_until(lambda: job.refresh().done, "the hog to end", 60)
    finally:
        Path(shm).unlink(missing_ok=True)
    assert (job.state, job.exit_code) == ("FAILED", 137), job.data
    why = job.events()[-1]["why"]
    oom = "killed: over its memory limit of 64 MiB"
    assert why == f"attempt 1 failed (exit codes main-0: 137 ({oom}))", why


@needs_root
def test_a_users_job_sees_neither_another_jobs_tmp_nor_other_processes(service: Live) -> None:
    """bob's job leaves a file in /tmp and /dev/shm and keeps running; alice's job, through the
    service, finds neither, nor bob's process, nor the service's command line."""
    import psutil

    name = f"bob-{os.getpid()}-left"
    bob = service.client("bob-token-4567").submit(
        name="bob", vc="vc1", gpus=0,
        command=f"echo BOB > /tmp/{name}; echo BOB > /dev/shm/{name}; chmod 666 /tmp/{name} "
        f"/dev/shm/{name}; echo ready; exec sleep 120",
    )  # fmt: skip
    running(bob, "bob's job")
    wait_until(lambda: "ready" in bob.logs().data, "bob's files", 30)
    bob_pids = [p.pid for p in psutil.process_iter(["uids"]) if p.info["uids"].real == FIRST_UID]
    assert bob_pids, "bob's command not found"
    targets = [
        ("bob's /tmp file", "read", f"/tmp/{name}"),
        ("bob's /dev/shm file", "read", f"/dev/shm/{name}"),
        ("bob's command line", "read", f"/proc/{bob_pids[0]}/cmdline"),
        ("the service's command line", "read", f"/proc/{os.getpid()}/cmdline"),
    ]
    env = probe_env(targets)["PROBE_TARGETS"]
    alice = service.client("alice-token-123").submit(
        name="alice", vc="vc1", gpus=0,
        command=f"export PROBE_TARGETS={shlex.quote(env)}; {probe_command()}",
    )  # fmt: skip
    wait_until(lambda: alice.refresh().done, "alice's probe", 60)
    assert alice.state == "SUCCEEDED", (alice.data, alice.logs(stream="stderr").data)
    report = parse_probe(alice.logs().data.encode())
    bob.cancel()
    on_host = [p for p in (Path("/tmp", name), Path("/dev/shm", name)) if p.exists()]
    for path in on_host:  # not left to the next run, should the isolation have failed
        path.unlink()

    assert report["tries"] == {label: errno.ENOENT for label, _, _ in targets}
    sandbox = alice.tasks[0]["limits"]["sandbox"]  # what the API tells the user
    assert (sandbox["enforced"], sandbox["proc"], sandbox["umask"]) == (
        True,
        "hidepid=invisible",
        "0077",
    )
    assert on_host == []
