"""The journal table's SQL (``service/journal/`` writes and decodes the passes' bodies).

One row per pass that gave the policy events: the pass's clock, whether the policy was fresh,
and the body (JSON, ``journal/table.py``'s). The row is written in the pass's own transaction
(``record.commit``): the caller owns it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import Boolean, Column, Float, Integer, Table, Text, delete, insert, select
from sqlalchemy.engine import Connection, Row

from labhive.scheduler.service.store.tables import metadata

journal = Table(
    "journal",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("t", Float, nullable=False, index=True),
    Column("fresh", Boolean, nullable=False, default=False),
    Column("body", Text, nullable=False),
)

_INSERT = insert(journal)  # built once: the pass runs it every time
#: The same insert as the driver's own SQL, by its parameter style (``insert_pass``).
_DRIVER_INSERT = {
    style: f"INSERT INTO journal (t, fresh, body) VALUES ({', '.join([mark] * 3)})"
    for style, mark in (("qmark", "?"), ("format", "%s"), ("pyformat", "%s"))
}


def insert_pass(conn: Connection, t: float, fresh: bool, text: str) -> None:
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


def pass_rows(conn: Connection, since: float | None, fresh: bool) -> Iterator[Row[Any]]:
    """The rows in order, from the first fresh one at or after ``since`` (``fresh``), or every
    row at or after ``since``; read 500 at a time."""
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
    yield from conn.execute(query.execution_options(yield_per=500))


def delete_before(conn: Connection, before: float) -> int:
    """Drop the rows older than ``before``; how many."""
    return conn.execute(delete(journal).where(journal.c.t < before)).rowcount
