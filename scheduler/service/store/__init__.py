"""The job store and all of the REST API side's SQL, with typed rows.

- ``tables.py``: the tables (SQLAlchemy Core), what the service must not lose;
- ``engine.py``: ``Store`` (engines, the read and write transactions, migrations), the URL of
  ``--db``;
- ``queries.py``: the REST API's named read queries with ``TypedDict`` rows.

The ``JobService`` facade (``service/job_service.py``) opens the transactions the handlers
need and asks these queries inside them; the loop's own SQL is ``runtime/record.py``'s. The
names below are re-exported because most of the service (and the loop) imports the tables and
``Store`` from here.
"""

from labhive.scheduler.service.store.engine import (
    HEAD_REVISION,
    MIGRATIONS,
    Store,
    database_url,
    job_row,
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
    "job_row",
    "jobs",
    "metadata",
    "node_marks",
    "now",
    "tasks",
]
