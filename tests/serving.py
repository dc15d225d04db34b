"""The one way tests serve an ASGI app (the LabHive service) over real HTTP in this process."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from waiting import wait_until


@contextmanager
def serving(app: Any, port: int = 0, timeout: float = 30.0) -> Iterator[int]:
    """Serves ``app`` on 127.0.0.1 (``port`` 0: any free one) in a thread and yields the port;
    stops the server on exit."""
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), "the service to start", timeout)
    assert server.started, "the service did not start"
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=10)
