"""The service's data directory is the service's own: tasks may pass through it to their own
work directories (0711), and read nothing in it.

Everything secret in it is 0600/0700 whatever the umask: the SQLite database and its WAL and
shared-memory files (SQLite gives those the database file's mode, so the file is made 0600
before SQLite first opens it), the admin token (``auth.ensure_admin_token``), the hub's secrets
and the spawner's launch files (``hub_extension``), and the task records
(``executors/workdir.py``). Users read their logs and observations through the API, which
checks ownership.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.engine import make_url

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.executors.workdir import PRIVATE_FILE, secure_dir
from labhive.scheduler.service.store import Store


def secure_data_dir(path: Path) -> Path:
    """Create the data dir if needed and make it 0711 (traversable, not listable)."""
    return secure_dir(path)


@contextlib.contextmanager
def secure_sqlite(store: Store) -> Iterator[None]:
    """Around the store's first use: a SQLite database file (and, after, its WAL and
    shared-memory files) 0600."""
    path = make_url(store.url).database if store.is_sqlite else None
    if not path or path == ":memory:":
        yield
        return
    db = Path(path)
    if not db.exists() and db.parent.is_dir():
        os.close(os.open(db, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE))
    yield
    for f in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), Path(f"{db}-journal")):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(f, PRIVATE_FILE)


def check_private(path: Path, what: str) -> None:
    """Refuse a secrets file other users could read: tasks run as those users."""
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        return  # reading it reports the problem
    if mode & 0o077:
        raise UserError(
            f"{path} holds {what} and other users may read it (mode {mode:04o}); tasks run as "
            f"those users could read it too: run `chmod 600 {path}` and start again"
        )
