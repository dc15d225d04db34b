"""HTTP clients, open sockets and CPU seconds of N spawners' polls against one LabHive service.

A hub with a class of 50 holds one ``LabHiveSpawner`` per student server, and each polls the
service every ``poll_interval``. This starts a real service in-process (the tests'
``live_service``: real HTTP on loopback), makes N spawners of N users, each with a running
server job (a ``sleep``), then polls each of them R times, all at once as the hub does, and
prints: httpx clients made, the process's open TCP connections to the service after the polls
(the hub's sockets: each client keeps its own keep-alive pool), and the CPU seconds of the
polls (``time.process_time``, this process only: the hub's side plus the in-process service).

    python benchmarks/bench_spawner_clients.py [--spawners 50] [--rounds 5] [--variant shared]

Variants: ``shared`` is the spawner as it is (one pool for all, ``hub_extension/shared_client``);
``separate`` gives each spawner its own ``Client`` per token, as the spawner did before. Run
the two alternately (one process each) so that the machine's load falls on both alike:

    for i in 1 2 3; do for v in separate shared; do
      python benchmarks/bench_spawner_clients.py --variant $v; done; done
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from service_fixtures import live_service

from labhive.hub_extension import spawner as spawner_module
from labhive.hub_extension.spawner import LabHiveSpawner
from labhive.scheduler.client import Client


def users_file(n: int) -> str:
    lines = ["users:"]
    lines += [f"  u{i}: {{token: tok-u{i:04d}-secret, groups: [all]}}" for i in range(n)]
    return "\n".join([*lines, "groups:", "  all: {vcs: [default]}", ""])


def spawner_of(url: str, admin: str, i: int, tmp: Path) -> LabHiveSpawner:
    from jupyterhub.objects import Hub

    name = f"u{i}"
    user = SimpleNamespace(name=name, escaped_name=name, url=f"/user/{name}/", id=i, settings={})
    return LabHiveSpawner(
        user=user,
        hub=Hub(ip="127.0.0.1", port=1, base_url="/hub/"),
        api_token=f"tok-u{i:04d}-secret",
        service_url=url,
        service_token=admin,
        secrets_dir=str(tmp / "secrets"),
    )


def service_connections(port: int) -> int:
    """This process's established TCP connections to the service's port (client side)."""
    me = psutil.Process()
    return sum(
        1
        for c in me.net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
    )


class SeparateClient(Client):
    """A spawner's client as it was before: a pool of its own (nothing shared to hold)."""

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        yield


def shared_pools() -> str:
    """How many shared pools the spawners hold ("none" on a tree from before them)."""
    try:
        from labhive.hub_extension.shared_client import open_pools
    except ImportError:
        return "none (a client per spawner)"
    return str(len(open_pools()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spawners", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--variant", choices=["shared", "separate"], default="shared")
    args = parser.parse_args()
    if args.variant == "separate":  # the spawner before: a pool of its own per token
        spawner_module.TokenClient = SeparateClient  # type: ignore[misc,assignment]
    # its own uid-range registry (as the tests have), so a run never claims the machine's
    # /var/lib/labhive; and a file the stopping service writes last does not fail the run
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        os.environ["LABHIVE_STATE_DIR"] = tmp
        print(run(args.spawners, args.rounds, Path(tmp)), f"({args.variant})")


def run(n: int, rounds: int, tmp: Path) -> str:
    """N spawners' polls against a service in ``tmp``; what they cost, in words."""
    made: list[int] = []
    real_init = httpx.Client.__init__

    def counting_init(self: httpx.Client, *a: Any, **kw: Any) -> None:
        made.append(1)
        real_init(self, *a, **kw)

    with live_service(tmp / "data", users=users_file(n)) as live:
        admin = live.client()
        port = httpx.URL(live.url).port or 80
        spawners = []
        for i in range(n):
            job = admin.submit(
                name=f"s{i}", command="sleep 600", vc="default", gpus=0, cpu=0.01, memory_mb=1
            )
            s = spawner_of(live.url, live.admin, i, tmp)
            s.job_id = job.id
            spawners.append(s)
        deadline = time.monotonic() + 60
        while len(admin.jobs(state="RUNNING", limit=1000)) < n:
            assert time.monotonic() < deadline, [(j.state, j.data.get("why")) for j in admin.jobs()]
            time.sleep(0.2)
        httpx.Client.__init__ = counting_init  # type: ignore[method-assign]

        async def polls() -> list[int | None]:
            found: list[int | None] = []
            for _ in range(rounds):
                found += await asyncio.gather(*(s.poll() for s in spawners))
            return found

        cpu, wall = time.process_time(), time.monotonic()
        found = asyncio.run(polls())
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        httpx.Client.__init__ = real_init  # type: ignore[method-assign]
        assert found == [None] * len(found), f"a poll said a server ended: {set(found)}"
        sockets = service_connections(port)
        for job in admin.jobs(state="RUNNING", limit=1000):
            admin.cancel(job.id, wait=10)
    return (
        f"spawners {n} rounds {rounds}: httpx clients made {len(made)}, open connections "
        f"to the service {sockets}, CPU {cpu:.2f} s, wall {wall:.2f} s, "
        f"shared pools {shared_pools()}"
    )


if __name__ == "__main__":
    main()
