"""Group commit for submissions: many clients' jobs stored in one short transaction.

A submission is answered 201 only after the transaction holding it committed, so an accepted
job survives a kill -9 at any later moment. Under load the writer thread takes every submission
that queued up while the previous transaction ran and stores them together, which turns the
per-submission cost of a commit (and of SQLAlchemy's per-statement work) into a per-batch cost;
at low load a batch is one job and nothing waits.

A batch the store refuses is stored again in halves under savepoints down to the bad rows, so
a row that cannot be stored fails only its own submission (a 422 naming a reference in the server
log) and every other one is still committed; only an unreachable store fails them all (503).
No answer carries the database's message: it can hold other users' rows.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import exc as sa_exc

from labhive.scheduler.errors import UserError
from labhive.scheduler.jobs import JobSpec
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.loop import SchedulerLoop
from labhive.scheduler.service.store import Store

log = logging.getLogger("labhive.service.intake")
MAX_BATCH = 512


class StoreUnavailable(RuntimeError):
    """The store cannot be reached; nothing of the submission was stored (503)."""


class Unstorable(UserError):
    """The store refused this one job's row (a value it cannot hold); nothing was stored."""


#: Errors that say the database is out of reach, not that one row is bad.
UNREACHABLE = (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError)
#: Errors that say a row holds a value the database cannot store (too long, out of range, not
#: encodable, null where required); any other error is the store's, and fails the batch (503).
ROW_FAULTS = (sa_exc.DataError, sa_exc.IntegrityError, ValueError, OverflowError, TypeError)


@dataclass
class _Pending:
    job: lc.NewJob
    spec: JobSpec
    future: asyncio.Future[tuple[int, float]]
    loop: asyncio.AbstractEventLoop


class Intake:
    def __init__(self, store: Store, scheduler_loop: SchedulerLoop) -> None:
        self.store = store
        self.scheduler_loop = scheduler_loop
        self._queue: list[_Pending] = []
        self._cv = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="labhive-intake", daemon=True)
        self._thread.start()

    async def submit(self, job: lc.NewJob, spec: JobSpec) -> tuple[int, float]:
        """Store the job; returns (id, submit time) once it is committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[int, float]] = loop.create_future()
        with self._cv:
            if self._closed:
                raise StoreUnavailable()
            self._queue.append(_Pending(job, spec, future, loop))
            self._cv.notify()
        return await future

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if not self._queue and self._closed:
                    return
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            self._store(batch)

    def _store(self, batch: list[_Pending]) -> None:
        t = time.time()
        try:
            ids = self._insert(batch, t)
        except ROW_FAULTS:  # some row is bad: find it, store the rest
            log.warning(
                "a batch of %d submissions failed; finding the rows the store refuses", len(batch)
            )
            self._store_each(batch, t)
            return
        except Exception:  # the store's own failure (out of reach, broken): every row alike
            log.exception("storing %d submissions failed", len(batch))
            for p in batch:
                p.loop.call_soon_threadsafe(_fail, p.future, StoreUnavailable())
            return
        self._accepted(batch, ids, t)

    def _insert(self, batch: list[_Pending], t: float) -> list[int]:
        with self.store.write() as conn:
            return lc.submit_many(conn, [p.job for p in batch], t)

    def _accepted(self, batch: list[_Pending], ids: list[int], t: float) -> None:
        for p, job_id in zip(batch, ids, strict=True):
            self.scheduler_loop.submitted(job_id, p.spec)
            p.loop.call_soon_threadsafe(_resolve, p.future, (job_id, t))

    def _store_each(self, batch: list[_Pending], t: float) -> None:
        """Find the bad rows by halving the batch under savepoints, all in one transaction (one
        commit, and k bad rows among n cost about k log n tries, not n): a refused row is
        rolled back alone and answered alone."""
        stored: list[tuple[_Pending, int]] = []
        refused: list[tuple[_Pending, Unstorable]] = []
        half = len(batch) // 2
        try:
            with self.store.write() as conn:
                for part in (batch[:half], batch[half:]):
                    _insert_part(conn, part, t, stored, refused)
        except Exception:
            log.exception("storing %d submissions around a refused row failed", len(batch))
            for p in batch:
                p.loop.call_soon_threadsafe(_fail, p.future, StoreUnavailable())
            return
        self._accepted([p for p, _ in stored], [i for _, i in stored], t)
        for p, err in refused:
            p.loop.call_soon_threadsafe(_fail, p.future, err)


def _insert_part(
    conn: Any,
    part: list[_Pending],
    t: float,
    stored: list[tuple[_Pending, int]],
    refused: list[tuple[_Pending, Unstorable]],
) -> None:
    if not part:
        return
    try:
        with conn.begin_nested():
            ids = lc.submit_many(conn, [p.job for p in part], t)
    except ROW_FAULTS:
        if len(part) == 1:
            refused.append((part[0], _unstorable(part[0])))
            return
        half = len(part) // 2
        for piece in (part[:half], part[half:]):
            _insert_part(conn, piece, t, stored, refused)
        return
    stored.extend(zip(part, ids, strict=True))


def _unstorable(p: _Pending) -> Unstorable:
    """The answer for a row the database refused; what it said goes to the log only."""
    ref = secrets.token_hex(6)
    log.exception("submission %s by %s could not be stored", ref, p.job.user)
    return Unstorable(
        f"the job store cannot hold this job (reference {ref} in the service log); "
        "check its names, commands and numbers for unusual characters or sizes"
    )


def _resolve(future: asyncio.Future[tuple[int, float]], value: tuple[int, float]) -> None:
    if not future.done():
        future.set_result(value)


def _fail(future: asyncio.Future[tuple[int, float]], err: Exception) -> None:
    if not future.done():
        future.set_exception(err)
