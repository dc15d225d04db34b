"""``labhive up --executor slurm`` against a real two-node Slurm, with users' real uids.

Given a site's Slurm (each node in its own network namespace), a grants file that gives alice
the uid of her site account and bob a uid no Slurm node knows, and their roster logins: expect
one command to start the hub and the service on Slurm (the cluster config written from
``sinfo``, the banner saying what is enforced there), alice's notebook server to run on a
node as her uid, in a home that is hers and 0700, and to answer through the hub (JupyterLab
in Chromium too); bob's start to end on the hub's page with Slurm's refusal and the fix, and
the hub's log to hold no unhandled exception. Without sbatch on PATH ``labhive up`` refuses
saying what to install; a launcher whose server folder is not its user's ends at once.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hub_support import read_up_banner, wait_for
from kernel_support import CHROMIUM, CHROMIUM_FLAGS, free_port, venv_env
from slurm_cluster import SlurmCluster
from test_hub_up import _login

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
pytest_plugins = ["slurm_cluster"]

ALICE_UID = 23461  # her site account: on the controller and every node (one /etc/passwd here)
STRANGER_UID = 3999997  # bob's: no Slurm node knows it
GRANTS = f"""\
groups:
  lab: {{vcs: [default]}}
users:
  alice: {{uid: {ALICE_UID}, gid: {ALICE_UID}}}
  bob: {{uid: {STRANGER_UID}, gid: {STRANGER_UID}}}
"""
ROSTER = """\
students:
  alice: {password: "alice-password-1", groups: [lab]}
  bob: {password: "bob-password-123", groups: [lab]}
"""


def site_account(uid: int, name: str) -> None:
    subprocess.run(["groupadd", "-g", str(uid), name], capture_output=True, check=False)
    made = subprocess.run(
        ["useradd", "-u", str(uid), "-g", str(uid), "-M", "-s", "/bin/sh", name],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if made.returncode not in (0, 9):  # 9: the account exists already
        pytest.skip(f"cannot create a test account: {made.stderr.strip()}")


def up_command(data: Path, *engine: str) -> list[str]:
    return [
        sys.executable, "-m", "labhive.scheduler.cli", "up", "--data-dir", str(data),
        "--port", str(free_port()), "--service-port", str(free_port()), "--grace-s", "2",
        *engine,
    ]  # fmt: skip


@pytest.fixture
def up_on_slurm(slurm: SlurmCluster, data_dir: Path) -> Iterator[tuple[str, str, Path]]:
    """``labhive up --executor slurm`` running; (hub URL, banner, data dir)."""
    site_account(ALICE_UID, "lhalice")
    (data_dir / "grants.yaml").write_text(GRANTS)
    (data_dir / "roster.yaml").write_text(ROSTER)
    data = data_dir / "site"
    cmd = up_command(data, "--executor", "slurm", "--slurm-conf", str(slurm.conf))
    cmd += ["--partition", "main", "--users", str(data_dir / "grants.yaml")]
    cmd += ["--roster", str(data_dir / "roster.yaml")]
    # uid ranges are claimed per host: one of this run's own for the users the grants omit
    cmd += ["--first-uid", str(5_000_000 + os.getpid() % 1000 * 1000), "--uid-count", "1000"]
    up = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=venv_env(LABHIVE_TASK_IDENTITY="users"), start_new_session=True,
    )  # fmt: skip
    try:
        text = read_up_banner(up)
        found = re.search(r"LabHive is up: (\S+)/", text)
        assert found, text
        yield found.group(1), text, data
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGINT)
            try:
                up.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(up.pid, signal.SIGKILL)
                up.wait()


def test_labhive_up_on_slurm_runs_a_real_users_server_on_a_node_and_refuses_cleanly(
    slurm: SlurmCluster, up_on_slurm: tuple[str, str, Path]
) -> None:
    hub, banner, data = up_on_slurm
    assert "executor:     Slurm (main;" in banner and "2 node(s)" in banner, banner
    assert f"the hub at {slurm.subnet}.1" in banner, banner
    assert "cluster:      2 nodes x 4 GPUs" in banner, banner
    assert "GPU devices: NOT enforced: Slurm's TaskPlugin is task/none" in banner, banner
    assert "each user's own uid/gid" in banner, banner

    alice = _login(hub, "alice", "alice-password-1")
    made = alice.post("/hub/api/users/alice/tokens", headers=_xsrf(alice), json={})
    alice.headers["Authorization"] = f"token {made.json()['token']}"  # as JupyterLab's API use
    alice.post("/hub/api/users/alice/server", headers=_xsrf(alice))
    try:
        status = wait_for(
            lambda: _through_hub(alice, "/user/alice/api/status"), 120, "alice's server"
        )
    except AssertionError:
        log = (data / "hub" / "jupyterhub.log").read_text()
        outs = [p.read_text()[-1500:] for p in data.rglob("*.out")] + [
            p.read_text()[-1500:] for p in data.rglob("stderr")
        ]
        raise AssertionError(f"{log[-3000:]}\n{outs}") from None
    assert "started" in status, status
    home = data / "home" / "alice"
    assert (home.stat().st_uid, home.stat().st_mode & 0o777) == (ALICE_UID, 0o700)
    put = alice.put(
        "/user/alice/api/contents/hello.txt", headers=_xsrf(alice),
        json={"type": "file", "format": "text", "content": "hi"},
    )  # fmt: skip
    assert put.status_code == 201, put.text
    assert (home / "hello.txt").stat().st_uid == ALICE_UID  # the server runs as alice's uid
    where = subprocess.run(
        ["squeue", "-h", "-u", str(ALICE_UID), "-o", "%N %j"], env=slurm.env,
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert where and where[0] in slurm.nodes, where  # on a Slurm node, as her uid
    in_lab = _lab_in_a_browser(hub, "alice", "alice-password-1")
    assert "hello.txt" in in_lab  # JupyterLab through the hub lists the file her uid wrote

    bob = _login(hub, "bob", "bob-password-123")
    bob.post("/hub/api/users/bob/server", headers=_xsrf(bob))
    page = wait_for(lambda: _spawn_failed(bob), 120, "bob's start to fail on the hub's page")
    assert f"Slurm knows no account uid {STRANGER_UID}" in page, page
    assert "create that account" in page, page
    log = (data / "hub" / "jupyterhub.log").read_text()
    # the spawn's error as the spawner raised it (JupyterHub logs that with its traceback);
    # before: the launcher's PermissionError on the node and the hub's InvalidStateError
    assert "InvalidStateError" not in log and "PermissionError" not in log, log[-3000:]
    assert "ServerJobEnded: your server's job" in log, log[-3000:]


def _lab_in_a_browser(hub: str, name: str, password: str) -> str:
    """Log in with Chromium, open the user's running JupyterLab through the hub; its text."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "install Debian's chromium (.ci/deps.sh does)"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_context().new_page()
        page.set_default_timeout(90_000)
        page.goto(f"{hub}/hub/login?next=%2Fuser%2F{name}%2Flab")
        page.fill("#username_input", name)
        page.fill("#password_input", password)
        page.click("#login_submit")
        page.wait_for_url(f"**/user/{name}/lab**")
        page.wait_for_selector("#jp-main-dock-panel")
        page.wait_for_selector("text=hello.txt")
        text = str(page.inner_text("body"))
        browser.close()
        return text


def _xsrf(http: httpx.Client) -> dict[str, str]:
    return {"X-XSRFToken": http.cookies.get("_xsrf") or ""}


def _through_hub(http: httpx.Client, path: str) -> str | None:
    got = http.get(path)
    return got.text if got.status_code == 200 else None


def _spawn_failed(http: httpx.Client) -> str | None:
    """The hub's words for the last failed start (its spawn page's progress stream)."""
    events = http.get("/hub/api/users/bob/server/progress", headers=_xsrf(http), timeout=60)
    if '"failed": true' in events.text.replace("'", '"'):
        return events.text
    return None


def test_labhive_up_on_slurm_without_sbatch_refuses_saying_what_to_install(
    tmp_path: Path,
) -> None:
    """Given a PATH with the hub's proxy but no Slurm client commands, expect ``labhive up
    --executor slurm`` to refuse before starting anything, naming the package."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("configurable-http-proxy", "node"):
        found = shutil.which(tool)
        assert found, f"{tool} is not installed (.ci/deps.sh installs it)"
        (bin_dir / tool).symlink_to(found)
    done = subprocess.run(
        up_command(tmp_path / "data", "--executor", "slurm"), capture_output=True, text=True,
        env={**venv_env(), "PATH": str(bin_dir)}, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert "--executor slurm: sbatch is not on PATH" in done.stderr, done.stderr
    assert "apt-get install slurm-client" in done.stderr, done.stderr
    assert not (tmp_path / "data" / "hub" / "jupyterhub.log").exists()


@pytest.mark.parametrize("case", ["cannot be made", "another uid's"])
def test_a_server_whose_folder_is_not_its_users_ends_at_once_saying_why(
    data_dir: Path, case: str
) -> None:
    """Given the launcher on a node as alice's uid, and a server folder she cannot make (its
    parent is root's) or one another uid owns: expect it to exit 2 at once with the reason and
    the fix, before it takes the port or the hub's secrets (before: a PermissionError
    traceback after the handoff, or a server writing into someone else's folder)."""
    site_account(ALICE_UID, "lhalice")
    parent = data_dir / "homes"
    parent.mkdir(mode=0o711)
    home = parent / "alice"
    if case == "another uid's":
        home.mkdir(mode=0o777)
        home.chmod(0o777)  # she could write there, yet it is not hers
    doc = {"env": {}, "cmd": ["true"], "cwd": str(home)}
    argv = [sys.executable, "-m", "labhive.hub_extension.launch", "--handoff", str(free_port())]
    argv.append(base64.b64encode(json.dumps(doc).encode()).decode())
    done = subprocess.run(
        argv, input="a-handoff-key\n", capture_output=True, text=True, timeout=30,
        user=ALICE_UID, group=ALICE_UID, extra_groups=[], cwd="/",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    if case == "cannot be made":
        assert f"cannot make your server's folder {home}" in done.stderr, done.stderr
        assert f"as uid {ALICE_UID}: Permission denied" in done.stderr, done.stderr
        assert "pam_mkhomedir" in done.stderr
    else:
        assert f"{home} on node" in done.stderr and "belongs to uid 0" in done.stderr, done.stderr
