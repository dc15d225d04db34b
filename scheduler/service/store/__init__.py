"""The job store and all of the service's SQL, as named query functions with typed rows.

- ``tables.py``: the tables (SQLAlchemy Core), what the service must not lose;
- ``engine.py``: ``Store`` (engines, the read and write transactions, migrations), the URL of
  ``--db``; ``migrations/``: Alembic's scripts;
- ``queries.py``: the named reads (``TypedDict`` rows for the API's pages);
- ``transitions.py``: the lifecycle's writes (``lifecycle.py`` holds the legal moves);
- ``marks.py``, ``etas.py``, ``usage.py``, ``account_rows.py``, ``journal.py``: node marks, the
  ETA tracker's rows, GPU history and what ``/metrics`` reads, accounts, the journal.

No function here opens a transaction: the caller (the ``JobService`` facade, the intake, the
loop's ``runtime/record.py`` pass, the ETA and monitoring threads) opens one with
``Store.read``/``Store.write`` and passes its connection in. Nothing outside this package
writes SQL (``tests/test_store_holds_the_sql.py``). The names below are re-exported because
most of the service (and the loop) imports the tables and ``Store`` from here.
"""

from labhive.scheduler.service.store.engine import (
    HEAD_REVISION,
    MIGRATIONS,
    Store,
    database_url,
    now,
)
from labhive.scheduler.service.store.tables import (
    accounts,
    allocations,
    events,
    job_etas,
    job_gpu_history,
    jobs,
    metadata,
    node_marks,
    tasks,
)

__all__ = [
    "HEAD_REVISION",
    "MIGRATIONS",
    "Store",
    "accounts",
    "allocations",
    "database_url",
    "events",
    "job_etas",
    "job_gpu_history",
    "jobs",
    "metadata",
    "node_marks",
    "now",
    "tasks",
]
