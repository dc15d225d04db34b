"""Fixtures for the job service tests: stores on both backends, a live service in-process.

PostgreSQL runs for real: Debian's ``postgresql`` package (installed by .ci/deps.sh), initdb
into a temp dir, a server on a loopback port (as the ``postgres`` user when the tests run as
root, since PostgreSQL refuses root), one fresh database per test.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pg_throwaway import free_port, new_database, throwaway_postgres
from serving import serving

from labhive.scheduler.client import Client
from labhive.scheduler.service.store import Store


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The base URL (no database) of a PostgreSQL server that lives for the test session."""
    with throwaway_postgres() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL for each backend (the --db forms ``labhive serve`` accepts)."""
    if request.param == "sqlite":
        return str(tmp_path / "labhive.db")
    return new_database(request.getfixturevalue("pg_server"))


@pytest.fixture
def store(db_url: str, tmp_path: Path) -> Iterator[Store]:
    from labhive.scheduler.service.store import database_url

    s = Store(database_url(db_url, tmp_path))
    s.migrate()
    yield s
    s.dispose()


# ---- a live service in this process (real HTTP on loopback, real local processes) -----------

USERS = """
users:
  alice: {token: alice-token-123, groups: [students]}
  bob: {token: bob-token-4567, groups: [others]}
groups:
  students: {vcs: [vc1]}
  others: {vcs: [default]}
"""


#: bob and dave, two students of one course (the fair-share tests' users).
BOB, DAVE = "bob-token-4567", "dave-token-8910"


def course_users(*vcs: str) -> str:
    """The users file of bob and dave, both in the group ``course``, which may use ``vcs``."""
    return (
        "users:\n"
        f"  bob: {{token: {BOB}, groups: [course]}}\n"
        f"  dave: {{token: {DAVE}, groups: [course]}}\n"
        f"groups:\n  course: {{vcs: [{', '.join(vcs)}]}}\n"
    )


def course_cluster(half_life: str, other_vc: str) -> str:
    """A fair-share course: two virtual nodes of 2 GPU slots in a pool, VC ``course`` bound to
    one, and the VC ``other_vc`` (its YAML, at the VCs' indent, a key and mapping) to the other;
    usage decays with ``half_life``."""
    return f"""
physicalCluster:
  cellTypes:
    VNODE: {{childCellType: VGPU, childCellNumber: 2, isNodeLevel: true}}
    POOL: {{childCellType: VNODE, childCellNumber: 2}}
  physicalCells:
    - cellType: POOL
      cellChildren: [{{cellAddress: vnode-0}}, {{cellAddress: vnode-1}}]
virtualClusters:
  course: {{virtualCells: [{{cellType: POOL.VNODE, cellNumber: 1}}]}}
  {other_vc}
fairShare: {{halfLife: {half_life}}}
"""


@dataclass
class Live:
    url: str
    admin: str
    running: Any
    data_dir: Path

    def client(self, token: str | None = None) -> Client:
        return Client(self.url, token or self.admin)


@contextmanager
def live_service(
    data_dir: Path,
    db: str | None = None,
    grace_s: float = 2.0,
    users: str = USERS,
    stop_tasks: bool = True,
    **options: Any,
) -> Iterator[Live]:
    """The service in this process; ``options`` are further ``ServeOptions`` fields (e.g.
    ``task_identity``). ``stop_tasks=False``: its jobs run on when it stops, for the next
    service on ``data_dir`` to adopt (a restart)."""
    from labhive.scheduler.service.server import ServeOptions, build

    data_dir.mkdir(parents=True, exist_ok=True)
    users_file = data_dir / "users.yaml"
    users_file.write_text(users)
    users_file.chmod(0o600)  # it holds tokens (a service running tasks as users refuses more)
    port = free_port()
    opts = ServeOptions(
        port=port, db=db, data_dir=data_dir, users=users_file, grace_s=grace_s, **options
    )
    running = build(opts)
    running.service.loop.poll_s = 0.05
    running.service.loop.start()
    running.service.housekeeping.start()
    try:
        with serving(running.app, port):
            yield Live(running.url, running.token_file.read_text().strip(), running, data_dir)
    finally:
        running.service.housekeeping.stop()
        running.service.intake.close()
        running.service.loop.stop(stop_tasks=stop_tasks)
        running.service.store.dispose()


@pytest.fixture
def live(db_url: str, tmp_path: Path) -> Iterator[Live]:
    """The service on both backends."""
    with live_service(tmp_path / "data", db_url) as service:
        yield service


@pytest.fixture
def live_sqlite(tmp_path: Path) -> Iterator[Live]:
    with live_service(tmp_path / "data") as service:
        yield service
