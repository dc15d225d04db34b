"""Given a live service, expect the `labhive` client commands to submit, list, show, follow logs,
cancel and show the queue and cluster as readable tables, JSON with --json, and user mistakes as
one line on stderr with exit code 2."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest
from waiting import wait_until

from labhive.scheduler.cli import main
from labhive.scheduler.core.errors import UserError
from labhive.scheduler.service.auth import ensure_admin_token, load_users

pytest_plugins = ["service_fixtures"]


def run(capsys: pytest.CaptureFixture[str], live, *argv: str) -> tuple[int, str, str]:
    code = main([argv[0], "--url", live.url, "--token", live.admin, *argv[1:]])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_submit_watch_and_cancel_from_the_command_line(live_sqlite, capsys, tmp_path) -> None:
    live = live_sqlite
    code, out, _ = run(capsys, live, "submit", "--vc", "vc1", "--gpus", "1", "--tasks", "2",
                       "--name", "greet", "--wait", "--", "echo hello from $RANK")  # fmt: skip
    assert code == 0 and "greet" in out and "SUCCEEDED" in out
    job_id = out.split()[1]
    code, out, _ = run(capsys, live, "logs", job_id, "-f")
    assert out.strip() == "hello from 0"
    code, out, _ = run(capsys, live, "show", job_id)
    assert "main-1" in out and "started" in out and "succeeded" in out
    assert "GPU IDS" in out.splitlines()[2], "the indices, named apart from the GPU counts"
    spec = tmp_path / "long.yaml"
    spec.write_text("name: long\nvc: vc1\ngpus: 4\ncommand: sleep 60\n")
    code, out, _ = run(capsys, live, "submit", str(spec), "--json")
    long_id = json.loads(out)["id"]
    code, out, _ = run(capsys, live, "submit", "--vc", "vc1", "--", "true")

    def running() -> bool:
        return "RUNNING" in run(capsys, live, "jobs", "--state", "RUNNING")[1]

    wait_until(running, "a running job", 20, 0.1)
    code, out, _ = run(capsys, live, "queue")
    assert "vc1" in out and "WAITING" in out and "POS" in out
    code, out, _ = run(capsys, live, "cluster")
    assert "virtual" in out and "vnode-0" in out
    code, out, _ = run(capsys, live, "cancel", str(long_id))
    assert "STOPPED" in out
    code, out, _ = run(capsys, live, "jobs", "--json")
    assert {j["state"] for j in json.loads(out)} <= {"SUCCEEDED", "STOPPED", "WAITING", "RUNNING"}


def test_submit_wait_says_why_it_waits_then_follows_the_log_to_the_outcome(
    live_sqlite, capsys
) -> None:
    """Given vc1's 4 GPUs held, ``submit --follow`` of a 1-GPU job prints its queue position
    and the scheduler's why as they come, then its log and how it ended."""
    live = live_sqlite
    blocker = live.client().submit(name="blocker", command="sleep 600", gpus=4, vc="vc1")
    wait_until(lambda: blocker.refresh().state == "RUNNING", "the blocker to run", 20, 0.1)
    result: list[int] = []
    argv = ["submit", "--url", live.url, "--token", live.admin, "--vc", "vc1", "--gpus", "1",
            "--name", "late", "--follow", "--", "echo trained; exit 3"]  # fmt: skip
    cli = threading.Thread(target=lambda: result.append(main(argv)))
    seen: list[str] = []

    def printed(text: str) -> bool:
        seen.append(capsys.readouterr().out)
        return text in "".join(seen)

    cli.start()
    try:
        wait_until(lambda: printed("WAITING: position 1 of 1 in vc1 - "), "the position", 20, 0.1)
    finally:
        blocker.cancel()
    cli.join(60)
    assert not cli.is_alive() and result == [1]  # the job failed: exit status 1
    seen.append(capsys.readouterr().out)
    lines = "".join(seen).splitlines()
    assert lines[0].startswith("job ") and lines[0].endswith("'late' submitted to vc1"), lines
    waiting = next(line for line in lines if "WAITING: position" in line)
    assert waiting.count("position") == 1, "the why-text must not repeat the position"
    assert "trained" in lines, lines  # the log, between the state lines and the outcome
    assert "FAILED" in lines[-1] and "exit code 3" in lines[-1], lines


def test_user_mistakes_are_one_line_and_exit_2(live_sqlite, capsys) -> None:
    code, _, err = run(capsys, live_sqlite, "submit", "--vc", "vc1", "--gpus", "64", "--", "true")
    assert code == 2 and "job rejected" in err and "Traceback" not in err
    code, _, err = run(capsys, live_sqlite, "show", "12345")
    assert code == 2 and "no job 12345" in err
    code, _, err = run(capsys, live_sqlite, "submit")
    assert code == 2 and "give a job file or a command" in err
    code = main(["jobs", "--url", live_sqlite.url, "--token", "wrong-token"])
    assert code == 2 and "invalid token" in capsys.readouterr().err
    code = main(["jobs", "--url", "http://127.0.0.1:9", "--token", "x"])
    assert code == 2 and "cannot reach the LabHive service" in capsys.readouterr().err


def test_admin_token_file_is_private_and_stable(tmp_path: Path) -> None:
    path = tmp_path / "data" / "admin.token"
    token, created = ensure_admin_token(path)
    assert created and len(token) >= 32
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert ensure_admin_token(path) == (token, False)


def test_a_fresh_admin_token_can_always_follow_token_on_the_command_line(tmp_path: Path) -> None:
    tokens = [ensure_admin_token(tmp_path / f"{i}.token")[0] for i in range(300)]
    assert not [t for t in tokens if t.startswith("-")]
    code = main(["jobs", "--url", "http://127.0.0.1:9", "--token", tokens[0]])
    assert code == 2  # unreachable, but the arguments parsed


def test_users_file_grants_vcs_through_groups(tmp_path: Path) -> None:
    users = tmp_path / "users.yaml"
    users.write_text(
        "users:\n  ann: {token: ann-token-1, groups: [lab]}\n"
        "groups:\n  lab: {vcs: [vc1]}\n  staff: {vcs: ['*'], admin: true}\n"
    )
    (ann,) = load_users(users).values()
    assert ann.may_submit_to("vc1") and not ann.may_submit_to("default") and not ann.admin
    users.write_text("users:\n  bob: {token: bob-token-1, groups: [ghosts]}\n")
    with pytest.raises(UserError, match="unknown group 'ghosts'"):
        load_users(users)
    users.write_text("users:\n  bob: {token: short}\n")
    with pytest.raises(UserError, match="8\\+ characters"):
        load_users(users)


def test_bearer_tokens_identify_admin_and_users(tmp_path: Path) -> None:
    from labhive.scheduler.service.auth import AuthError, TokenAuthenticator

    users = tmp_path / "users.yaml"
    users.write_text(
        "users:\n  ann: {token: ann-token-1, groups: [lab]}\ngroups:\n  lab: {vcs: [vc1]}\n"
    )
    auth = TokenAuthenticator("admin-secret-1", load_users(users), tmp_path / "admin.token")
    assert auth.identify_header("Bearer admin-secret-1").admin
    assert auth.identify_header("token ann-token-1").name == "ann"
    for bad in (None, "", "Bearer", "Basic abc", "Bearer nope-nope"):
        with pytest.raises(AuthError):
            auth.identify_header(bad)
