"""The journal's table and all of its SQL (kept here, apart from the store's other tables, so
it can move with them).

One row per pass that gave the policy events: the pass's clock, whether the policy was fresh
(rebuilt from the store: a start, or a recovery after a failed pass), and ``body``, the pass's
steps as JSON: ``{"v": VERSION, "policy": {...} (fresh passes only), "steps": [[event,
[decision, ...]] or [event, {"refused": "ErrorType: text"}], ...]}``. The row is written in the
pass's own transaction (``record.commit``): a pass the store acknowledged is in the journal,
and one it rolled back (kill -9, a failed pass) is in neither. Jobs' actual run times are not
copied: they stay in ``jobs``/``tasks`` (``started_at``/``finished_at``), referenced by job id.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Boolean, Column, Float, Integer, Table, Text, delete, insert, select
from sqlalchemy.engine import Connection

from labhive.scheduler.service.journal import codec
from labhive.scheduler.service.store import metadata

log = logging.getLogger("labhive.service.journal")

journal = Table(
    "journal",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("t", Float, nullable=False, index=True),
    Column("fresh", Boolean, nullable=False, default=False),
    Column("body", Text, nullable=False),
)

_INSERT = insert(journal)  # built once: the pass runs it every time
#: The same insert as the driver's own SQL, by its parameter style (``_insert``).
_DRIVER_INSERT = {
    style: f"INSERT INTO journal (t, fresh, body) VALUES ({', '.join([mark] * 3)})"
    for style, mark in (("qmark", "?"), ("format", "%s"), ("pyformat", "%s"))
}

#: What one step was: the event, and the decisions or the refusal (an error's type and text).
Step = tuple[Any, list[Any] | str]


@dataclass(frozen=True)
class Pass:
    """One journalled pass, decoded."""

    id: int
    t: float
    fresh: bool
    policy: dict[str, Any] | None
    steps: list[Step]
    gap: str | None = None  # the pass could not be recorded (why): a replay stops here


def body(steps: list[Step], policy: dict[str, Any] | None) -> str:
    out: list[Any] = []
    for event, result in steps:
        done = {"refused": result} if isinstance(result, str) else codec.to_plain(result)
        out.append([codec.to_plain(event), done])
    doc: dict[str, Any] = {"v": codec.VERSION, "steps": out}
    if policy is not None:
        doc["policy"] = policy
    return json.dumps(doc, separators=(",", ":"), allow_nan=False)


def write(conn: Connection, t: float, steps: list[Step], policy: dict[str, Any] | None) -> None:
    """(In the pass's transaction.) The pass's steps; ``policy`` set when the policy is fresh.
    A step the codec cannot write (a type it does not know) must not fail the pass, which would
    stop scheduling for everyone: the row then says what is missing, and a replay reports it."""
    if not (steps or policy is not None):
        return
    try:
        text = body(steps, policy)
    except (codec.JournalFormatError, ValueError) as err:
        log.error("journal: pass at %s not recorded: %s", t, err)
        text = json.dumps({"v": codec.VERSION, "steps": [], "gap": str(err), "policy": policy})
    _insert(conn, t, policy is not None, text)


def _insert(conn: Connection, t: float, fresh: bool, text: str) -> None:
    """The row, through the driver's cursor on the pass's own connection (so in its
    transaction): SQLAlchemy's execution path (its compiled cache, parameter processing, a
    result set up) was 1,450 of the 2,550 bytecodes the journal added to a submission's pass
    (benchmarks/bench_journal_cost.py). A driver of another parameter style goes that way."""
    sql = _DRIVER_INSERT.get(conn.dialect.paramstyle)
    if sql is None:
        conn.execute(_INSERT, {"t": t, "fresh": fresh, "body": text})
        return
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, (t, fresh, text))
    finally:
        cursor.close()


def decode(found: Any) -> Pass:
    row = found._mapping  # (``Row.t`` is the row as a tuple, not the column)
    doc = json.loads(row["body"])
    if doc.get("v") != codec.VERSION:
        raise codec.JournalFormatError(
            f"journal entry {row['id']} has format version {doc.get('v')!r}; this labhive reads "
            f"version {codec.VERSION}: use the labhive that wrote it"
        )
    steps: list[Step] = []
    for event, done in doc["steps"]:
        result = done["refused"] if isinstance(done, dict) else list(codec.from_plain(done))
        steps.append((codec.from_plain(event), result))
    gap = doc.get("gap")
    return Pass(row["id"], row["t"], bool(row["fresh"]), doc.get("policy"), steps, gap)


def read(conn: Connection, since: float | None = None, *, fresh: bool = True) -> Iterator[Pass]:
    """The passes in order, from the first fresh one at or after ``since`` (or the first fresh
    one of all): a replay must start from a freshly built policy. ``fresh=False``: every pass
    at or after ``since``, for readers that only walk the events (``whatif``, ``export``)."""
    query = select(journal).order_by(journal.c.id)
    if fresh:
        first = conn.execute(
            select(journal.c.id)
            .where(journal.c.t >= (since or 0.0), journal.c.fresh.is_(True))
            .order_by(journal.c.id)
            .limit(1)
        ).scalar()
        if first is None:
            return
        query = query.where(journal.c.id >= first)
    elif since is not None:
        query = query.where(journal.c.t >= since)
    for row in conn.execute(query.execution_options(yield_per=500)):
        yield decode(row)


def prune(conn: Connection, before: float) -> int:
    """Drop the passes older than ``before`` (``--journal-days``). A replay starts at a fresh
    pass (``read``), so a stretch without a restart that began before ``before`` can no longer
    be replayed: the retention wins over the replay (docs/admin.md)."""
    return conn.execute(delete(journal).where(journal.c.t < before)).rowcount
