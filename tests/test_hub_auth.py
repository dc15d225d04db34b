"""Pure rules of the hub integration: group -> VC grants, the hub settings a managed service
reads, and the spawn page's waiting text (the real hub exercises them end to end)."""

from __future__ import annotations

from pathlib import Path

import pytest

from labhive.hub_extension.hubauth import HubSettings
from labhive.hub_extension.spawner import waiting_text
from labhive.scheduler.client import JobInfo
from labhive.scheduler.core.errors import UserError
from labhive.scheduler.service.auth import identity_for, load_grants, load_users

GRANTS = """\
groups:
  "*": {vcs: [default]}
  vc1-users: {vcs: [vc1]}
  instructors: {vcs: ["*"], admin: true}
"""


def test_groups_grant_vcs_everyone_gets_the_star_group_and_unknown_groups_grant_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "grants.yaml"
    path.write_text(GRANTS)
    grants = load_grants(path)

    alice = identity_for("alice", ("vc1-users",), grants)
    assert alice.vcs == {"vc1", "default"} and not alice.admin
    assert alice.may_submit_to("vc1") and not alice.may_submit_to("vc2")

    stranger = identity_for("eve", ("no-such-group",), grants)
    assert stranger.vcs == {"default"} and not stranger.admin

    teacher = identity_for("teacher", ("instructors",), grants)
    assert teacher.admin and teacher.may_submit_to("anything")


def test_a_standalone_users_file_shares_the_grant_rules(tmp_path: Path) -> None:
    path = tmp_path / "users.yaml"
    path.write_text("users:\n  alice: {token: alice-token-1, groups: [vc1-users]}\n" + GRANTS)
    (alice,) = load_users(path).values()
    assert alice.name == "alice" and alice.vcs == {"vc1", "default"}


def test_bad_grants_say_what_to_fix(tmp_path: Path) -> None:
    path = tmp_path / "grants.yaml"
    path.write_text("groups:\n  g: {vcs: vc1}\n")
    with pytest.raises(UserError, match=r"groups\.g\.vcs must be a list of VC names"):
        load_grants(path)


def test_hub_mode_outside_a_hub_says_how_to_run_it() -> None:
    with pytest.raises(UserError, match="JUPYTERHUB_API_URL and JUPYTERHUB_API_TOKEN"):
        HubSettings.from_environment({})
    hub = HubSettings.from_environment(
        {
            "JUPYTERHUB_API_URL": "http://127.0.0.1:8081/hub/api/",
            "JUPYTERHUB_API_TOKEN": "t",
            "JUPYTERHUB_SERVICE_PREFIX": "/services/labhive/",
            "JUPYTERHUB_OAUTH_ACCESS_SCOPES": '["access:services!service=labhive"]',
            "JUPYTERHUB_OAUTH_CLIENT_ALLOWED_SCOPES": '["custom:labhive:admin"]',
        }
    )
    assert hub.api_url == "http://127.0.0.1:8081/hub/api"
    assert hub.access_scopes == {"access:services!service=labhive"}
    assert hub.client_scopes == ("custom:labhive:admin",)


def test_the_spawn_page_reads_position_then_why() -> None:
    job = {
        "id": 7,
        "state": "WAITING",
        "vc": "vc1",
        "queue_position": 2,
        "queue_length": 3,
        "why": "vc1 has 0 free of the 2 cells this job needs; position 2 of 3 in vc1",
    }
    assert waiting_text(JobInfo.from_json(job)) == (
        "WAITING: position 2 of 3 in vc1 — vc1 has 0 free of the 2 cells this job needs"
    )
    alone = JobInfo.from_json({"id": 8, "state": "WAITING", "vc": "vc1", "why": None, "reason": ""})
    assert waiting_text(alone) == "WAITING in vc1"
