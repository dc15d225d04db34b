"""Group commit for submissions: many clients' jobs stored in one short transaction.

A submission is answered 201 only after the transaction holding it committed, so an accepted
job survives a kill -9 at any later moment. Under load the writer thread takes every submission
that queued up while the previous transaction ran and stores them together, which turns the
per-submission cost of a commit (and of SQLAlchemy's per-statement work) into a per-batch cost;
at low load a batch is one job and nothing waits.

On PostgreSQL a batch is one statement (``lifecycle.submit_many``) sent on the intake's own
connection in autocommit: one round trip stores and commits it, as durably as a COMMIT would
(``synchronous_commit`` stays on). BEGIN, COMMIT and the pool's pre-ping of a checked-out
connection were three more round trips per batch, each a wait for the server and then for the
GIL, and they made batches take about 10 ms under load.

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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.loop import SchedulerLoop
from labhive.scheduler.service.store import Store, queries
from labhive.scheduler.service.store import transitions as tx

log = logging.getLogger("labhive.service.intake")
MAX_BATCH = 512
#: The intake's own PostgreSQL connection is checked out again (and so pinged by the pool) when
#: it has been idle this long: a server restarted meanwhile costs no submission a 503.
IDLE_RECHECK_S = 1.0


class StoreUnavailable(RuntimeError):
    """The store cannot be reached; nothing of the submission was stored (503)."""


class WaitingCapReached(UserError):
    """The user already has as many jobs waiting in the VC as it allows (422)."""

    def __init__(self, user: str, vc: str, cap: int, waiting: int) -> None:
        super().__init__(
            f"{user} already has {waiting} jobs waiting in VC {vc}, which allows {cap} waiting "
            f"jobs per user (userLimits.maxWaitingJobs); nothing was stored: wait for some to "
            f"start or cancel some, then submit again"
        )


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
        self._conn: Connection | None = None  # PostgreSQL: held across batches, autocommit
        self._conn_used = 0.0
        self._thread = threading.Thread(target=self._run, name="labhive-intake", daemon=True)
        self._thread.start()

    async def submit(self, job: lc.NewJob, spec: JobSpec) -> tuple[int, float]:
        """Store the job; returns (id, submit time) once it is committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[int, float]] = loop.create_future()
        with self._cv:
            if self._closed:
                raise StoreUnavailable()
            if not self._queue:  # else the writer is busy and takes this one with the rest
                self._cv.notify()
            self._queue.append(_Pending(job, spec, future, loop))
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
                    self._release()
                    return
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            self._store(batch)

    def _store(self, batch: list[_Pending]) -> None:
        try:
            batch = self._under_waiting_caps(batch)
        except Exception:  # the count could not be read: store nothing, as below
            log.exception("counting waiting jobs for %d submissions failed", len(batch))
            _answer([(p, StoreUnavailable()) for p in batch])
            return
        if not batch:
            return
        t = time.time()
        try:
            ids = self._insert(batch, t)
        except ROW_FAULTS:  # some row is bad: find it, store the rest
            log.warning(
                "a batch of %d submissions failed; finding the rows the store refuses", len(batch)
            )
            self._store_each(batch, t)
            return
        except Exception as err:  # the store's own failure (out of reach, full): every row alike
            log.exception("storing %d submissions failed", len(batch))
            self._release()
            _answer([(p, _unavailable(err)) for p in batch])
            return
        self._accepted(batch, ids, t)

    def _under_waiting_caps(self, batch: list[_Pending]) -> list[_Pending]:
        """The submissions their VC's ``userLimits.maxWaitingJobs`` lets in; the others are
        answered ``WaitingCapReached``. Counted here, in the one writer thread, from the store
        plus this batch, so concurrent submissions cannot pass the cap together."""
        config = getattr(self.scheduler_loop.scheduler, "config", None)
        vcs = getattr(config, "vcs", {})
        caps = {n: v.user_max_waiting_jobs for n, v in vcs.items() if v.user_max_waiting_jobs}
        if not caps:
            return batch
        waiting: dict[tuple[str, str], int] = {}
        keep, refused = [], []
        for p in batch:
            cap = caps.get(p.job.vc)
            if cap is None:
                keep.append(p)
                continue
            key = (p.job.user, p.job.vc)
            if key not in waiting:
                waiting[key] = self._waiting_jobs(*key)
            if waiting[key] >= cap:
                refused.append((p, WaitingCapReached(p.job.user, p.job.vc, cap, waiting[key])))
                continue
            waiting[key] += 1
            keep.append(p)
        _answer(refused)
        return keep

    def _waiting_jobs(self, user: str, vc: str) -> int:
        with self.store.read() as conn:
            return queries.waiting_count(conn, user, vc)

    def _insert(self, batch: list[_Pending], t: float) -> list[int]:
        new = [p.job for p in batch]
        if self.store.is_sqlite:
            with self.store.write() as conn:
                return tx.submit_many(conn, new, t)
        conn = self._autocommit()
        try:
            ids = tx.submit_many(conn, new, t)  # committed when the server answers
        except ROW_FAULTS:
            conn.rollback()  # SQLAlchemy's side only: the failed statement stored nothing
            raise
        conn.commit()  # likewise: nothing goes to the server
        return ids

    def _autocommit(self) -> Connection:
        """The intake's PostgreSQL connection in autocommit, kept while batches keep coming."""
        now = time.monotonic()
        if self._conn is not None and now - self._conn_used > IDLE_RECHECK_S:
            self._release()
        if self._conn is None:
            conn = self.store.engine.connect()  # the pool pings it
            self._conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        self._conn_used = now
        return self._conn

    def _release(self) -> None:
        """Give the held connection back (invalidated by SQLAlchemy if it broke)."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                conn.close()
            except Exception:  # already broken: nothing to give back
                log.debug("closing the intake's connection failed", exc_info=True)

    def _accepted(self, batch: list[_Pending], ids: list[int], t: float) -> None:
        self.scheduler_loop.submitted_many([(i, p.spec) for p, i in zip(batch, ids, strict=True)])
        _answer([(p, (job_id, t)) for p, job_id in zip(batch, ids, strict=True)])

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
            _answer([(p, StoreUnavailable()) for p in batch])
            return
        self._accepted([p for p, _ in stored], [i for _, i in stored], t)
        _answer(refused)


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
            ids = tx.submit_many(conn, [p.job for p in part], t)
    except ROW_FAULTS:
        if len(part) == 1:
            refused.append((part[0], _unstorable(part[0])))
            return
        half = len(part) // 2
        for piece in (part[:half], part[half:]):
            _insert_part(conn, piece, t, stored, refused)
        return
    stored.extend(zip(part, ids, strict=True))


def _unavailable(err: Exception) -> StoreUnavailable:
    """The answer when the store failed: it carries the cause, so a full disk gets its 507."""
    answer = StoreUnavailable()
    answer.__cause__ = err
    return answer


def _unstorable(p: _Pending) -> Unstorable:
    """The answer for a row the database refused; what it said goes to the log only."""
    ref = secrets.token_hex(6)
    log.exception("submission %s by %s could not be stored", ref, p.job.user)
    return Unstorable(
        f"the job store cannot hold this job (reference {ref} in the service log); "
        "check its names, commands and numbers for unusual characters or sizes"
    )


def _answer(answers: Sequence[tuple[_Pending, tuple[int, float] | Exception]]) -> None:
    """Hand each submission its answer on its event loop: one wake-up of each loop per batch
    (a ``call_soon_threadsafe`` per submission cost the event loop a wake-up each)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Pending, Any]]] = {}
    for p, answer in answers:
        by_loop.setdefault(p.loop, []).append((p, answer))
    for loop, some in by_loop.items():
        loop.call_soon_threadsafe(_settle, some)


def _settle(answers: Sequence[tuple[_Pending, tuple[int, float] | Exception]]) -> None:
    for p, answer in answers:
        if p.future.done():  # the client went away
            continue
        if isinstance(answer, Exception):
            p.future.set_exception(answer)
        else:
            p.future.set_result(answer)
