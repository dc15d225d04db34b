"""HTTP clients, open sockets and CPU seconds of N spawners' polls against one LabHive service.

A hub with a class of 50 holds one ``LabHiveSpawner`` per student server, and each polls the
service every ``poll_interval``. This starts a real service in-process (the tests'
``live_service``: real HTTP on loopback), makes N spawners of N users, each with a running
server job (a ``sleep``), then polls each of them R times, all at once as the hub does, and
prints: httpx clients made, the process's open TCP connections to the service after the polls
(the hub's sockets: each client keeps its own keep-alive pool), and the CPU seconds of the
polls (``time.process_time``, this process only: the hub's side plus the in-process service).

    python benchmarks/bench_spawner_clients.py [--spawners 50] [--rounds 5]

Run it on two trees (before/after a change to the spawner's client) for a comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from service_fixtures import live_service

from labhive.hub_extension.spawner import LabHiveSpawner


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
    args = parser.parse_args()
    made: list[int] = []
    real_init = httpx.Client.__init__

    def counting_init(self: httpx.Client, *a: Any, **kw: Any) -> None:
        made.append(1)
        real_init(self, *a, **kw)

    with (
        tempfile.TemporaryDirectory() as tmp,
        live_service(Path(tmp) / "data", users=users_file(args.spawners)) as live,
    ):
        admin = live.client()
        port = httpx.URL(live.url).port or 80
        spawners = []
        for i in range(args.spawners):
            job = admin.submit(
                name=f"s{i}", command="sleep 600", vc="default", gpus=0, cpu=0.01, memory_mb=1
            )
            s = spawner_of(live.url, live.admin, i, Path(tmp))
            s.job_id = job.id
            spawners.append(s)
        deadline = time.monotonic() + 15
        while len(admin.jobs(state="RUNNING", limit=1000)) < len(spawners):
            assert time.monotonic() < deadline, [(j.state, j.data.get("why")) for j in admin.jobs()]
            time.sleep(0.2)
        httpx.Client.__init__ = counting_init  # type: ignore[method-assign]

        async def rounds() -> list[int | None]:
            found: list[int | None] = []
            for _ in range(args.rounds):
                found += await asyncio.gather(*(s.poll() for s in spawners))
            return found

        cpu = time.process_time()
        wall = time.monotonic()
        found = asyncio.run(rounds())
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        httpx.Client.__init__ = real_init  # type: ignore[method-assign]
        assert found == [None] * len(found), f"a poll said a server ended: {set(found)}"
        sockets = service_connections(port)
        print(
            f"spawners {args.spawners} rounds {args.rounds}: httpx clients made {len(made)}, "
            f"open connections to the service {sockets}, CPU {cpu:.2f} s, wall {wall:.2f} s, "
            f"shared pools {shared_pools()}"
        )
        for job in admin.jobs(state="RUNNING", limit=1000):
            job.cancel()


if __name__ == "__main__":
    main()
