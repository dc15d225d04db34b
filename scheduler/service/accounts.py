"""Each LabHive user's OS identity: the uid/gid their tasks and notebook servers run as.

An admin may name them in the users file (or the hub's grants file)::

    users:
      alice: {token: "s3cret-alice", groups: [students], uid: 1001, gid: 1001}

Every other user gets a uid allocated once from a range (default 200000 and up), with a gid of
the same number, recorded in the store so it never changes: the files a user's tasks leave
behind stay theirs across restarts. No ``/etc/passwd`` entry is needed; the kernel only needs
numbers. uid/gid 0 are refused: no user command ever runs as root.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError

from labhive.scheduler.errors import UserError
from labhive.scheduler.executors.base import TaskLaunch
from labhive.scheduler.service.store import Store, accounts, now

DEFAULT_FIRST_UID = 200000
DEFAULT_UID_COUNT = 1_000_000
_MAX_ID = 2**31 - 2


@dataclass(frozen=True, slots=True)
class Account:
    user: str
    uid: int
    gid: int


def load_configured(path: Path | None) -> dict[str, tuple[int, int]]:
    """user -> (uid, gid) named in a users or grants file's ``users`` section."""
    if path is None:
        return {}
    import yaml

    try:
        doc = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise UserError(f"cannot read users file {path}: {err}") from err
    users = doc.get("users") if isinstance(doc, dict) else None
    out = {}
    for name, entry in (users or {}).items() if isinstance(users, dict) else ():
        if not isinstance(entry, dict) or entry.get("uid") is None:
            continue
        uid = _id(entry["uid"], f"{path}: users.{name}.uid")
        gid = _id(entry.get("gid", uid), f"{path}: users.{name}.gid")
        out[str(name)] = (uid, gid)
    return out


def _id(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= _MAX_ID:
        raise UserError(
            f"{where} must be a number from 1 to {_MAX_ID} (0 is root: LabHive never runs a "
            "user's command as root)"
        )
    return value


class Accounts:
    """Looks up, and on first use allocates, users' uids/gids (thread-safe; cached)."""

    def __init__(
        self,
        store: Store,
        configured: dict[str, tuple[int, int]] | None = None,
        first_uid: int = DEFAULT_FIRST_UID,
        count: int = DEFAULT_UID_COUNT,
    ) -> None:
        if not 0 < first_uid <= _MAX_ID - count:
            raise UserError(f"the uid range must start above 0 and end by {_MAX_ID}")
        self.store = store
        self.configured = dict(configured or {})
        self.first_uid, self.last_uid = first_uid, first_uid + count - 1
        self._lock = threading.Lock()
        self._cache: dict[str, Account] = {}

    def sync(self) -> None:
        """Record the configured identities (they win over earlier allocations); refuse two
        users with one uid, which would let each read the other's files."""
        taken = {uid: u for u, (uid, _) in self.configured.items()}
        if len(taken) < len(self.configured):
            raise UserError("two users in the users file have the same uid: give each its own")
        with self.store.write() as conn:
            rows = {r.user: r for r in conn.execute(select(accounts))}
            for user, (uid, gid) in self.configured.items():
                holder = next((r.user for r in rows.values() if r.uid == uid), None)
                if holder is not None and holder != user:
                    raise UserError(
                        f"uid {uid} configured for {user!r} already belongs to {holder!r} "
                        "(recorded in the store); choose another uid"
                    )
                values = {"uid": uid, "gid": gid, "source": "configured"}
                if user in rows:
                    conn.execute(update(accounts).where(accounts.c.user == user).values(values))
                else:
                    conn.execute(insert(accounts).values(user=user, created_at=now(), **values))
        self._cache.clear()

    def of(self, user: str) -> Account:
        """The user's identity, allocated now if they never had one."""
        found = self._cache.get(user)
        if found is not None:
            return found
        with self._lock:
            account = self._read(user) or self._allocate(user)
            self._cache[user] = account
            return account

    def _read(self, user: str) -> Account | None:
        with self.store.read() as conn:
            row = conn.execute(select(accounts).where(accounts.c.user == user)).first()
        return Account(user, row.uid, row.gid) if row else None

    def _allocate(self, user: str) -> Account:
        reserved = {uid for uid, _ in self.configured.values()}
        for _ in range(100):  # another service process may take the same number first
            with self.store.read() as conn:
                in_range = (accounts.c.uid >= self.first_uid) & (accounts.c.uid <= self.last_uid)
                top = conn.execute(select(func.max(accounts.c.uid)).where(in_range)).scalar()
            uid = self.first_uid if top is None else top + 1
            while uid in reserved:
                uid += 1
            if uid > self.last_uid:
                raise UserError(
                    f"no uid left in {self.first_uid}-{self.last_uid}: widen --uid-range"
                )
            try:
                with self.store.write() as conn:
                    conn.execute(
                        insert(accounts).values(
                            user=user, uid=uid, gid=uid, source="allocated", created_at=now()
                        )
                    )
                return Account(user, uid, uid)
            except IntegrityError:
                existing = self._read(user)
                if existing is not None:
                    return existing
        raise UserError(f"could not allocate a uid for {user!r}: try again")

    def filling(self, build: Callable[..., list[TaskLaunch]]) -> Callable[..., list[TaskLaunch]]:
        """Wrap a launch builder so that every task carries its user's uid/gid."""

        def with_identity(*args: Any) -> list[TaskLaunch]:
            out = []
            for launch in build(*args):
                account = self.of(launch.user or "")
                out.append(dataclasses.replace(launch, uid=account.uid, gid=account.gid))
            return out

        return with_identity
