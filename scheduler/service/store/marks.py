"""The nodes an admin took down (``node_marks``): what a restart must still hold down."""

from __future__ import annotations

from typing import TypedDict, cast

from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Connection

from labhive.scheduler.service.store.tables import node_marks


class MarkRow(TypedDict):
    """A node an admin took down (``node_marks``)."""

    node: str
    reason: str
    marked_by: str
    marked_at: float


def node_marks_of(conn: Connection) -> list[MarkRow]:
    """Every node marked down."""
    return [cast(MarkRow, dict(m)) for m in conn.execute(select(node_marks)).mappings()]


def mark_down(conn: Connection, node: str, reason: str, by: str, t: float) -> None:
    """``node`` is down (by ``by``, for ``reason``): its one mark, the newest."""
    conn.execute(delete(node_marks).where(node_marks.c.node == node))
    conn.execute(insert(node_marks).values(node=node, reason=reason, marked_by=by, marked_at=t))


def unmark(conn: Connection, node: str) -> None:
    """``node`` is up again."""
    conn.execute(delete(node_marks).where(node_marks.c.node == node))
