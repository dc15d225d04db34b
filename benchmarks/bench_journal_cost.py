"""What the event journal costs per submission, as exact counts: the service's bytecodes.

Why counts: on the shared 2-core machine the service's CPU seconds per submission move by
+-20% between two runs of ``bench_service.py`` (other tenants), more than the journal costs.
The interpreter's opcode events (``sys.settrace`` with ``f_trace_opcodes``, as
``count_bytecodes.py`` counts a policy's) are the same on every run.

The real service is built in-process (``server.build``: the 2 x 4 cluster of the chaos test,
SQLite, local executor) twice, with the journal off (``LABHIVE_JOURNAL=off``) and on, and given
the same ``--jobs`` submissions over REST (1-GPU ``sleep 3600`` jobs, alternately vc1 and
default: the first 8 start, the rest queue). The loop thread is not started: after each
submission this script runs its pass (``loop.step``) itself, so every pass is one submission's.
Counted, per submission: the pass's bytecodes (``pass``: what the journal adds to, its events
encoded and its row inserted) and every thread's while the submission is posted and its pass
runs (``service``: the HTTP request, the intake's store write, the pass; not the launches,
whose waits on processes follow the clock). C work (SQLite, the JSON encoder's C part) is not in the
counts; its thread CPU time is printed beside them (noisy).

    .venv/bin/python benchmarks/bench_journal_cost.py [--jobs 200]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from pg_throwaway import free_port  # noqa: E402
from service_fixtures import USERS  # noqa: E402
from serving import serving  # noqa: E402

CLUSTER = ROOT / "tests" / "data" / "cluster-2x4.yaml"
TOKENS = {"vc1": "alice-token-123", "default": "bob-token-4567"}  # (service_fixtures.USERS)


class Opcodes:
    """Counts opcode events while on (``threading.settrace`` reaches the service's threads)."""

    def __init__(self) -> None:
        self.count = 0
        self.on = False

    def tracer(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        frame.f_trace_opcodes = True
        return self._local

    def _local(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        if event == "opcode" and self.on:
            self.count += 1
        return self._local


def measure(journal: str, jobs: int) -> dict[str, float]:
    from labhive.scheduler.client import Client
    from labhive.scheduler.service.server import ServeOptions, build

    os.environ["LABHIVE_JOURNAL"] = journal
    os.environ["LABHIVE_ETA"] = "off"  # the forecast thread's work is the ETA's, not this
    with tempfile.TemporaryDirectory(prefix="labhive-journal-cost-") as tmp:
        # Its uid range claimed in a registry of its own, not the machine's (/var/lib/labhive),
        # where it would stand in the way of a real service started meanwhile.
        os.environ["LABHIVE_STATE_DIR"] = tmp
        data = Path(tmp) / "data"
        data.mkdir()
        users = data / "users.yaml"
        users.write_text(USERS)
        users.chmod(0o600)
        port = free_port()
        running = build(
            ServeOptions(port=port, data_dir=data, users=users, grace_s=1.0, cluster=str(CLUSTER))
        )
        loop = running.service.loop
        assert loop.journal == (journal == "on")
        loop.recover()
        loop.step()  # the fresh policy's first pass (its journal row), not counted
        all_threads, one_pass = Opcodes(), Opcodes()
        threading.settrace(all_threads.tracer)
        sys.settrace(all_threads.tracer)
        pass_cpu, pass_total = 0.0, 0
        try:
            with serving(running.app, port):
                clients = {vc: Client(running.url, token) for vc, token in TOKENS.items()}
                for i in range(jobs):
                    all_threads.on = True
                    vc = "vc1" if i % 2 else "default"
                    clients[vc].submit(command="sleep 3600", vc=vc, gpus=1, name=f"j{i}")
                    one_pass.count = 0
                    sys.settrace(_both(all_threads, one_pass))
                    one_pass.on = True
                    began = time.thread_time()
                    loop.step()
                    pass_cpu += time.thread_time() - began
                    one_pass.on = False
                    all_threads.on = False
                    sys.settrace(all_threads.tracer)
                    loop._actuator.wait_idle(timeout=30)  # the launches, off the pass: not
                    # counted (they wait on processes: their polls follow the clock)
                    loop.step()  # their messages (no policy event: no journal row), not counted
                    pass_total += one_pass.count
                for client in clients.values():
                    client.close()
        finally:
            sys.settrace(None)
            threading.settrace(None)  # type: ignore[arg-type]
            loop.stop(stop_tasks=True)
            running.service.intake.close()
            running.service.store.dispose()
    return {
        "service_opcodes": all_threads.count / jobs,
        "pass_opcodes": pass_total / jobs,
        "pass_cpu_ms": pass_cpu / jobs * 1000,
    }


def _both(a: Opcodes, b: Opcodes) -> Callable[..., Any]:
    """A tracer counting into ``a`` and ``b`` (the pass's opcodes are the service's too)."""

    def local(frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
        if event == "opcode":
            if a.on:
                a.count += 1
            if b.on:
                b.count += 1
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
        frame.f_trace_opcodes = True
        return local

    return tracer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    args = parser.parse_args()
    # A first run, not reported: the process's first requests and passes import modules and
    # fill caches (seen as 5% more bytecodes in whichever run came first).
    measure("on", min(args.jobs, 20))
    off = measure("off", args.jobs)
    on = measure("on", args.jobs)
    print(f"{args.jobs} submissions, 2 x 4 cluster, SQLite; per submission:")
    print(f"{'':<28} {'journal off':>12} {'journal on':>12} {'added':>8}")
    for key, label in (
        ("service_opcodes", "service bytecodes (all)"),
        ("pass_opcodes", "scheduling pass bytecodes"),
        ("pass_cpu_ms", "pass thread CPU ms (noisy)"),
    ):
        added = (on[key] - off[key]) / off[key] if off[key] else 0.0
        print(f"{label:<28} {off[key]:>12,.1f} {on[key]:>12,.1f} {added:>+8.1%}")


if __name__ == "__main__":
    main()
