"""Each hub user's own password: JupyterHub's NativeAuthenticator, as ``labhive up`` runs it.

NativeAuthenticator (jupyterhub-nativeauthenticator) keeps a bcrypt hash per user in the hub's
database, lets people sign up at ``/hub/signup`` and admits them only once an admin approves
them at ``/hub/authorize``. Logging in, hashing, sign-up and approval stay its own; this
subclass adds only what a course platform needs around it:

- **Accounts made at start**, before the hub listens: the admins' (``seed_passwords``, reset to
  the given password at every start: ``secrets.json`` is the instructor's copy) and a roster's
  students' (``initial_passwords``, set only while the account is missing or not yet approved,
  so a student's own change of password survives a restart, and a name someone signed up for
  first is taken back with the roster's password).
- **No approval by name at sign-up.** NativeAuthenticator approves a sign-up at once when its
  name is an admin's; an admin account not yet made could be claimed by whoever signs up first
  under that name. Here only an admin's approval (or a start-time account) approves anyone.
- **An API for the CLI**: ``PUT /hub/api/labhive/accounts/NAME`` with ``{"password": ...}``
  makes or approves NAME's account with that password (``labhive hub adduser``); callers need
  the ``admin:users`` scope.
- JupyterHub 6 dropped the ``statsd`` client that NativeAuthenticator 1.3.0's login form still
  times itself with (every login POST failed with a 500); the login handler gets a no-op one.
"""

from __future__ import annotations

import json
from typing import Any

import bcrypt
from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import needs_scope
from nativeauthenticator import NativeAuthenticator
from nativeauthenticator.handlers import LoginHandler as NativeLoginHandler
from nativeauthenticator.orm import UserInfo
from tornado import web
from traitlets import Dict

from labhive.hub_extension.hubconfig import ACCOUNTS_API


class _NoTimer:
    """What NativeAuthenticator's login handler calls on ``self.statsd``: nothing to record."""

    def timer(self, _name: str) -> _NoTimer:
        return self

    def start(self) -> _NoTimer:
        return self

    def stop(self, send: bool = True) -> None:
        return None


class LoginHandler(NativeLoginHandler):
    """NativeAuthenticator's login form (its "not approved yet" message included), runnable on
    JupyterHub 6; a failed login answers 403 with the form, as JupyterHub's own does."""

    statsd = _NoTimer()

    def finish(self, chunk: Any = None) -> Any:
        if self.request.method == "POST" and self.get_status() == 200 and chunk is not None:
            self.set_status(403)  # the form again, with its error: the login failed
        return super().finish(chunk)


class AccountHandler(APIHandler):
    """``PUT /hub/api/labhive/accounts/NAME {"password": P, "reset": false}``: NAME may log in
    with P. An approved account keeps its password unless ``reset`` (the student may have
    changed it); answers ``{"name", "created", "kept"}`` (kept: that password stays)."""

    @needs_scope("admin:users")
    async def put(self, name: str) -> None:
        body = self.get_json_body() or {}
        password = body.get("password")
        if not isinstance(password, str):
            raise web.HTTPError(400, 'give {"password": "..."}')
        auth: LabHiveNativeAuthenticator = self.authenticator
        name = auth.normalize_username(name)
        problem = auth.account_problem(name, password)
        if problem:
            raise web.HTTPError(400, problem)
        created, kept = auth.set_account(name, password, reset=bool(body.get("reset")))
        self.set_status(201 if created else 200)
        self.finish(json.dumps({"name": name, "created": created, "kept": kept}))


class LabHiveNativeAuthenticator(NativeAuthenticator):
    seed_passwords = Dict(
        config=True,
        help="name -> password, set at every start, approved (the admins' accounts)",
    )
    initial_passwords = Dict(
        config=True,
        help="name -> password for accounts not yet made or not yet approved (a roster)",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, password in self.seed_passwords.items():
            self.set_account(self.normalize_username(name), password, reset=True)
        for name, password in self.initial_passwords.items():
            self.set_account(self.normalize_username(name), password, reset=False)

    def get_authed_users(self) -> set[str]:
        """Approved accounts only: no name is approved at sign-up for being an admin's."""
        return {info.username for info in UserInfo.all_users(self.db) if info.is_authorized}

    def account_problem(self, name: str, password: str) -> str | None:
        """Why NAME/password cannot be an account, in words; None when they can."""
        if not self.validate_username(name):
            return f"{name!r} is not a valid user name (no spaces, commas or slashes)"
        if not self.is_password_strong(password):
            return (
                f"the password is too weak: at least {self.minimum_password_length} characters"
                + (", not a common one" if self.check_common_password else "")
            )
        return None

    def set_account(self, name: str, password: str, *, reset: bool) -> tuple[bool, bool]:
        """Make NAME's approved account with ``password``, or approve an existing one with it;
        an approved account keeps its own password unless ``reset``. Returns (created, kept).
        Hashing is NativeAuthenticator's own (bcrypt with a fresh salt)."""
        info = UserInfo.find(self.db, name)
        if info is None:
            self.db.add(UserInfo(username=name, password=_hash(password), is_authorized=True))
            self.db.commit()
            return True, False
        if info.is_authorized and not reset:
            return False, True
        if not info.is_valid_password(password):  # one hash: restarts re-apply a roster
            info.password = _hash(password)
        info.is_authorized = True
        info.has_2fa = False  # a 2FA secret chosen at someone's sign-up is not the roster's
        self.db.commit()
        return False, False

    def get_handlers(self, app: Any) -> list[tuple[str, Any]]:
        handlers = [
            (route, LoginHandler if handler is NativeLoginHandler else handler)
            for route, handler in super().get_handlers(app)
        ]
        return [*handlers, (ACCOUNTS_API + r"/([^/]+)", AccountHandler)]


def _hash(password: str) -> bytes:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt())
