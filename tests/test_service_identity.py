"""Given a users file, expect each name to be one user's only: reserved names (the admin
token's ``admin`` first of all) and names the store cannot hold are refused with a message
(issue 16: a users-file ``admin`` owned the admin token's jobs, read their logs, cancelled
them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.service.auth import load_users

GROUPS = "groups:\n  lab: {vcs: [vc1]}\n"


def users_file(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "users.yaml"
    path.write_text(f"users:\n  {name}: {{token: tok-{len(name)}-abcdef, groups: [lab]}}\n{GROUPS}")
    return path


@pytest.mark.parametrize("name", ["admin", "Admin", "root", "labhive", "'service:labhive'"])
def test_reserved_names_are_refused_with_what_to_do(tmp_path, name):
    with pytest.raises(UserError, match=r"is reserved.*give this user another name"):
        load_users(users_file(tmp_path, name))


@pytest.mark.parametrize(
    ("name", "says"),
    [("'" + "u" * 129 + "'", "the limit is 128"), ('"a\\0b"', "NUL"), ("'  '", "empty")],
)
def test_names_the_store_cannot_hold_are_refused(tmp_path, name, says):
    with pytest.raises(UserError, match=says):
        load_users(users_file(tmp_path, name))


def test_ordinary_names_still_load(tmp_path):
    (ann,) = load_users(users_file(tmp_path, "administrator")).values()
    assert ann.name == "administrator" and not ann.admin


def test_the_service_will_not_start_with_a_users_file_admin(tmp_path):
    """End to end: ``labhive serve`` with such a users file stops with the message, so no
    token but the admin's ever acts as ``admin``."""
    from service_fixtures import live_service

    users = f"users:\n  admin: {{token: fake-admin-token, groups: [lab]}}\n{GROUPS}"
    with (
        pytest.raises(UserError, match="'admin' is reserved"),
        live_service(tmp_path / "data", users=users),
    ):
        pass
