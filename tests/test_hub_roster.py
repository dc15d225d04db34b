"""Given ``labhive up --roster course.yaml`` on a cluster with VCs vc1 and default, where the
grants give group vc1-users VC vc1 and nobody anything by default, expect each student to log in
with their own password (the roster's, or the generated one in the instructor's 0600 file) and
to submit to their VCs only; a student without a group gets the first VC. Then the instructor
adds one more with ``labhive hub adduser`` while the hub runs."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hub_support import CLUSTER, GRANTS, labhive_up, logged_in, try_login, user_token, wait_for
from kernel_support import venv_env

from labhive.client import Client, LabHiveError
from labhive.hub_extension.roster import load_roster, plan_course
from labhive.hub_extension.up import prepare
from labhive.scheduler.core.errors import UserError

ROSTER = """\
students:
  alice: {password: "alice-own-pass-1", groups: [vc1-users]}
  bob:
  carol: {password: "carol-own-pass-3", vcs: [default]}
"""


def submits_to(up_service: str, token: str, vc: str) -> bool:
    """Whether the service takes a job for ``vc`` from the token's owner (cancelled at once)."""
    with Client(up_service, token) as client:
        try:
            job = client.submit(name="probe", command="sleep 60", gpus=1, vc=vc)
        except LabHiveError as err:
            assert err.status == 403, err
            return False
        client.cancel(job.id)
        return True


def adduser(data: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "labhive.scheduler.cli", "hub", "adduser", *args,
         "--data-dir", str(data)],
        input=stdin, capture_output=True, text=True, env=venv_env(), timeout=120,
    )  # fmt: skip


@pytest.mark.slow
def test_a_roster_gives_each_student_their_login_and_vcs(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)  # VCs vc1 (first), default
    (tmp_path / "grants.yaml").write_text(GRANTS)  # no "*": a group or nothing
    (tmp_path / "course.yaml").write_text(ROSTER)
    data = tmp_path / "data"
    args = ["--cluster", str(tmp_path / "cluster.yaml"), "--users", str(tmp_path / "grants.yaml")]
    with labhive_up(data, *args, "--roster", str(tmp_path / "course.yaml")) as up:
        assert "roster:       3 students" in up.banner, up.banner
        generated = data / "hub" / "roster-passwords.yaml"
        assert stat.S_IMODE(generated.stat().st_mode) == 0o600
        passwords = yaml.safe_load(generated.read_text())
        assert set(passwords) == {"bob"}, passwords

        alice_http, alice = try_login(up.url, "alice", "alice-own-pass-1")
        assert logged_in(alice)
        _, bob_as_alice = try_login(up.url, "alice", passwords["bob"])
        assert bob_as_alice.status_code == 403
        bob_http, bob = try_login(up.url, "bob", passwords["bob"])
        assert logged_in(bob)
        carol_http, carol = try_login(up.url, "carol", "carol-own-pass-3")
        assert logged_in(carol)

        alice_token = user_token(alice_http, "alice")
        assert submits_to(up.service_url, alice_token, "vc1")
        assert not submits_to(up.service_url, alice_token, "default")
        bob_token = user_token(bob_http, "bob")  # no group: the cluster's first VC
        assert submits_to(up.service_url, bob_token, "vc1")
        assert not submits_to(up.service_url, bob_token, "default")
        carol_token = user_token(carol_http, "carol")
        assert submits_to(up.service_url, carol_token, "default")
        assert not submits_to(up.service_url, carol_token, "vc1")

        added = adduser(data, "dave")
        assert added.returncode == 0, added.stderr
        dave_password = added.stdout.split("password ")[1].split()[0]
        dave_http, dave = try_login(up.url, "dave", dave_password)
        assert logged_in(dave), added.stdout
        dave_token = user_token(dave_http, "dave")
        assert wait_for(lambda: submits_to(up.service_url, dave_token, "vc1"), 30, "dave's VC")

        again = adduser(data, "dave", "--password-file", "-", stdin="daves-new-pass-4\n")
        assert again.returncode == 0 and "kept its own password" in again.stdout, again.stdout
        _, old = try_login(up.url, "dave", dave_password)
        assert logged_in(old)

        weak = adduser(data, "erin", "--password-file", "-", stdin="short\n")
        assert weak.returncode != 0 and "too weak" in weak.stderr, weak.stdout + weak.stderr
        nowhere = adduser(data, "erin", "--group", "no-such-group")
        assert nowhere.returncode != 0 and "grant no VC" in nowhere.stderr, nowhere.stderr


@pytest.mark.parametrize(
    ("students", "message"),
    [
        ("Alice: {}", "lower-case letters"),
        ("admin: {}", "not admin"),
        ("alice: {password: short}", "at least 8 characters"),
        ("alice: {vcs: vc1}", "a list of names"),
        ("alice: {team: red}", "unknown key"),
        ("alice: {vcs: [vc9]}", "VC 'vc9' is not in the cluster"),
        ("alice: {groups: [no-such]}", "grant no VC in the grants file"),
        ("alice: {vcs: [default]}", "group 'default' does not grant VC 'default'"),
    ],
)
def test_a_bad_roster_says_what_to_fix(tmp_path: Path, students: str, message: str) -> None:
    (tmp_path / "course.yaml").write_text(f"students:\n  {students}\n")
    grants = {"vc1-users": frozenset({"vc1"}), "default": frozenset({"vc1"})}
    with pytest.raises(UserError, match=message):
        roster = load_roster(tmp_path / "course.yaml")
        plan_course(roster, ["vc1", "default"], grants, tmp_path / "passwords.yaml")


def test_generated_passwords_stay_the_same_across_starts(tmp_path: Path) -> None:
    (tmp_path / "course.yaml").write_text("students:\n  bob:\n  carol: {vcs: [vc1]}\n")
    roster, kept = load_roster(tmp_path / "course.yaml"), tmp_path / "passwords.yaml"
    first = plan_course(roster, ["default", "vc1"], {}, kept)
    again = plan_course(roster, ["default", "vc1"], {}, kept)
    assert first.passwords == again.passwords and first.passwords["bob"] != first.passwords["carol"]
    assert first.groups == {"default": ["bob"], "vc1": ["carol"]}
    assert first.vc_groups == ["default", "vc1"]  # groups the grants file must gain
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600


def test_labhive_up_refuses_options_that_do_not_go_together(tmp_path: Path) -> None:
    (tmp_path / "course.yaml").write_text("students:\n  bob:\n")
    with pytest.raises(UserError, match="only --authenticator native keeps"):
        prepare(tmp_path / "a", authenticator="pam", roster=tmp_path / "course.yaml")
    with pytest.raises(UserError, match="--authenticator external needs --hub-config"):
        prepare(tmp_path / "b", authenticator="external")


def test_an_oauth_login_is_one_file_read_after_labhives_settings(tmp_path: Path) -> None:
    """--authenticator external --hub-config github.py: the hub's config, loaded as JupyterHub
    loads it, ends with the instructor's authenticator, not LabHive's."""
    from traitlets.config.loader import PyFileConfigLoader

    github = tmp_path / "github.py"
    github.write_text(
        'c.JupyterHub.authenticator_class = "github"\n'
        'c.GitHubOAuthenticator.allowed_organizations = {"my-course-org"}\n'
    )
    _, config, _ = prepare(
        tmp_path / "data", authenticator="external", hub_config=github, admin="prof"
    )
    loaded = PyFileConfigLoader(config.name, path=str(config.parent)).load_config()
    assert loaded.JupyterHub.authenticator_class == "github"
    assert loaded.GitHubOAuthenticator.allowed_organizations == {"my-course-org"}
    assert loaded.Authenticator.admin_users == {"prof"}
    assert "LabHiveNativeAuthenticator" not in loaded  # no native settings left over


def test_without_a_roster_adduser_puts_students_in_the_first_vc_unless_the_grants_disagree(
    tmp_path: Path,
) -> None:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)  # VCs vc1 (first), default
    cluster = str(tmp_path / "cluster.yaml")
    plan, _, _ = prepare(tmp_path / "a", cluster=cluster)  # labhive up's own grants
    assert plan.default_group == "vc1"
    assert yaml.safe_load(Path(plan.grants or "").read_text())["groups"]["vc1"] == {"vcs": ["vc1"]}

    (tmp_path / "grants.yaml").write_text("groups:\n  vc1: {vcs: [default]}\n")
    plan, _, _ = prepare(tmp_path / "b", cluster=cluster, grants=tmp_path / "grants.yaml")
    assert plan.default_group is None and plan.grants == str(tmp_path / "grants.yaml")
