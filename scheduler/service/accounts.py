"""Each identity that owns jobs: an account number, and the OS uid/gid its tasks run as.

Jobs are owned by an account's number (``jobs.owner_id``), never by a name: every ownership
check compares numbers (``Identity.owns``). One account per kind and name is live at a time:
the admin token's (kind ``admin``), each hub service's (``service``), each user's (``user``).

In token mode the users file is the list of users. At each start ``sync`` compares it with the
store: a user no longer in the file, or whose token changed, has their account *retired* (kept,
with its jobs and uid, visible to admins only) and whoever holds the name next gets a new
account, so a name re-used by someone new inherits nothing. The admin hands an existing account
to a user (a rename, a token rotated on purpose) by writing its number in their entry::

    users:
      alice: {token: "s3cret-alice", groups: [students], uid: 1001, gid: 1001, account: 3}

Under JupyterHub the hub's user names are the key: the hub keeps them unique, and a hub user
is one account from their first request on.

uid/gid: an admin may name them in the users file (or the hub's grants file); every other
account gets a uid allocated once from a range (default 200000 and up), with a gid of the same
number, recorded in the store so it never changes: the files a user's tasks leave behind stay
theirs across restarts, and a retired account keeps its uid. No ``/etc/passwd`` entry is
needed; the kernel only needs numbers. uid/gid 0 are refused: no user command runs as root.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.core.job_limits import text_problem
from labhive.scheduler.executors.base import TaskLaunch
from labhive.scheduler.service.auth import (
    ADMIN,
    ADMIN_KIND,
    MAX_USER_NAME,
    USER,
    Forbidden,
    Identity,
)
from labhive.scheduler.service.policy_port import key_job
from labhive.scheduler.service.store import Store, now
from labhive.scheduler.service.store import account_rows as rows

DEFAULT_FIRST_UID = 200000
DEFAULT_UID_COUNT = 1_000_000
_MAX_ID = 2**31 - 2
log = logging.getLogger("labhive.service")


@dataclass(frozen=True, slots=True)
class Account:
    user: str
    uid: int
    gid: int
    id: int = 0


@dataclass(frozen=True, slots=True)
class Member:
    """A users-file user as ``sync`` sees them: their token's fingerprint and, where the admin
    hands them an existing account (``account: N``), its number."""

    credential: str
    claim: int | None = None


def fingerprint(token: str) -> str:
    """What the store keeps of a token: enough to tell that it changed, not the token."""
    return hashlib.sha256(b"labhive-account\0" + token.encode()).hexdigest()


def load_members(path: Path | None) -> dict[str, Member] | None:
    """user -> ``Member`` for the users file's users with tokens (None without a file: then
    the accounts of names are not managed from a file)."""
    if path is None:
        return None
    out = {}
    for name, entry in _users_section(path).items():
        if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
            continue
        claim = entry.get("account")
        if claim is not None:
            claim = _id(claim, f"{path}: users.{name}.account", "an account number (GET /me)")
        out[str(name)] = Member(fingerprint(entry["token"]), claim)
    return out


def load_configured(path: Path | None) -> dict[str, tuple[int, int]]:
    """user -> (uid, gid) named in a users or grants file's ``users`` section."""
    if path is None:
        return {}
    out = {}
    for name, entry in _users_section(path).items():
        if not isinstance(entry, dict) or entry.get("uid") is None:
            continue
        uid = _id(entry["uid"], f"{path}: users.{name}.uid")
        gid = _id(entry.get("gid", uid), f"{path}: users.{name}.gid")
        out[str(name)] = (uid, gid)
    return out


def _users_section(path: Path) -> dict[Any, Any]:
    import yaml

    try:
        doc = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise UserError(f"cannot read users file {path}: {err}") from err
    users = doc.get("users") if isinstance(doc, dict) else None
    return users if isinstance(users, dict) else {}


_ROOT_HINT = "(0 is root: LabHive never runs a user's command as root)"


def _id(value: Any, where: str, what: str = _ROOT_HINT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= _MAX_ID:
        raise UserError(f"{where} must be a number from 1 to {_MAX_ID} {what}")
    return value


class Accounts:
    """Account numbers and uids/gids: looked up, created and allocated on first use
    (thread-safe; cached until the next ``sync``)."""

    def __init__(
        self,
        store: Store,
        configured: dict[str, tuple[int, int]] | None = None,
        first_uid: int = DEFAULT_FIRST_UID,
        count: int = DEFAULT_UID_COUNT,
        members: dict[str, Member] | None = None,
    ) -> None:
        if count < 1:
            raise UserError(f"--uid-count {count}: the uid range must hold at least one uid")
        if not 0 < first_uid <= _MAX_ID - count:
            raise UserError(
                f"--first-uid {first_uid} --uid-count {count}: the uid range must start above 0 "
                f"and end by {_MAX_ID}"
            )
        self.store = store
        self.configured = dict(configured or {})
        self.members = members
        self.first_uid, self.last_uid = first_uid, first_uid + count - 1
        self._lock = threading.Lock()
        self._ids: dict[tuple[str, str], int] = {}
        self._cache: dict[int, Account] = {}
        self._owners: dict[int, int] = {}  # job id -> account id, for launches

    def sync(self) -> None:
        """At start: the admin's account; the users file's users reconciled with the store
        (see the module docstring); then the configured uids (they win over allocations),
        refusing one uid for two accounts, which would let each read the other's files."""
        taken = {uid: u for u, (uid, _) in self.configured.items()}
        if len(taken) < len(self.configured):
            raise UserError("two users in the users file have the same uid: give each its own")
        with self.store.write() as conn:
            _live_id(conn, ADMIN_KIND, ADMIN, create=True)
            if self.members is not None:
                _reconcile(conn, self.members)
            for user, (uid, gid) in self.configured.items():
                own = _live_id(conn, USER, user, create=True)
                holder = rows.uid_holder(conn, uid, own)
                if holder is not None:
                    raise UserError(_uid_taken(user, uid, holder))
                rows.set_configured_uid(conn, own, uid, gid)
        self._ids.clear()
        self._cache.clear()
        self._owners.clear()

    def known_id(self, who: Identity) -> int | None:
        """The caller's account number if it is already known (no store access)."""
        return self._ids.get((who.kind, who.name))

    def id_of(self, who: Identity) -> int:
        """The caller's account number (their account is created on first sight: a hub user,
        a hub service)."""
        key = (who.kind, who.name)
        found = self._ids.get(key)
        if found is None:
            _check_storable(who.name)
            for _ in range(3):  # another request may create it first
                try:
                    with self.store.write() as conn:
                        found = _live_id(conn, who.kind, who.name, create=True)
                    break
                except IntegrityError:
                    continue
            if found is None:
                raise UserError(f"could not record an account for {who.name!r}: try again")
            self._ids[key] = found
        return found

    def of(self, user: str, kind: str = USER) -> Account:
        """A user's identity by name, allocated now if they never had one."""
        return self.of_id(self.id_of(Identity(user, kind=kind)))

    def of_id(self, account_id: int) -> Account:
        """The account's uid/gid, allocated now if it never had them."""
        found = self._cache.get(account_id)
        if found is not None:
            return found
        with self._lock:
            account = self._read(account_id) or self._allocate(account_id)
            self._cache[account_id] = account
            return account

    def of_job(self, job_id: int, user: str) -> Account:
        """Whom a job's tasks run as: its owner's account (``user``, the job's shown name,
        only for a job stored without one)."""
        owner = self._owners.get(job_id)
        if owner is None:
            with self.store.read() as conn:
                owner = rows.owner_of(conn, job_id)
            if owner is None:
                return self.of(user)
            if len(self._owners) > 100_000:
                self._owners.clear()
            self._owners[job_id] = owner
        return self.of_id(owner)

    def _read(self, account_id: int) -> Account | None:
        with self.store.read() as conn:
            row = rows.account(conn, account_id)
        if row is None:
            raise UserError(f"no account {account_id}")
        if row.uid is None:
            return None
        # A uid is always written with its gid; a row with none (never seen) gets the uid's.
        gid = row.uid if row.gid is None else row.gid
        return Account(row.user, row.uid, gid, row.id)

    def _allocate(self, account_id: int) -> Account:
        reserved = {uid for uid, _ in self.configured.values()}
        for _ in range(100):  # another service process may take the same number first
            with self.store.read() as conn:
                top = rows.top_uid(conn, self.first_uid, self.last_uid)
            uid = self.first_uid if top is None else top + 1
            while uid in reserved:
                uid += 1
            if uid > self.last_uid:
                raise UserError(
                    f"no uid left in {self.first_uid}-{self.last_uid}: raise --uid-count (the "
                    "range is claimed for this host at the next start: see uid_claims.py)"
                )
            try:
                with self.store.write() as conn:
                    rows.allocate_uid(conn, account_id, uid)
            except IntegrityError:
                continue
            existing = self._read(account_id)
            if existing is not None:
                return existing
        raise UserError(f"could not allocate a uid for account {account_id}: try again")

    def configured_uids(self) -> dict[str, int]:
        """user -> uid as the users file names them: claimed host-wide with the range
        (``uid_claims.py``), since they are handed out as surely as allocated ones."""
        return {user: uid for user, (uid, _) in self.configured.items()}

    def claimed_span(self) -> tuple[int, int]:
        """The uids this service hands out: its range, widened to every uid it allocated
        before (under an earlier ``--first-uid``), which its users' files still carry."""
        with self.store.read() as conn:
            low, high = rows.allocated_span(conn)
        low = self.first_uid if low is None else min(low, self.first_uid)
        high = self.last_uid if high is None else max(high, self.last_uid)
        return low, high

    def filling(self, build: Callable[..., list[TaskLaunch]]) -> Callable[..., list[TaskLaunch]]:
        """Wrap a launch builder so that every task carries its owner's uid/gid."""

        def with_identity(*args: Any) -> list[TaskLaunch]:
            out = []
            for launch in build(*args):
                account = self.of_job(key_job(launch.key), launch.user or "")
                out.append(dataclasses.replace(launch, uid=account.uid, gid=account.gid))
            return out

        return with_identity


def _check_storable(name: str) -> None:
    """A name the store cannot hold (a hub user's, which no users file checked) is refused
    with what to do, not a database error."""
    problem = text_problem(name) or (
        f"is {len(name)} characters long (the limit is {MAX_USER_NAME})"
        if len(name) > MAX_USER_NAME
        else None
    )
    if problem:
        raise Forbidden(f"your user name {problem}: ask the hub's admin for another name")


def _live_id(conn: Connection, kind: str, name: str, create: bool = False) -> int | None:
    """The number of the live account of this kind and name (created when asked)."""
    found = rows.live_id(conn, kind, name)
    if found is not None or not create:
        return found
    return rows.add(conn, kind, name, now())


def _reconcile(conn: Connection, members: dict[str, Member]) -> None:
    """Retire the live user accounts the users file no longer vouches for; give claimed
    accounts to their new holders; bind each remaining user to their token's fingerprint."""
    every = rows.every_account(conn)
    by_id = {r.id: r for r in every}
    live = {r.user: r for r in every if r.kind == USER and r.retired_at is None}
    claims: dict[int, str] = {}
    for name, member in members.items():
        if member.claim is not None:
            _check_claim(name, member.claim, by_id, members, claims)
            claims[member.claim] = name
    for name, row in live.items():
        why = "" if row.id in claims else _retire_why(row, members.get(name))
        if why:
            rows.retire(conn, [row.id], now())
            log.warning(
                "account %s (%r) retired: %s; its jobs stay with it (admins see them); to give "
                "it back write 'account: %s' in the user's entry of the users file",
                row.id, name, why, row.id,
            )  # fmt: skip
    rows.retire(conn, list(claims), now())  # set aside first: two users may swap accounts
    for account_id, name in claims.items():
        rows.hand_over(conn, account_id, name, members[name].credential)
    for name, member in members.items():
        if member.claim is None:
            own = _live_id(conn, USER, name, create=True)
            rows.set_credential(conn, own, member.credential)


def _retire_why(row: Any, member: Member | None) -> str:
    """Why a live account must be retired ("" to keep it)."""
    if member is None:
        return "the user is no longer in the users file"
    if member.claim is not None:
        return f"{row.user!r} now holds account {member.claim}"
    if row.credential is not None and row.credential != member.credential:
        return "the user's token changed (a new user of the same name gets a new account)"
    return ""


def _check_claim(
    name: str, claim: int, by_id: dict[int, Any], members: dict[str, Member], claims: dict[int, str]
) -> None:
    target = by_id.get(claim)
    if target is None or target.kind != USER:
        raise UserError(
            f"users file: users.{name}.account: there is no user account {claim} "
            "(a user's account number is the 'id' of GET /me)"
        )
    if claim in claims:
        raise UserError(
            f"users file: account {claim} is given to both {claims[claim]!r} and {name!r}"
        )
    holder = target.user
    keeps = holder != name and holder in members and members[holder].claim is None
    if target.retired_at is None and keeps:
        raise UserError(
            f"users file: users.{name}.account: account {claim} belongs to {holder!r}, who is "
            "still in the users file; remove them first, or give them another account"
        )


def _uid_taken(user: str, uid: int, holder: Any) -> str:
    if holder.retired_at is None:
        return (
            f"uid {uid} configured for {user!r} already belongs to {holder.user!r} "
            "(recorded in the store); choose another uid"
        )
    return (
        f"uid {uid} configured for {user!r} already belongs to {holder.user!r}, a removed user "
        f"(account {holder.id}); choose another uid, or, if they are the same person, give "
        f"{user!r} that account with 'account: {holder.id}'"
    )
