"""Who is calling, and what they may do: the one place the service resolves identity.

Standalone, identity comes from bearer tokens: the admin's token lives in a file created with
mode 0600 on first start, and users with their groups come from a YAML file; groups grant VCs.
Under JupyterHub another ``Authenticator`` (Hub OAuth) replaces ``TokenAuthenticator``; every
route asks ``Authenticator.identify`` and the permission helpers below, nothing else. Under a
hub the same ``groups`` section (alone) says which VCs each hub group grants, and a group named
``*`` grants to everyone.

Users file::

    users:
      alice: {token: "s3cret-alice", groups: [students]}
      bob:   {token: "s3cret-bob", groups: [staff], account: 7}   # hands bob account 7
    groups:
      students: {vcs: [vc1]}
      staff: {vcs: ["*"], admin: true}
"""

from __future__ import annotations

import hmac
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.core.job_limits import text_problem

ADMIN = "admin"
#: Names no users file may give a user: the admin token's identity, and names the service or
#: the hub's services go by. Jobs are owned by an account number (``Identity.id``), not a name,
#: but a users-file ``admin`` would still be confused with the admin token in every listing.
RESERVED_NAMES = frozenset({ADMIN, "root", "labhive"})
#: Hub services act as ``service:NAME`` (hubauth.py); no user may take such a name.
RESERVED_PREFIX = "service:"
#: A user's name is stored with each of their jobs (``jobs.user``, 128 characters).
MAX_USER_NAME = 128


class AuthError(Exception):
    """The request carries no valid credentials (401)."""


class Forbidden(Exception):
    """The caller is known but may not do this (403)."""


#: Kinds of identity (``accounts.kind``): one name may be a user and a hub service at once.
USER, ADMIN_KIND, SERVICE = "user", "admin", "service"


@dataclass(frozen=True, slots=True)
class Identity:
    name: str
    groups: tuple[str, ...] = ()
    admin: bool = False
    vcs: frozenset[str] = field(default_factory=frozenset)  # "*" grants every VC
    kind: str = USER
    #: The caller's account number (``accounts.id``), set by ``Service.identify``; jobs are
    #: owned by it, so a name re-used by someone new owns nothing of the old holder's.
    id: int | None = None

    def may_submit_to(self, vc: str) -> bool:
        return self.admin or "*" in self.vcs or vc in self.vcs

    def owns(self, owner_id: int | None) -> bool:
        """May see the job's command, env and logs, and act on it (an unowned job: admins
        only)."""
        return self.admin or (owner_id is not None and owner_id == self.id)


class Authenticator(Protocol):
    #: Whether ``identify`` may wait on I/O (the hub's asks JupyterHub on a cache miss): the
    #: API then calls it in a worker thread; False (tokens compared in memory) answers inline.
    blocking: bool

    def identify(self, request: Any) -> Identity:
        """The caller behind a request (a Starlette ``Request``: headers, cookies); raise
        ``AuthError`` when it carries no valid credentials. The API calls it in a worker thread,
        unless the authenticator has ``blocking = False`` (it never waits on I/O)."""


@runtime_checkable
class BrowserLogin(Protocol):
    """An authenticator with a login flow of its own for browsers (the hub's OAuth): the
    service's ASGI app is served through ``wrap(app)``. Token authentication has none."""

    def wrap(self, app: Any) -> Any:
        """The ASGI app to serve in place of ``app`` (it passes the API's requests on)."""


def ensure_admin_token(path: Path) -> tuple[str, bool]:
    """The admin token, creating the file (0600) on first start; returns (token, created)."""
    if path.exists():
        token = path.read_text().strip()
        if token:
            return token, False
    path.parent.mkdir(parents=True, exist_ok=True)
    # Hex, not urlsafe base64: a token that starts with "-" cannot follow ``--token`` on a
    # command line (argparse takes it for an option), which broke one start in 64.
    token = secrets.token_hex(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    os.chmod(path, 0o600)
    return token, True


def load_users(path: Path | None) -> dict[str, Identity]:
    """token -> identity from a users file (see the module docstring)."""
    if path is None:
        return {}
    doc = _read_mapping(path)
    grants = group_grants(doc, path)
    users = _mapping(doc.get("users"), f"{path}: users")
    by_token: dict[str, Identity] = {}
    for name, entry in users.items():
        check_user_name(name, path)
        entry = _mapping(entry, f"{path}: users.{name}")
        token = entry.get("token")
        if not isinstance(token, str) or len(token) < 8:
            raise UserError(f"{path}: users.{name}.token must be a string of 8+ characters")
        member_of = tuple(str(g) for g in entry.get("groups") or ())
        for group in member_of:
            if group not in grants:
                raise UserError(f"{path}: users.{name} is in unknown group {group!r}")
        if token in by_token:
            raise UserError(f"{path}: users.{name} reuses another user's token")
        by_token[token] = identity_for(
            str(name), member_of, grants, admin=bool(entry.get("admin", False))
        )
    return by_token


def check_user_name(name: Any, path: Path | str) -> None:
    """Refuse a users-file name that is reserved or that the store cannot hold, so that no
    listing confuses a user with the admin token or a service (ownership goes by account
    number: service/accounts.py)."""
    text = str(name)
    problem = text_problem(text)
    if problem is not None or not text.strip():
        raise UserError(f"{path}: users: a user name {problem or 'is empty'}")
    if len(text) > MAX_USER_NAME:
        raise UserError(
            f"{path}: users: the name {text[:20]!r}... is {len(text)} characters long; "
            f"the limit is {MAX_USER_NAME}"
        )
    if text.lower() in RESERVED_NAMES or text.lower().startswith(RESERVED_PREFIX):
        raise UserError(
            f"{path}: users.{text}: {text!r} is reserved (the admin token and the service's own "
            f"identities use {', '.join(sorted(RESERVED_NAMES))} and {RESERVED_PREFIX}NAME); "
            "give this user another name, and admin rights with admin: true or an admin group"
        )


@dataclass(frozen=True, slots=True)
class Grant:
    """What membership of one group gives: VCs to submit to ("*": all), LabHive admin."""

    vcs: frozenset[str] = frozenset()
    admin: bool = False


#: A group of this name in the ``groups`` section applies to every user (hub mode).
EVERYONE = "*"


def group_grants(doc: dict[str, Any], path: Path | str) -> dict[str, Grant]:
    """The ``groups`` section of a users (or hub grants) file: group -> ``Grant``."""
    out = {}
    for group, entry in _mapping(doc.get("groups"), f"{path}: groups").items():
        entry = _mapping(entry, f"{path}: groups.{group}")
        vcs = entry.get("vcs") or ()
        if isinstance(vcs, str) or not isinstance(vcs, list | tuple):
            raise UserError(f"{path}: groups.{group}.vcs must be a list of VC names")
        out[str(group)] = Grant(frozenset(str(v) for v in vcs), bool(entry.get("admin", False)))
    return out


def identity_for(
    name: str, groups: tuple[str, ...], grants: dict[str, Grant], admin: bool = False
) -> Identity:
    """A user's identity from their groups: the union of their groups' grants (and of the
    ``*`` group's, which everyone has); unknown groups grant nothing."""
    vcs: set[str] = set()
    for group in (*groups, EVERYONE):
        grant = grants.get(group)
        if grant is not None:
            vcs.update(grant.vcs)
            admin = admin or grant.admin
    return Identity(name, groups, admin, frozenset(vcs))


def load_grants(path: Path | None) -> dict[str, Grant]:
    """Group grants alone, for hub mode where the hub says who is in which group."""
    return {} if path is None else group_grants(_read_mapping(path), path)


def _read_mapping(path: Path) -> dict[str, Any]:
    import yaml

    try:
        doc = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise UserError(f"cannot read users file {path}: {err}") from err
    if not isinstance(doc, dict):
        raise UserError(f"users file {path}: expected a mapping with 'users' and 'groups'")
    return doc


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{where}: expected a mapping")
    return value


class TokenAuthenticator:
    """Bearer tokens: the admin's from its file, users' from the users file."""

    #: Answers from memory, never waits on I/O: the API asks it on the event loop (app._who).
    blocking = False

    #: Where to get a token, for every 401. No file system path: a 401 answers anyone, and the
    #: admin token's location is the operator's to know (``labhive serve`` prints it).
    HINT = "log in through the hub or pass a token: see docs/service.md"

    def __init__(
        self, admin_token: str, users: dict[str, Identity], token_file: Path | None = None
    ) -> None:
        """``token_file`` is accepted for the callers that name it; no answer shows it."""
        self._admin_token = admin_token
        self._users = users

    def identify(self, request: Any) -> Identity:
        return self.identify_header(request.headers.get("authorization"))

    def identify_header(self, authorization: str | None) -> Identity:
        if not authorization:
            raise AuthError(
                f"missing bearer token: send 'Authorization: Bearer TOKEN' ({self.HINT})"
            )
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() not in ("bearer", "token") or not token:
            raise AuthError("malformed Authorization header: expected 'Bearer TOKEN'")
        if hmac.compare_digest(token.encode(), self._admin_token.encode()):
            return Identity(ADMIN, ("admin",), True, frozenset({"*"}), kind=ADMIN_KIND)
        for known, identity in self._users.items():
            if hmac.compare_digest(token.encode(), known.encode()):
                return identity
        raise AuthError(f"invalid token ({self.HINT}; users get theirs from the admin)")
