"""The ``accounts`` table's SQL: who each caller is to the store, and the uid/gid their tasks
run as.

``service/accounts.py`` decides (the users file reconciled, uids allocated in the range,
refusals); the reads and writes are here, with typed rows. The caller owns the transaction.
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import Connection

from labhive.scheduler.service.store.tables import accounts, jobs


class AccountRow(NamedTuple):
    """One row of ``accounts``."""

    id: int
    kind: str
    user: str
    uid: int | None
    gid: int | None
    source: str
    credential: str | None
    created_at: float
    retired_at: float | None


def account(conn: Connection, account_id: int) -> AccountRow | None:
    """Account ``account_id`` (None: no such account)."""
    row = conn.execute(select(accounts).where(accounts.c.id == account_id)).first()
    return AccountRow(*row) if row is not None else None


def every_account(conn: Connection) -> list[AccountRow]:
    """Every account, live or retired."""
    return [AccountRow(*r) for r in conn.execute(select(accounts))]


def live_id(conn: Connection, kind: str, name: str) -> int | None:
    """The number of the live (not retired) account of this kind and name."""
    c = accounts.c
    live = (c.kind == kind) & (c.user == name) & c.retired_at.is_(None)
    found: int | None = conn.execute(select(c.id).where(live)).scalar()
    return found


def add(conn: Connection, kind: str, name: str, t: float) -> int:
    """A new live account without a uid yet; its number. Raises ``IntegrityError`` when
    another writer added the same live account first."""
    row = {"kind": kind, "user": name, "source": "allocated", "created_at": t}
    return int(conn.execute(insert(accounts).values(row).returning(accounts.c.id)).scalar_one())


def uid_holder(conn: Connection, uid: int, other_than: int | None) -> AccountRow | None:
    """The account other than ``other_than`` that holds ``uid``, if any."""
    query = select(accounts).where(accounts.c.uid == uid, accounts.c.id != other_than)
    row = conn.execute(query).first()
    return AccountRow(*row) if row is not None else None


def set_configured_uid(conn: Connection, account_id: int | None, uid: int, gid: int) -> None:
    """The users file names this account's uid and gid: they replace any allocated ones."""
    values = {"uid": uid, "gid": gid, "source": "configured"}
    conn.execute(update(accounts).where(accounts.c.id == account_id).values(values))


def top_uid(conn: Connection, low: int, high: int) -> int | None:
    """The highest uid in [``low``, ``high``] held by an account."""
    in_range = (accounts.c.uid >= low) & (accounts.c.uid <= high)
    top: int | None = conn.execute(select(func.max(accounts.c.uid)).where(in_range)).scalar()
    return top


def allocate_uid(conn: Connection, account_id: int, uid: int) -> None:
    """Give ``uid`` (as uid and gid) to an account that has none; raises ``IntegrityError``
    when another account took ``uid`` first."""
    conn.execute(
        update(accounts)
        .where(accounts.c.id == account_id, accounts.c.uid.is_(None))
        .values(uid=uid, gid=uid, source="allocated")
    )


def allocated_span(conn: Connection) -> tuple[int | None, int | None]:
    """The lowest and highest uid ever allocated (None, None: none)."""
    allocated = accounts.c.source == "allocated"
    query = select(func.min(accounts.c.uid), func.max(accounts.c.uid)).where(allocated)
    low, high = conn.execute(query).one()
    return low, high


def retire(conn: Connection, account_ids: list[int], t: float) -> None:
    """These accounts are retired at ``t`` (their jobs stay with them)."""
    conn.execute(update(accounts).where(accounts.c.id.in_(account_ids)).values(retired_at=t))


def hand_over(conn: Connection, account_id: int, user: str, credential: str | None) -> None:
    """Account ``account_id`` is ``user``'s now, live, bound to ``credential``."""
    values = {"user": user, "retired_at": None, "credential": credential}
    conn.execute(update(accounts).where(accounts.c.id == account_id).values(values))


def set_credential(conn: Connection, account_id: int | None, credential: str | None) -> None:
    """Bind the account to its user's token fingerprint."""
    query = update(accounts).where(accounts.c.id == account_id).values(credential=credential)
    conn.execute(query)


def owner_of(conn: Connection, job_id: int) -> int | None:
    """The account that owns job ``job_id`` (None: no such job, or stored without one)."""
    owner: int | None = conn.execute(select(jobs.c.owner_id).where(jobs.c.id == job_id)).scalar()
    return owner
