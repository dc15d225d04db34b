"""``labhive twin check`` (replay the journal under the live config and policy) and ``labhive
explain JOB`` (why a job waited, from the journal).

It reads the store directly (``--db``/``--db-file``/``$LABHIVE_DB_URL``, else the data dir's
SQLite), as the service's own account does: whoever can read the database is an admin here
(docs/admin.md, the trust model). Exit 0: identical decisions; 1: a divergence (printed).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from labhive.scheduler.core.errors import UserError

T = TypeVar("T")


def register(subparsers: Any) -> None:
    twin = subparsers.add_parser(
        "twin", help="replay the service's event journal (admins: reads the store)"
    )
    sub = twin.add_subparsers(dest="twin_command", required=True)
    check = sub.add_parser(
        "check",
        help="replay the journal under this config and policy; report the first divergence",
        description="Replay every event the service gave its policy (its journal) under the "
        "given cluster config and policy, and compare each decision with the one recorded. "
        "Exit 0 when all match, 1 at the first divergence (printed with the events before it).",
    )
    check.add_argument("--since", help="from this time on: epoch seconds, ISO 8601, or 7d/12h ago")
    _store_options(check)
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(func=_check)
    explain = subparsers.add_parser(
        "explain",
        help="why a job waited: the journal replayed around its wait (admins: reads the store)",
        description="Replay the journal and say, span by span, why the job waited (the "
        "why-text the service showed then) and which jobs held GPUs meanwhile.",
    )
    explain.add_argument("job", type=int, help="the job's id")
    _store_options(explain)
    explain.set_defaults(func=_explain)


def _store_options(parser: argparse.ArgumentParser) -> None:
    store_options(parser)
    parser.add_argument("--cluster", help="the cluster config the service runs (as for serve)")
    parser.add_argument("--policy", default="hived", help="the service's policy (default hived)")
    parser.add_argument("--fair-share", metavar="HALF_LIFE", help="the service's --fair-share")


def store_options(parser: argparse.ArgumentParser) -> None:
    """Where the journal is: the service's own store options."""
    parser.add_argument(
        "--db", help="the service's --db (SQLite path or postgresql://USER@HOST/DB)"
    )
    parser.add_argument("--db-file", type=Path, help="a file (mode 0600) holding the database URL")
    parser.add_argument("--data-dir", type=Path, default=Path("data"), help="default ./data")


def parse_since(text: str | None, now: float) -> float | None:
    """Epoch seconds, an ISO 8601 time, or a duration before ``now`` (``7d``, ``12h``)."""
    if text is None:
        return None
    from datetime import datetime

    from labhive.scheduler.core.time_limits import parse_time_limit

    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        pass
    try:
        return now - parse_time_limit(text)
    except ValueError:
        raise UserError(
            f"--since {text!r}: give epoch seconds, an ISO time (2026-11-27T12:00) or a "
            "duration ago (7d, 12h)"
        ) from None


def _replayed(args: argparse.Namespace, walk: Callable[[Iterator[Any], Any], T]) -> T:
    """``walk(passes, policy_maker)`` over the store's journal, as the service's options say."""
    from labhive.scheduler.core.time_limits import parse_time_limit
    from labhive.scheduler.service.journal import twin

    half_life = parse_time_limit(args.fair_share) if args.fair_share else None
    make = twin.policy_maker(args.cluster, args.policy, half_life)
    return read_journal(args, lambda passes, _conn: walk(passes, make))


def read_journal(
    args: argparse.Namespace, use: Callable[[Iterator[Any], Any], T], *, fresh: bool = True
) -> T:
    """``use(passes, connection)`` over the journal of the store the options name
    (``--db``/``--db-file``/``--data-dir``), from ``--since`` on (``table.read``'s ``fresh``:
    from a service start or recovery, as a replay of the policy needs)."""
    from labhive.scheduler.service.db_source import database_from
    from labhive.scheduler.service.journal import table
    from labhive.scheduler.service.store import HEAD_REVISION, Store, database_url

    url = database_url(database_from(args.db, args.db_file), args.data_dir.resolve())
    if url.startswith("sqlite"):
        _readable_store(Path(url.split("///", 1)[-1]), url)
    store = Store(url)
    try:
        if store.revision() != HEAD_REVISION:
            raise UserError(
                f"the store at {url} has no journal of this version (schema "
                f"{store.revision()}): start `labhive serve` on it once to migrate it"
            )
        with store.read() as conn:
            since = parse_since(getattr(args, "since", None), time.time())
            return use(table.read(conn, since, fresh=fresh), conn)
    finally:
        store.dispose()


def _readable_store(path: Path, url: str) -> None:
    """The SQLite store exists and this account may read it: the journal is the admins'
    (the service's account, root), and the service keeps its data dir to itself."""
    try:
        found = path.is_file() and os.access(path, os.R_OK)
    except PermissionError:
        found = False
    if not found and os.access(path.parent, os.X_OK) and not path.exists():
        raise UserError(f"no job store at {url}: give the service's --data-dir, --db or --db-file")
    if not found:
        raise UserError(
            f"cannot read the job store at {url} (permission denied): the journal holds every "
            "user's submissions and is for admins; run this as the service's account or root"
        )


def _check(args: argparse.Namespace) -> int:
    from labhive.scheduler.service.journal import twin

    report = _replayed(args, twin.replay)
    _print(report, args.json)
    return 1 if report.divergence is not None else 0


def _explain(args: argparse.Namespace) -> int:
    from labhive.scheduler.service.journal import explain

    found = _replayed(args, lambda passes, make: explain.explain(passes, make, args.job))
    print(found.text())
    return 0 if found.submitted is not None else 1


def _print(report: Any, as_json: bool) -> None:
    d = report.divergence
    if as_json:
        out = {
            "passes": report.passes, "steps": report.steps, "decisions": report.decisions,
            "stretches": report.stretches, "seconds": report.seconds, "steps_per_s": report.rate,
            "notes": report.notes, "divergence": None if d is None else d.text(),
        }  # fmt: skip
        print(json.dumps(out, indent=2))
        return
    for note in report.notes:
        print(f"note: {note}")
    if report.passes == 0:
        print("nothing to replay: the journal has no fresh pass in that span")
        return
    print(
        f"replayed {report.steps} events in {report.passes} passes ({report.stretches} "
        f"service starts/recoveries): {report.decisions} decisions, "
        f"{report.rate:,.0f} events/s"
    )
    print(d.text() if d is not None else "identical: every recorded decision reproduced")
