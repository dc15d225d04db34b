"""Submissions per second over REST, with p50/p99 latency, on SQLite and on PostgreSQL.

Starts ``labhive serve`` on loopback (a virtual 2 x 4 GPU cluster, the local executor) and drives
it with 16 concurrent clients, each on its own keep-alive connection, submitting 1-GPU jobs
(`sleep`, so the first few run and the rest queue, as on a busy cluster). The load generator is
a lean asyncio HTTP/1.1 client so that the figures measure the service, not the client.

    python benchmarks/bench_service.py [--seconds 10] [--clients 16] [--backends sqlite,postgresql]
                                       [--eta on|off] [--journal off,on]

The machine is often shared: each row shows the load average when its run began ("load"), and
"cpu ms" (the service's own CPU time per submission) holds up better than submissions/s on a
loaded machine. ``--eta off`` starts the service without its ETA thread (LABHIVE_ETA=off), to
see what ETAs cost; ``--journal off,on`` runs without the event journal (LABHIVE_JOURNAL=off),
then with it, back to back, and replays each journal with the twin check (events/s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from pg_throwaway import new_database, throwaway_postgres  # noqa: E402
from service_process import serve_process  # noqa: E402

CLUSTER = ROOT / "tests" / "data" / "cluster-2x4.yaml"  # the chaos test's cluster


@contextmanager
def service(tmp: Path, db: str | None, *more: str) -> Iterator[tuple[int, str, int]]:
    """The service on ``tmp``; on the way out, however the run ends, it is stopped and every
    job process it started is gone (checked: ``_no_leftovers``).

    ``--stop-tasks-on-exit``: the service's stop ends the job processes it runs and waits for
    them (by default they run on for the next start to re-adopt). Cancelling the running jobs
    first, as this benchmark once did, only let the next waiting ones start: it left 8
    ``sleep 3600`` running, as the tasks' uid, after every run. ``more``: further options."""
    args = ["--grace-s", "1", "--stop-tasks-on-exit", *(["--db", db] if db else []), *more]
    pid: int | None = None
    try:
        with serve_process(tmp, CLUSTER, *args, stop_timeout_s=60) as served:
            pid = served.proc.pid
            token = (tmp / "data" / "admin.token").read_text().strip()
            yield served.port, token, pid
    finally:
        _no_leftovers(tmp, pid)


def _no_leftovers(tmp: Path, service_pid: int | None) -> None:
    """Kill what outlived the service (it, if its stop timed out; job supervisors and tasks,
    found by their work directory under ``tmp``) and fail the run if there was any."""
    left = [p for p in psutil.process_iter(["pid", "cmdline", "cwd"]) if _ours(p, tmp)]
    if service_pid is not None and psutil.pid_exists(service_pid):
        with contextlib.suppress(psutil.NoSuchProcess):
            left.append(psutil.Process(service_pid))
    if not left:
        return
    for proc in left:  # a psutil handle checks the pid is still that process before signalling
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(left, timeout=10)
    shown = ", ".join(f"{p.pid} {' '.join(p.info.get('cmdline') or [])[:60]}" for p in left)
    raise RuntimeError(f"the benchmark left {len(left)} processes running (killed): {shown}")


def _ours(proc: psutil.Process, tmp: Path) -> bool:
    """A process of this run: its working directory or its command line is under ``tmp``."""
    where = str(tmp)
    cwd = proc.info.get("cwd") or ""
    cmdline = proc.info.get("cmdline") or []
    return cwd.startswith(where) or any(where in arg for arg in cmdline)


async def client(port: int, token: str, stop_at: float, latencies: list[float], errors: list):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps(
        {"name": "bench", "vc": "default", "gpus": 1, "command": "sleep 3600"}
    ).encode()
    head = (
        f"POST /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    request = head + body
    while time.perf_counter() < stop_at:
        began = time.perf_counter()
        writer.write(request)
        status_line = await reader.readline()
        length = 0
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        await reader.readexactly(length)
        latencies.append(time.perf_counter() - began)
        if b" 201 " not in status_line:
            errors.append(status_line)
    writer.close()


async def drive(port: int, token: str, clients: int, seconds: float):
    latencies: list[float] = []
    errors: list = []
    began = time.perf_counter()
    stop_at = began + seconds
    await asyncio.gather(*(client(port, token, stop_at, latencies, errors) for _ in range(clients)))
    return latencies, errors, time.perf_counter() - began


def replay_rate(db_url: str) -> tuple[int, float]:
    """The twin check's replay of the run's journal: (events, events per second)."""
    from labhive.scheduler.service.journal import table, twin
    from labhive.scheduler.service.store import Store

    store = Store(db_url)
    try:
        with store.read() as conn:
            passes = list(table.read(conn))
    finally:
        store.dispose()
    make = twin.policy_maker(str(CLUSTER), "hived", None)
    make({})  # imported once, not timed
    report = twin.replay(passes, make)
    if report.divergence is not None:
        raise RuntimeError(f"the twin check diverged: {report.divergence.text()}")
    return report.steps, report.rate


def measure(backend: str, clients: int, seconds: float, journal: str = "on") -> dict:
    os.environ["LABHIVE_JOURNAL"] = journal  # the service inherits it
    load = os.getloadavg()[0]
    replayed: tuple[int, float] = (0, 0.0)
    with tempfile.TemporaryDirectory(prefix="labhive-bench-") as tmp:
        pg = throwaway_postgres(fsync=True) if backend == "postgresql" else nullcontext(None)
        with pg as server:
            db = new_database(server) if server else None
            with service(Path(tmp), db) as (port, token, pid):
                asyncio.run(drive(port, token, clients, 1.0))  # warm up
                cpu = psutil.Process(pid).cpu_times()
                latencies, errors, elapsed = asyncio.run(drive(port, token, clients, seconds))
                after = psutil.Process(pid).cpu_times()
            if journal == "on":
                replayed = replay_rate(db or f"sqlite:///{tmp}/data/labhive.db")
    used = (after.user + after.system) - (cpu.user + cpu.system)
    latencies.sort()
    return {
        "backend": f"{backend}/j-{journal}",
        "load": round(load, 1),
        "clients": clients,
        "submissions": len(latencies),
        "seconds": round(elapsed, 2),
        "per_second": round(len(latencies) / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p95_ms": round(latencies[int(len(latencies) * 0.95) - 1] * 1000, 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 2),
        "errors": len(errors),
        # what one submission costs the service, whatever else loads the machine
        "cpu_ms": round(used / len(latencies) * 1000, 3),
        "replayed": replayed[0],
        "replay_per_s": round(replayed[1]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--eta", choices=("on", "off"), default="on")
    parser.add_argument(
        "--journal",
        default="on",
        help="on, off, or off,on: the event journal (LABHIVE_JOURNAL), runs back to back",
    )
    args = parser.parse_args()
    os.environ["LABHIVE_ETA"] = args.eta  # the service inherits it
    print(
        f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
        f"{args.clients} clients, {args.seconds:g} s a backend; ETA thread {args.eta}"
    )
    heads: tuple[str, ...] = ("backend", "load", "clients", "subs", "subs/s")
    heads += ("p50 ms", "p95 ms", "p99 ms", "errors", "cpu ms")
    print(f"{heads[0]:<11} " + " ".join(f"{h:>7}" for h in heads[1:]))
    results = {}
    for backend in args.backends.split(","):
        for journal in args.journal.split(","):
            r = results[backend] = measure(backend, args.clients, args.seconds, journal)
            print(
                f"{r['backend']:<11} {r['load']:>7} {r['clients']:>7} {r['submissions']:>7} "
                f"{r['per_second']:>7} {r['p50_ms']:>7} {r['p95_ms']:>7} {r['p99_ms']:>7} "
                f"{r['errors']:>7} {r['cpu_ms']:>7}"
                + (
                    f"  replay: {r['replayed']} events, {r['replay_per_s']}/s"
                    if r["replayed"]
                    else ""
                ),
                flush=True,
            )
    print("cpu ms: the service's CPU time per submission (HTTP, store, scheduler loop)")
    # ratios hold up better than the figures themselves on a busy machine
    if {"sqlite", "postgresql"} <= set(results):
        pg, lite = results["postgresql"], results["sqlite"]
        print(
            f"postgresql/sqlite: subs/s {pg['per_second'] / lite['per_second']:.2f}, "
            f"p99 {pg['p99_ms'] / lite['p99_ms']:.2f}, cpu ms {pg['cpu_ms'] / lite['cpu_ms']:.2f}"
        )
    print(f"load average afterwards {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
