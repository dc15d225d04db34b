"""Given a database the migrations made while they lived in ``service/migrations/`` (before they
moved into ``service/store/migrations/``), on SQLite and on PostgreSQL, expect ``Store.migrate``
from the new place to bring it to the head with its jobs intact: Alembic knows a database by
the revision ids in ``alembic_version``, never by the scripts' path, so the move must keep every
id (and a copy that renames one is shown to strand such a database).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from alembic.util import CommandError
from sqlalchemy import text

from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.store import HEAD_REVISION, MIGRATIONS, Store, database_url, queries
from labhive.scheduler.service.store import transitions as tx

pytest_plugins = ["service_fixtures"]

#: The revision before the head: a database made then still has an upgrade ahead of it.
BEFORE_HEAD = "0008_task_downgrades"


def _old_location(tmp_path: Path) -> Path:
    """The migrations installed where they used to be: ``.../service/migrations``."""
    old = tmp_path / "old" / "service" / "migrations"
    shutil.copytree(MIGRATIONS, old, ignore=shutil.ignore_patterns("__pycache__"))
    return old


def _upgrade(store: Store, location: Path, revision: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(location))
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def _made_by_the_old_location(db_url: str, tmp_path: Path) -> tuple[Store, int]:
    """A store at ``BEFORE_HEAD`` migrated from the old place, with one job in it."""
    store = Store(database_url(db_url, tmp_path))
    _upgrade(store, _old_location(tmp_path), BEFORE_HEAD)
    assert store.revision() == BEFORE_HEAD
    job = lc.NewJob("old", "alice", "vc1", 10, 0, 1, 1, {"name": "old", "gpus": 1})
    with store.write() as conn:
        job_id = tx.submit(conn, job, 1.0)
    return store, job_id


def test_the_migrations_live_in_the_store() -> None:
    assert MIGRATIONS.parent.name == "store"
    assert (MIGRATIONS / "env.py").is_file()
    assert (MIGRATIONS / "script.py.mako").is_file()
    # a checkout pulled across the move may keep the old folder's untracked __pycache__
    assert not list((MIGRATIONS.parent.parent / "migrations").rglob("*.py"))


def test_a_database_made_by_the_old_location_upgrades_unchanged(
    db_url: str, tmp_path: Path
) -> None:
    store, job_id = _made_by_the_old_location(db_url, tmp_path)
    try:
        store.migrate()
        assert store.revision() == HEAD_REVISION
        with store.read() as conn:
            row = queries.job(conn, job_id)
            journal = conn.execute(text("SELECT count(*) FROM journal")).scalar_one()
        assert row is not None and (row["name"], row["state"]) == ("old", lc.WAITING)
        assert journal == 0  # the head's table was added by the upgrade
        store.migrate()  # at the head now: nothing to do
        assert store.revision() == HEAD_REVISION
    finally:
        store.dispose()


def test_a_move_that_renamed_a_revision_would_strand_such_a_database(
    db_url: str, tmp_path: Path
) -> None:
    """The attack the test above guards against: the scripts moved and one id renamed on the
    way (``0008_task_downgrades`` -> ``0008_downgrades``): the old database is refused."""
    store, _ = _made_by_the_old_location(db_url, tmp_path)
    renamed = tmp_path / "renamed" / "store" / "migrations"
    shutil.copytree(MIGRATIONS, renamed, ignore=shutil.ignore_patterns("__pycache__"))
    for script in (renamed / "versions").glob("*.py"):
        script.write_text(script.read_text().replace(BEFORE_HEAD, "0008_downgrades"))
    try:
        with pytest.raises(CommandError, match=BEFORE_HEAD):
            _upgrade(store, renamed, "head")
        assert store.revision() == BEFORE_HEAD  # refused, not half-applied
    finally:
        store.dispose()
