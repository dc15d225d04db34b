"""Given a root service on a password-protected PostgreSQL, started by an admin whose shell
exports PGPASSWORD and a secret of their own, expect alice's job to find no password (not in
its environment, not on any process's command line) and to be refused by the database, so it
cannot give her job to bob; and ``labhive serve`` to refuse a password on its command line.

The finding on main: ``--db postgresql://user:PASS@...`` in ``/proc/PID/cmdline`` and the
service's whole environment in every task; a job read the password, connected with psql and
changed a job's owner."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from isolation_util import USERS, needs_root, open_tmp_dir, user_python
from pg_throwaway import new_database, throwaway_postgres
from service_process import serve_process
from waiting import wait_until

from labhive.scheduler.client import Client
from labhive.scheduler.core.errors import UserError
from labhive.scheduler.service.db_source import DB_URL_ENV, database_from, has_password

CLUSTER = Path(__file__).with_name("data") / "cluster-2x4.yaml"
PASSWORD = "pg-Pa55-w0rd-9x"
#: What an admin's shell held when they started the service: none of it is a task's business.
SERVICE_SECRETS = {
    "PGPASSWORD": PASSWORD,
    "ADMIN_CLOUD_SECRET": "cloud-key-0451",
    "LABHIVE_TOKEN": "admin-token-in-env",
    "JUPYTERHUB_API_TOKEN": "hub-token-in-env",
}

#: The attack, as a job ran it: every password in its environment or on any process's command
#: line, each tried with psql against the store (``psql PORT DB``); a JSON report.
ATTACK = r"""
import json, os, re, subprocess, sys
port, db = sys.argv[1], sys.argv[2]
found = [v for k, v in os.environ.items() if "PASS" in k or "SECRET" in k or "TOKEN" in k]
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        raw = open(f"/proc/{pid}/cmdline", "rb").read()
        line = raw.replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        continue
    found += re.findall(r"postgres(?:ql)?://[^:@/\s]+:([^@\s]+)@", line)
tried = {}
for password in found or [""]:
    env = {**os.environ, "PGPASSWORD": password, "PGCONNECT_TIMEOUT": "10"}
    done = subprocess.run(
        ["psql", "-w", "-h", "127.0.0.1", "-p", port, "-U", "postgres", "-d", db, "-Atc",
         "select count(*) from jobs"], env=env, capture_output=True, text=True)
    tried[password] = [done.returncode, (done.stdout + done.stderr).strip()[-300:]]
print(json.dumps({"env": sorted(os.environ), "found": found, "tried": tried}))
"""

needs_psql = pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not installed")


@pytest.fixture(scope="module")
def pg() -> Iterator[str]:
    """A PostgreSQL server that wants a password (its base URL carries it)."""
    with throwaway_postgres(password=PASSWORD) as url:
        yield url


def attack(url: str, env: dict[str, str] | None = None) -> dict:
    """The attack run here, as root, with ``env``: what a job would have got."""
    port, db = url.rsplit(":", 1)[1].split("/", 1)
    done = subprocess.run(
        [user_python(), "-c", ATTACK, port, db],
        env={"PATH": os.environ["PATH"], **(env or {})},
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_psql
def test_the_attack_finds_a_password_in_the_environment_or_on_a_command_line(pg: str) -> None:
    """Not blind: given what main gave a job, the attack opens the store."""
    url = new_database(pg)
    from labhive.scheduler.service.store import Store, database_url

    Store(database_url(url, Path("/nonexistent"))).migrate()
    in_env = attack(url, {"PGPASSWORD": PASSWORD})
    assert in_env["tried"][PASSWORD] == [0, "0"]
    shown = subprocess.Popen(["/bin/sh", "-c", "sleep 60", "labhive-serve-like", f"--db={url}"])
    try:
        on_cmdline = attack(url)
    finally:
        shown.kill()
        shown.wait()
    assert PASSWORD in on_cmdline["found"] and on_cmdline["tried"][PASSWORD][0] == 0


@needs_root
@needs_psql
@pytest.mark.parametrize("how", ["--db-file", DB_URL_ENV])
def test_a_job_finds_no_password_and_the_store_refuses_it(
    how: str, pg: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = new_database(pg)
    for name, value in SERVICE_SECRETS.items():
        monkeypatch.setenv(name, value)
    with open_tmp_dir() as tmp:
        users = tmp / "users.yaml"
        users.write_text(USERS)
        users.chmod(0o600)
        args = ["--users", str(users), "--task-identity", "users", "--grace-s", "1"]
        if how == "--db-file":
            (tmp / "db.url").write_text(url + "\n")
            (tmp / "db.url").chmod(0o600)
            args += ["--db-file", str(tmp / "db.url")]
        else:
            monkeypatch.setenv(DB_URL_ENV, url)
        with serve_process(tmp, CLUSTER, *args) as served:
            cmdline = Path(f"/proc/{served.proc.pid}/cmdline").read_bytes()
            assert PASSWORD.encode() not in cmdline, cmdline
            bob = Client(served.url, "bob-token-4567").submit(
                name="bob", command="exec sleep 60", vc="vc1", gpus=0
            )
            port, db = url.rsplit(":", 1)[1].split("/", 1)
            command = shlex.join([user_python(), "-c", ATTACK, port, db])
            alice = Client(served.url, "alice-token-123").submit(
                name="alice", command=command, vc="vc1", gpus=0
            )
            wait_until(lambda: alice.refresh().done, "alice's attack", 120)
            out = alice.logs().data
            assert alice.state == "SUCCEEDED", (out, alice.logs(stream="stderr").data)
            report = json.loads(out.strip().splitlines()[-1])
            assert bob.refresh().state in ("WAITING", "RUNNING"), "bob's job was touched"
            bob.cancel()

    assert not set(SERVICE_SECRETS) & set(report["env"]), report["env"]
    assert DB_URL_ENV not in report["env"] and "PATH" in report["env"]
    assert PASSWORD not in report["found"]
    refusals = list(report["tried"].values())
    assert refusals and all(code != 0 for code, _ in refusals), refusals
    assert all("password" in said for _, said in refusals), refusals


def test_serve_refuses_a_password_on_its_command_line(tmp_path: Path, capsys) -> None:
    from labhive.scheduler.cli import main

    for db in (
        "postgresql://labhive:s3cret@db.example/labhive",
        "postgresql://labhive@db.example/labhive?password=s3cret",
    ):
        # a missing cluster file: were --db taken, serve would stop there, not serve forever
        argv = ["--data-dir", str(tmp_path / "data"), "--cluster", str(tmp_path / "none.yaml")]
        code = main(["serve", "--db", db, *argv])
        said = capsys.readouterr().err
        assert code == 2 and "--db carries a password" in said, said
        assert "--db-file" in said and DB_URL_ENV in said
    assert not (tmp_path / "data").exists()  # refused before anything was made


def test_without_a_password_db_is_taken_as_before() -> None:
    assert not has_password("postgresql://labhive@db.example/labhive")
    assert not has_password("/srv/labhive/labhive.db")
    assert database_from("postgresql://labhive@db/x", environ={}) == "postgresql://labhive@db/x"
    assert database_from(None, environ={}) is None


def test_a_db_file_others_may_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "db.url"
    path.write_text("postgresql://labhive:s3cret@db/x\n")
    path.chmod(0o644)
    with pytest.raises(UserError, match=r"chmod 600 .*db\.url"):
        database_from(None, path, environ={})
    path.chmod(0o600)
    assert database_from(None, path, environ={}) == "postgresql://labhive:s3cret@db/x"
    path.write_text("\n")
    with pytest.raises(UserError, match="is empty"):
        database_from(None, path, environ={})


def test_an_unsupported_url_from_a_file_is_refused_without_showing_its_password(
    tmp_path: Path,
) -> None:
    from labhive.scheduler.service.store import database_url

    path = tmp_path / "db.url"
    path.write_text("mysql://labhive:s3cret@db/x\n")
    path.chmod(0o600)
    with pytest.raises(UserError, match="unsupported --db") as refused:
        database_url(database_from(None, path, environ={}), tmp_path)
    assert "s3cret" not in str(refused.value) and "labhive:***@db" in str(refused.value)


def test_the_url_variable_is_gone_from_the_environment_once_read() -> None:
    environ = {DB_URL_ENV: "postgresql://labhive:s3cret@db/x", "PATH": "/bin"}
    assert database_from(None, environ=environ) == "postgresql://labhive:s3cret@db/x"
    assert environ == {"PATH": "/bin"}
    environ[DB_URL_ENV] = "postgresql://labhive:s3cret@db/x"
    with pytest.raises(UserError, match="given twice"):
        database_from("other.db", environ=environ)
    assert DB_URL_ENV not in environ  # removed even when refused


def test_the_hub_starts_the_service_with_its_token_in_the_environment_not_its_arguments(
    tmp_path: Path,
) -> None:
    from traitlets.config import Config

    from labhive.hub_extension.hubconfig import HubPlan, configure

    token = "hub-service-token-6f1e"
    c = Config()
    plan = HubPlan(data_dir=str(tmp_path / "hub"), service_token=token, admin_password="p" * 32)
    configure(c, plan)
    (service,) = c.JupyterHub.services
    assert not any(token in arg for arg in service["command"]), service["command"]
    assert service["api_token"] == token  # JupyterHub hands it over as JUPYTERHUB_API_TOKEN
    assert token not in json.dumps(service.get("environment", {}))
