"""The native authenticator's accounts across starts, on a real hub database (SQLite, JupyterHub's
own tables): given a stranger who signs up first under a name, expect the roster or the
instructor's name to win at the next start, and an approved student's own password to survive
it. Logins go through JupyterHub's whole check (``get_authenticated_user``), as the login form's.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from jupyterhub import orm

from labhive.hub_extension.accounts import LabHiveNativeAuthenticator


def start(db_file: Path, **config: object) -> LabHiveNativeAuthenticator:
    """The authenticator as a hub start makes it: its tables, then the accounts of the plan."""
    db = orm.new_session_factory(f"sqlite:///{db_file}")()
    return LabHiveNativeAuthenticator(
        _deprecated_db_session=db, allow_all=True, minimum_password_length=8, **config
    )


def logs_in(auth: LabHiveNativeAuthenticator, name: str, password: str) -> bool:
    data = {"username": name, "password": password}
    return asyncio.run(auth.get_authenticated_user(None, data)) is not None


def test_a_name_a_stranger_signed_up_for_goes_to_the_roster_student(tmp_path: Path) -> None:
    db = tmp_path / "jupyterhub.sqlite"
    hub = start(db)
    assert hub.create_user("carol", "strangers-pass-1") is not None  # the sign-up form's call
    assert not logs_in(hub, "carol", "strangers-pass-1")  # waiting for approval

    hub = start(db, initial_passwords={"carol": "carols-roster-pass"})  # --roster names carol
    assert logs_in(hub, "carol", "carols-roster-pass")
    assert not logs_in(hub, "carol", "strangers-pass-1")


def test_an_approved_students_own_password_survives_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "jupyterhub.sqlite"
    hub = start(db, initial_passwords={"alice": "alice-first-pass"})
    assert hub.change_password("alice", "alice-chose-this")  # /hub/change-password
    hub = start(db, initial_passwords={"alice": "alice-first-pass"})
    assert logs_in(hub, "alice", "alice-chose-this")
    assert not logs_in(hub, "alice", "alice-first-pass")


def test_signing_up_under_an_admins_name_approves_nothing(tmp_path: Path) -> None:
    """NativeAuthenticator approves a sign-up at once when the name is an admin's."""
    hub = start(tmp_path / "jupyterhub.sqlite", admin_users={"prof"})
    assert hub.create_user("prof", "attackers-pass-9") is not None
    assert not logs_in(hub, "prof", "attackers-pass-9")


def test_the_instructors_password_is_the_plans_at_every_start(tmp_path: Path) -> None:
    db = tmp_path / "jupyterhub.sqlite"
    hub = start(db, admin_users={"admin"}, seed_passwords={"admin": "first-generated-1"})
    assert logs_in(hub, "admin", "first-generated-1")
    hub = start(db, admin_users={"admin"}, seed_passwords={"admin": "second-generated-2"})
    assert logs_in(hub, "admin", "second-generated-2")
    assert not logs_in(hub, "admin", "first-generated-1")


def test_passwords_are_stored_as_bcrypt_hashes_only(tmp_path: Path) -> None:
    db = tmp_path / "jupyterhub.sqlite"
    start(db, initial_passwords={"alice": "alice-first-pass"})
    raw = db.read_bytes()
    assert b"alice-first-pass" not in raw
    assert b"$2b$" in raw  # bcrypt's marker
