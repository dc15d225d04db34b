"""Starts ``labhive serve`` processes quickly for the chaos test.

Importing the service's dependencies takes seconds on a loaded 2-core machine, which would
leave no time for 50 kill points. This process imports them once, then for every line
(a JSON argv for ``labhive``) forks a child that runs the ordinary ``labhive`` entry point, and
prints the child's pid. Each child is a separate process running the real service, killed with
SIGKILL by the test; only the import work is shared.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import alembic.command  # noqa: F401 - warm imports: everything `labhive serve` loads
import fastapi  # noqa: F401
import httpx  # noqa: F401
import psutil  # noqa: F401
import pydantic.v1  # noqa: F401 - FastAPI's compatibility check loads it per route
import sqlalchemy  # noqa: F401
import uvicorn
import uvicorn.loops.auto
import uvicorn.protocols.http.auto
import uvicorn.server  # noqa: F401

import labhive.scheduler.core.config
import labhive.scheduler.core.detect
import labhive.scheduler.executors.local
import labhive.scheduler.policies.hived
import labhive.scheduler.service.app
import labhive.scheduler.service.metrics
import labhive.scheduler.service.server  # noqa: F401
from labhive.scheduler import cli

cli.build_parser()  # imports every command module


def main() -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    for line in sys.stdin:
        argv, log = json.loads(line)
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os._exit(cli.main(argv))
        print(pid, flush=True)


if __name__ == "__main__":
    main()
