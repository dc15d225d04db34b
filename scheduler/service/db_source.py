"""Where ``labhive serve`` takes its database URL from, so that its password is never on a
command line.

Every uid on the machine reads every process's ``/proc/PID/cmdline`` (``ps`` shows it): a
``--db postgresql://user:PASS@host/db`` hands the password to each job, which could then open
the store and give one user's jobs to another. So ``--db`` takes only URLs without a password
(a SQLite path, ``postgresql://user@host/db`` with the password in ``~/.pgpass`` or
``PGPASSWORD``), and a URL with one comes from

- ``--db-file PATH``: a file holding the URL, which other users may not read (mode 0600), or
- ``$LABHIVE_DB_URL``: read once at start and removed from the service's environment, so no
  process it starts inherits it (``/proc/PID/environ`` is readable only by its own uid and
  root; tasks never get the service's environment anyway: ``executors/env.py``).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.service.datadir import check_private

DB_URL_ENV = "LABHIVE_DB_URL"


def database_from(
    db: str | None,
    db_file: Path | None = None,
    environ: MutableMapping[str, str] | None = None,
) -> str | None:
    """The database the service uses (None: SQLite in its data dir) from ``--db``,
    ``--db-file`` or ``$LABHIVE_DB_URL`` (at most one of them); that variable is removed from
    ``environ`` (the process's own by default) whatever happens."""
    env = os.environ if environ is None else environ
    from_env = env.pop(DB_URL_ENV, None)
    sources = (("--db", db), ("--db-file", db_file), (f"${DB_URL_ENV}", from_env))
    given = [name for name, value in sources if value]
    if len(given) > 1:
        raise UserError(f"the database is given twice ({' and '.join(given)}): give one")
    if db:
        if has_password(db):
            raise UserError(
                "--db carries a password, and every user of this machine can read a command "
                "line (/proc/PID/cmdline, ps): put the URL in a file only the service may read "
                f"(chmod 600 FILE) and pass --db-file FILE, or export {DB_URL_ENV}=URL "
                "(or keep the password in ~/.pgpass or PGPASSWORD)"
            )
        return db
    if db_file is not None:
        return _read_url_file(Path(db_file))
    return from_env or None


def has_password(db: str) -> bool:
    """Whether a ``--db`` value carries a password (in the URL's user part or its query)."""
    if "://" not in db:
        return False  # a SQLite path
    try:
        url = make_url(db)
    except ArgumentError:
        return ":" in db.split("://", 1)[1].split("@", 1)[0] and "@" in db
    return bool(url.password) or "password" in url.query


def _read_url_file(path: Path) -> str:
    check_private(path, "the database URL")
    try:
        url = path.read_text().strip()
    except OSError as err:
        raise UserError(f"cannot read --db-file {path}: {err.strerror}") from None
    if not url:
        raise UserError(f"--db-file {path} is empty: write the database URL in it")
    return url
