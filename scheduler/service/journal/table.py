"""The journal's rows: what a pass's body holds, and reading them back (the table and its SQL
are ``store/journal.py``'s).

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

from sqlalchemy.engine import Connection

from labhive.scheduler.service.journal import codec
from labhive.scheduler.service.store import journal as rows
from labhive.scheduler.service.store.journal import journal as journal

log = logging.getLogger("labhive.service.journal")

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
    rows.insert_pass(conn, t, policy is not None, text)


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
    for row in rows.pass_rows(conn, since, fresh):
        yield decode(row)


def prune(conn: Connection, before: float) -> int:
    """Drop the passes older than ``before`` (``--journal-days``). A replay starts at a fresh
    pass (``read``), so a stretch without a restart that began before ``before`` can no longer
    be replayed: the retention wins over the replay (docs/admin.md)."""
    return rows.delete_before(conn, before)
