"""Given a real hub with the native authenticator (labhive up's default), where the instructor
"teacher" has a generated password and alice and bob each their own, expect each password to
open its own account only: bob's password does not log in as alice, a sign-up waits for the
instructor's approval, and no one can sign up under the instructor's name."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from hub_support import Hub, logged_in, login_form, real_hub, try_login

pytestmark = pytest.mark.slow

PASSWORDS = {"alice": "alice-own-pass-1", "bob": "bob-other-pass-2"}
TEACHER = secrets.token_urlsafe(24)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with real_hub(
        tmp_path_factory.mktemp("logins"),
        authenticator="native",
        admin_users=["teacher", "assistant"],
        admin_password=TEACHER,
        passwords=PASSWORDS,
    ) as hub:
        yield hub


def sign_up(hub: Hub, name: str, password: str) -> str:
    """The sign-up form, filled in as a stranger would; the page's answer."""
    with httpx.Client(base_url=hub.url, timeout=60) as http:
        xsrf = login_form(http, "/hub/signup")
        page = http.post(
            "/hub/signup",
            data={
                "username": name,
                "signup_password": password,
                "signup_password_confirmation": password,
                "_xsrf": xsrf,
            },
        )
        assert page.status_code == 200, page.text[:500]
        return page.text


def test_each_user_logs_in_with_their_own_password_only(hub: Hub) -> None:
    _, alice = try_login(hub.url, "alice", PASSWORDS["alice"])
    assert logged_in(alice), (alice.status_code, alice.text[:300])

    _, bob_as_alice = try_login(hub.url, "alice", PASSWORDS["bob"])
    assert bob_as_alice.status_code == 403, bob_as_alice.status_code
    assert "Invalid username or password" in bob_as_alice.text

    _, bob = try_login(hub.url, "bob", PASSWORDS["bob"])
    assert logged_in(bob)
    _, no_password = try_login(hub.url, "alice", "")
    assert no_password.status_code == 403


def test_the_instructors_generated_password_works_and_is_an_admin(hub: Hub) -> None:
    http, teacher = try_login(hub.url, "teacher", TEACHER)
    assert logged_in(teacher), (teacher.status_code, teacher.text[:300])
    assert http.get("/hub/authorize").status_code == 200  # the approval page: admins only

    _, guess = try_login(hub.url, "teacher", PASSWORDS["alice"])
    assert guess.status_code == 403


def test_a_signed_up_user_waits_for_the_instructors_approval(hub: Hub) -> None:
    page = sign_up(hub, "carol", "carols-pass-33")
    assert "sent to the admin" in page, page[:500]
    _, waiting = try_login(hub.url, "carol", "carols-pass-33")
    assert waiting.status_code == 403
    assert "has not been authorized" in waiting.text

    alice, answer = try_login(hub.url, "alice", PASSWORDS["alice"])
    assert logged_in(answer)
    assert alice.get("/hub/authorize/carol").status_code == 403  # a student approves no one
    _, still = try_login(hub.url, "carol", "carols-pass-33")
    assert still.status_code == 403

    teacher, _ = try_login(hub.url, "teacher", TEACHER)
    assert teacher.get("/hub/authorize/carol").status_code == 302  # approve: back to the list
    _, approved = try_login(hub.url, "carol", "carols-pass-33")
    assert logged_in(approved)


def test_no_one_signs_up_under_an_instructors_name(hub: Hub) -> None:
    """NativeAuthenticator approves an admin's name at sign-up; the accounts made at start take
    the names first, so the attacker's sign-up is refused and their password opens nothing."""
    for name in ("teacher", "assistant"):
        answer = sign_up(hub, name, "attackers-pass-9")
        assert "already in use" in answer, answer[:500]
        _, attack = try_login(hub.url, name, "attackers-pass-9")
        assert attack.status_code == 403, name


def test_a_stranger_cannot_set_passwords_through_the_accounts_api(hub: Hub) -> None:
    http, _ = try_login(hub.url, "bob", PASSWORDS["bob"])
    token = http.post(
        "/hub/api/users/bob/tokens",
        json={"note": "bob's"},
        headers={"X-XSRFToken": http.cookies.get("_xsrf") or ""},
    )
    assert token.status_code == 201, token.text
    as_bob = {"Authorization": f"token {token.json()['token']}"}
    put = httpx.put(
        f"{hub.url}/hub/api/labhive/accounts/alice",
        json={"password": "bob-owns-alice-now", "reset": True},
        headers=as_bob,
    )
    assert put.status_code == 403, put.text
    _, attack = try_login(hub.url, "alice", "bob-owns-alice-now")
    assert attack.status_code == 403


@contextmanager
def system_accounts(count: int) -> Iterator[dict[str, str]]:
    """``count`` accounts of this machine (no home, no shell) with passwords: name -> password;
    removed at the end."""
    tag = secrets.token_hex(3)
    made = {f"lh{tag}u{i}": f"system-pass-{i}-{tag}" for i in range(count)}
    try:
        for name, password in made.items():
            subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", name], check=True)
            subprocess.run(["chpasswd"], input=f"{name}:{password}", text=True, check=True)
        yield made
    finally:
        for name in made:
            subprocess.run(["userdel", name], capture_output=True, check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="makes accounts of this machine (useradd)")
def test_pam_admits_the_listed_accounts_of_this_machine_with_their_own_passwords(
    tmp_path: Path,
) -> None:
    """--authenticator pam: a machine account's own password logs it in once the hub lists it
    (the roster's groups, or an admin adding it); another account of the machine does not."""
    with system_accounts(3) as accounts:
        student, other, unlisted = accounts
        with real_hub(
            tmp_path, authenticator="pam", admin_users=[other], groups={"others": [student]}
        ) as hub:
            _, own = try_login(hub.url, student, accounts[student])
            assert logged_in(own), (own.status_code, own.text[:300])
            _, crossed = try_login(hub.url, student, accounts[other])
            assert crossed.status_code == 403
            _, stranger = try_login(hub.url, unlisted, accounts[unlisted])
            assert stranger.status_code == 403  # a valid machine login, not a hub user
