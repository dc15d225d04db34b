"""Bytecodes per job, per function, of a policy (or of a whole simulation): an exact count.

Why: on a shared machine CPU seconds move by +-10% with other tenants' load, and cProfile
charges each call so much that it overstates functions that call a lot and hides loops (a
best-fit scan that was a fifth of HiveD's work looked like a twentieth). Counting the
interpreter's opcode events (``sys.settrace`` with ``f_trace_opcodes``) gives the same figures
on every run, so a change can be kept only if its count drops (the eighth session's method for
issue 20; cachegrind's instruction counts, with ``PYTHONHASHSEED=0 setarch -R``, confirm them).

By default the policy alone: the simulation of the first ``--jobs`` jobs of the synthetic
Philly trace (on Philly's machine list) records the events the policy is given; a fresh policy
is then given the same events, untraced up to the ``--skip``-th submission (the cluster filling
up) and traced after it. ``--whole`` traces the whole simulation instead (the simulator's own
layer included), from the ``--skip``-th submission on (0 by default with ``--whole``). Tracing
is slow: about 40 s for 20,000 traced jobs of the policy alone.

    .venv/bin/python benchmarks/count_bytecodes.py --policy hived --jobs 30000 --skip 10000
    .venv/bin/python benchmarks/count_bytecodes.py --policy fifo --jobs 5000 --whole
    .venv/bin/python benchmarks/count_bytecodes.py --policy drf --contended --jobs 8000 --skip 4000
    .venv/bin/python benchmarks/count_bytecodes.py --policy las --contended --jobs 20000 \
        --skip 10000 --whole

``--bench GPUS``: the steady state of ``bench_scheduler.py`` at that size instead, fair share
off and on over the same workload in one run (``--users``, ``--fair-share``, ``--events``):
bytecodes per decision of each, their ratio (the exact form of the benchmark's on/off figure)
and the functions where on spends more.

    .venv/bin/python benchmarks/count_bytecodes.py --bench 4096 --events 1000

``--upto`` (with ``--whole``): stop counting when the last job of ``--jobs`` is taken, so
the figure is the steady state of jobs ``--skip`` to ``--jobs`` at that queue depth, without
the drain of the queue after the last arrival and the summary (both counted once per run, so
a slice of 2,000 jobs charges each job with what a 1M run spreads over 1M). Printed also per
job *started* while counting: on a contended cluster fewer jobs start than arrive in a
window (the queue grows), so per arrival understates a job's whole cost.

``--contended``: the squeezed cluster of ``bench_simulator.py --contended`` (the first 360
machines, Helios' VC weights), where jobs queue.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

# Bytecodes are counted in the sources: the compiled modules (scheduler/native/) run none.
os.environ["LABHIVE_PURE"] = "1"
ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "philly"
TRACE = DATA / "synthetic" / "synthetic_cluster_job_log.json.gz"
CLUSTER = DATA / "cluster_machine_list"
VCS = DATA / "philly_vc_nodes_helios.csv"
CONTENDED_MACHINES = 360  # as bench_simulator.py --contended


def tracer(counts: Counter[str]) -> Any:
    """A ``sys.settrace`` function counting opcodes per function (file:name)."""

    def call(frame: FrameType, event: str, arg: object) -> Any:
        frame.f_trace_opcodes = True
        key = f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}"

        def local(frame: FrameType, event: str, arg: object) -> Any:
            if event == "opcode":
                counts[key] += 1
            return local

        return local

    return call


def trace_from_here(counts: Counter[str]) -> None:
    """Start counting now, in the frames already running too (the simulation's loop, which
    ``sys.settrace`` alone would leave out: it only traces frames entered after it)."""
    call = tracer(counts)
    sys.settrace(call)
    frame = sys._getframe(1)
    while frame is not None:
        frame.f_trace = call(frame, "call", None)
        frame = frame.f_back  # type: ignore[assignment]


def stop_tracing() -> None:
    """Stop counting now, in the frames already running too."""
    sys.settrace(None)
    frame = sys._getframe(1)
    while frame is not None:
        frame.f_trace = None  # type: ignore[assignment]
        frame = frame.f_back  # type: ignore[assignment]


def skipping(jobs: list[Any], skip: int, counts: Counter[str], upto: bool = False) -> Any:
    """The jobs, counting from the ``skip``-th one's arrival on (``--whole --skip``); with
    ``upto``, only until the last one is taken (``--upto``)."""
    for n, job in enumerate(jobs):
        if n == skip:
            trace_from_here(counts)
        yield job
    if upto:
        stop_tracing()


def main() -> int:
    from labhive.scheduler.core.errors import UserError

    try:
        return count()
    except UserError as err:  # an unknown policy or option: say so, exit 2
        print(f"count_bytecodes: {err}", file=sys.stderr)
        return 2


def count() -> int:
    from labhive.scheduler.core.model import Start, Submit
    from labhive.scheduler.policies import get_policy
    from labhive.scheduler.sim import runner
    from labhive.scheduler.sim.machines import load_sim_cluster
    from labhive.scheduler.sim.traces import load_trace

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default="hived")
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument(
        "--skip", type=int, help="untraced first submissions (default 10,000; --whole: 0)"
    )
    parser.add_argument("--whole", action="store_true", help="trace the whole simulation")
    parser.add_argument(
        "--upto",
        action="store_true",
        help="--whole: stop counting at the last job's arrival (the steady state at that "
        "depth, without the queue's drain and the summary, which a 1M run spreads over 1M)",
    )
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--contended", action="store_true", help="the squeezed cluster")
    parser.add_argument("--bench", type=int, help="GPUs: count bench_scheduler.py's run")
    parser.add_argument("--users", type=int, default=20, help="--bench: users")
    parser.add_argument("--fair-share", default="7d", help="--bench: the half-life when on")
    parser.add_argument("--events", type=int, default=1000, help="--bench: finish+submit pairs")
    args = parser.parse_args()
    if args.bench:
        return count_bench(args)
    if args.contended:
        config, _ = load_sim_cluster(CLUSTER, VCS, CONTENDED_MACHINES)
    else:
        config, _ = load_sim_cluster(CLUSTER)
    jobs = load_trace(TRACE).jobs[: args.jobs]
    counts: Counter[str] = Counter()
    if args.whole:
        skip = args.skip or 0
        starts = [0]  # jobs started while counting: on a contended cluster fewer than arrived
        made = runner.get_policy  # type: ignore[attr-defined]

        def starting(*a: Any, **k: Any) -> Any:
            policy = made(*a, **k)
            handle, batch = policy.handle, getattr(policy, "handle_batch", None)

            def _uncounted_one(event: Any) -> Any:
                out = handle(event)
                if sys.gettrace() is not None:
                    starts[0] += sum(isinstance(d, Start) for d in out)
                return out

            def _uncounted_many(events: Any) -> Any:
                out = batch(events)  # type: ignore[misc]
                if sys.gettrace() is not None:
                    starts[0] += sum(isinstance(d, Start) for d in out)
                return out

            setattr(policy, "handle", _uncounted_one)  # noqa: B010
            if batch is not None:
                setattr(policy, "handle_batch", _uncounted_many)  # noqa: B010
            return policy

        setattr(runner, "get_policy", starting)  # noqa: B010
        runner.run_policy(
            args.policy, config, skipping(jobs, skip, counts, args.upto), keep_jobs=False
        )
        setattr(runner, "get_policy", made)  # noqa: B010
        sys.settrace(None)
        for key in [k for k in counts if k.startswith("count_bytecodes.py:")]:
            del counts[key]  # this script's own (the start counting above, ``skipping``)
        per = max(1, len(jobs) - skip)
        if args.upto:
            total = sum(counts.values())
            print(
                f"{args.policy}: {starts[0]:,} jobs started while counting; "
                f"{total / max(1, starts[0]):,.0f} bytecodes per job started"
            )
    else:
        args.skip = 10_000 if args.skip is None else args.skip
        events: list[list[Any]] = []
        made = runner.get_policy  # type: ignore[attr-defined]

        def recording(*a: Any, **k: Any) -> Any:  # the policy, the events it is given kept
            policy = made(*a, **k)
            handle, batch = policy.handle, getattr(policy, "handle_batch", None)

            def one(event: Any) -> Any:
                events.append([event])
                return handle(event)

            def many(batch_events: Any) -> Any:
                events.append(list(batch_events))
                return batch(batch_events)  # type: ignore[misc]

            setattr(policy, "handle", one)  # noqa: B010 (an instance's method, replaced)
            if batch is not None:
                setattr(policy, "handle_batch", many)  # noqa: B010
            return policy

        setattr(runner, "get_policy", recording)  # noqa: B010
        runner.run_policy(args.policy, config, iter(jobs), keep_jobs=False)
        setattr(runner, "get_policy", made)  # noqa: B010
        name, options = runner.parse_policy(args.policy)
        policy: Any = get_policy(name, config, **options)
        submitted = 0
        for batch in events:
            if submitted >= args.skip and sys.gettrace() is None:
                sys.settrace(tracer(counts))
            submitted += sum(isinstance(e, Submit) for e in batch)
            for e in batch:
                if isinstance(e, Submit):
                    policy.check(e.spec)
            if len(batch) == 1:
                policy.handle(batch[0])
            else:
                policy.handle_batch(batch)
        sys.settrace(None)
        per = max(1, submitted - args.skip)
    total = sum(counts.values())
    print(f"{args.policy}: {total / per:,.0f} bytecodes per job over {per:,} jobs")
    for key, n in counts.most_common(args.top):
        print(f"{n / per:9.1f} {100 * n / total:5.1f}%  {key}")
    return 0


def count_bench(args: argparse.Namespace) -> int:
    """Bytecodes per decision of ``bench_scheduler.bench``, fair share off and on."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_scheduler import bench

    from labhive.scheduler.core.time_limits import parse_time_limit

    half_life = parse_time_limit(args.fair_share)
    per: dict[str, float] = {}
    made: dict[str, float] = {}
    counts: dict[str, Counter[str]] = {}
    for mode, life in (("off", None), ("on", half_life)):
        counts[mode] = Counter()
        rate, per_event, _ = bench(
            args.bench,
            users=args.users,
            half_life=life,
            events=args.events,
            trace=tracer(counts[mode]),
        )
        made[mode] = rate * per_event * 2 * args.events / 1e6  # decisions
        per[mode] = sum(counts[mode].values()) / made[mode]
        print(f"fair share {mode}: {made[mode]:,.0f} decisions, {per[mode]:,.0f} bytecodes each")
    print(f"on/off, decisions per bytecode: {per['off'] / per['on']:.1%}")
    print("bytecodes per decision, on minus off, per function:")
    keys = counts["on"].keys() | counts["off"].keys()
    extra = {k: counts["on"][k] / made["on"] - counts["off"][k] / made["off"] for k in keys}
    for key in sorted(extra, key=lambda k: -abs(extra[k]))[: args.top]:
        print(f"{extra[key]:9.1f}  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
