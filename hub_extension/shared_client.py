"""One HTTP connection pool per LabHive service for all the spawners of a hub process.

Each ``LabHiveSpawner`` (one per user server) used to hold its own ``httpx.Client``: a hub with
50 students held 50 connection pools and 50 SSL contexts to the same service, each costing
~50 ms of CPU to make and its own keep-alive sockets. Here the spawners of a hub share one
``httpx.Client`` per (service URL, TLS settings, timeout), and each spawner talks through a
``TokenClient``: the LabHive ``Client`` API over the shared pool, with its token put on each
request it sends.

What keeps one user's token from another user's request:

- The pool has no default ``Authorization`` header: the token goes on each request as that
  request's own header (``TokenClient._request``), never into state the pool keeps.
- The pool keeps no cookies (its jar refuses every cookie): a ``Set-Cookie`` in an answer to
  one user's request would otherwise ride on every later request of every user.

Closing: the pool is reference-counted. Each ``TokenClient`` holds a lease from its creation
until ``close()`` (or until it is garbage-collected), and each request holds the pool while it
is in flight (from before it is handed to a worker thread: ``held``), so a spawner that stops
and closes its clients never closes the pool under another spawner's request, nor under its
own request handed to a thread. The last release closes the pool; a later client opens a new
one.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

from labhive.scheduler.client import Client, find_token, service_url
from labhive.scheduler.client.lean_httpx import httpx, verify_for


@dataclass
class SharedPool:
    """One ``httpx.Client`` and who uses it: ``leases`` (clients holding it) and ``in_flight``
    (requests being sent); it is closed when both are 0."""

    key: tuple[str, bool, float]
    http: httpx.Client
    leases: int = 0
    in_flight: int = 0
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


_POOLS: dict[tuple[str, bool, float], SharedPool] = {}
_POOLS_LOCK = threading.Lock()


def _no_cookies() -> CookieJar:
    """A jar that keeps no cookie: the pool is shared by users, a cookie is one user's."""
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


def _acquire(url: str, timeout: float) -> SharedPool:
    """The open pool for ``url`` (a new one if none), with one more lease on it."""
    verify = verify_for(url)
    key = (url, verify is True, float(timeout))  # verify True: certifi's CAs, else none
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            http = httpx.Client(base_url=url, timeout=timeout, verify=verify, cookies=_no_cookies())
            pool = _POOLS[key] = SharedPool(key, http)
        with pool.lock:
            pool.leases += 1
        return pool


def _release(pool: SharedPool, leases: int = 0, in_flight: int = 0) -> None:
    """Give back a lease and/or an in-flight request; close the pool when nobody uses it."""
    with _POOLS_LOCK, pool.lock:
        pool.leases -= leases
        pool.in_flight -= in_flight
        if pool.leases > 0 or pool.in_flight > 0 or pool.closed:
            return
        pool.closed = True
        if _POOLS.get(pool.key) is pool:
            del _POOLS[pool.key]
    pool.http.close()


def open_pools() -> list[SharedPool]:
    """The pools open in this process (what the tests and the benchmark count)."""
    with _POOLS_LOCK:
        return list(_POOLS.values())


class TokenClient(Client):
    """The LabHive ``Client`` over the hub's shared pool, sending ``token`` on each request.

    ``token`` as ``Client`` takes it: empty means the process's own (``find_token``), as a
    spawner's separate client did before."""

    def __init__(self, url: str, token: str | None, timeout: float = 30) -> None:
        # Client.__init__ is not called: it would make a pool of this client's own
        self.url = service_url(url)
        self.token = (find_token(token) or "").strip() or None
        self._auth = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._pool = _acquire(self.url, timeout)
        self._http = self._pool.http
        self._finalizer = weakref.finalize(self, _release, self._pool, 1)

    def close(self) -> None:
        """Give back this client's lease (the pool closes when it was the last, and no
        request is in flight). Its requests still work while the pool is open."""
        self._finalizer()  # runs _release once, then never again (nor at collection)

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold the pool open for a request: taken in the caller's thread before the request
        is handed to a worker thread (``LabHiveSpawner._call``), so that a ``close`` that
        runs between the hand-off and the request cannot close the pool under it."""
        with self._pool.lock:
            if self._pool.closed:
                raise RuntimeError(
                    "the shared LabHive connection pool of this client is closed (the client "
                    "was closed and nobody else held the pool); make a new client"
                )
            self._pool.in_flight += 1
        try:
            yield
        finally:
            _release(self._pool, in_flight=1)

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        with self.held():
            headers = {**(kw.pop("headers", None) or {}), **self._auth}
            return super()._request(method, path, headers=headers, **kw)
