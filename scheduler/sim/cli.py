"""``labhive simulate``: replay a job trace under one or more policies and compare them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.core.states import JobState

if TYPE_CHECKING:
    from collections.abc import Sequence

    from labhive.scheduler.sim.runner import PolicyRun

SYNTHETIC_NOTE = (
    "NOTE: this trace is SYNTHETIC (generated in the Philly format); its metrics are not "
    "Philly results."
)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="replay a job trace under scheduling policies, in virtual time",
        description=(
            "Replay a job trace (Philly cluster_job_log JSON, plain or .gz; the derived Philly "
            "CSV; Tiresias' *_job.csv; Helios' cluster_log.csv; or the generic CSV: "
            "submit_time,vc,user,gpus,duration,status) on a cluster "
            "(a HiveD config, or a machine list such as Philly's cluster_machine_list) under "
            "one or more policies, and compare JCT, queuing delay, makespan, utilization, "
            "fragmentation and fairness. The Alibaba GPU trace v2023 (openb_pod_list_*.csv "
            "with --cluster openb_node_list_*.csv) replays on a GPU-sharing model with the "
            "policies fifo, sjf, firstfit, bestfit and fgd."
        ),
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", help="trace file")
    src.add_argument(
        "--scenario",
        help="a scenario file (as labhive replay takes) instead of a trace; its cluster is used",
    )
    p.add_argument("--cluster", help="HiveD cluster config or machine list (with --trace)")
    p.add_argument(
        "--policy",
        action="append",
        help="policy, optionally with options: NAME or NAME:key=value,... (repeat to compare; "
        "required unless --model names one)",
    )
    p.add_argument(
        "--model",
        choices=("tiresias", "helios"),
        help="a peer simulator's model: tiresias = Tiresias' dlas-gpu (las:promote_knob=0,"
        "quantum=0,same_queue=true --checkpoint 1 --locality anywhere); helios = each VC "
        "owns whole nodes (POLICY:vc_nodes=true; fifo, sjf or las, default fifo)",
    )
    p.add_argument("--vcs", help="CSV of VC weights (vc,nodes) to split a machine list into VCs")
    p.add_argument(
        "--per-vc",
        action="store_true",
        help="FIFO, SJF, LAS: a queue per VC, each VC running at most its quota (Helios' "
        "model) instead of one pool for all",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--out", type=Path, help="write per-job CSVs, summary.json and figures here")
    p.add_argument("--limit", type=int, help="replay only the first N jobs (by submit time)")
    p.add_argument(
        "--machines",
        type=int,
        help="use only the first N machines of a machine or node list (a slice where jobs "
        "contend; the whole list of a big cluster often leaves every policy idle)",
    )
    p.add_argument(
        "--fill",
        nargs="?",
        const="labhive",
        choices=("labhive", "paper"),
        help="Alibaba trace: also run the fragmentation paper's experiment (tasks arrive and "
        "never leave) and print the GPU share left unallocated as load grows; '--fill paper': "
        "the paper's workload, measure, scores and baselines (docs/policies.md)",
    )
    p.add_argument("--seeds", type=int, default=1, help="--fill: seeds to run (mean, spread)")
    p.add_argument(
        "--variant",
        help="Alibaba trace: build the FGD paper's variant NAME (gpushareN, multigpuN, "
        "gpuspecN; e.g. gpushare80) from the default pod list, drawn with --seed",
    )
    p.add_argument(
        "--frag",
        choices=("paper", "labhive"),
        default="paper",
        help="--fill paper: the fragmentation measure (default the paper's)",
    )
    p.add_argument("--sample", type=float, help="replay each job with this probability")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed for --sample and --fill (the first of --seeds; default 0)",
    )
    p.add_argument(
        "--checkpoint",
        type=float,
        help="seconds between checkpoints: a preempted job keeps progress up to its last one "
        "(default: none, it reruns its whole duration)",
    )
    p.add_argument(
        "--restart-cost",
        type=float,
        default=0.0,
        help="seconds a preempted job spends restoring its state when it restarts (added to "
        "its remaining work and counted as wasted GPU time; default 0)",
    )
    p.add_argument(
        "--locality",
        choices=("consolidated", "anywhere"),
        help="gang placement of the queue policies (default consolidated; HiveD places its own)",
    )
    p.add_argument(
        "--service-time",
        choices=("run", "span"),
        default="run",
        help="Philly traces: replay the summed attempt run times (run, default) or first start "
        "to last end (span)",
    )
    p.add_argument("--priority", default="prod", help="priority of trace jobs (default prod)")
    p.add_argument("--strict", action="store_true", help="reject the trace on a malformed row")
    p.add_argument("--quiet", action="store_true", help="no progress bar or notes on stderr")
    p.set_defaults(func=run)
    r = subparsers.add_parser(
        "trace-report",
        help="a trace's job statistics beside a real cluster's (AcmeTrace cluster_summary.csv)",
        description=(
            "Compare a job trace's statistics (median and average run time, GPUs per job, "
            "completed/cancelled/failed shares) with a real cluster's row of AcmeTrace's "
            "cluster_summary.csv (default row: Philly), e.g. to check a synthetic trace."
        ),
    )
    r.add_argument("trace", help="trace file (any format labhive simulate reads)")
    r.add_argument("--against", required=True, help="AcmeTrace cluster_summary.csv")
    r.add_argument("--row", default="Philly", help="the cluster to compare with (default Philly)")
    r.add_argument("--json", action="store_true", help="print JSON")
    r.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    from labhive.scheduler.sim.compare import comparison, comparison_text
    from labhive.scheduler.sim.traces import load_trace

    trace = load_trace(args.trace)
    rows = comparison(trace, args.against, args.row)
    if args.json:
        print(json.dumps({"trace": str(args.trace), "synthetic": trace.synthetic, "rows": rows}))
        return 0
    if trace.synthetic:
        print(SYNTHETIC_NOTE)
    print(f"trace: {args.trace} ({trace.format}): {len(trace.jobs):,} runnable jobs")
    print(comparison_text(rows, args.row))
    return 0


def run(args: argparse.Namespace) -> int:
    from labhive.scheduler.core.jobs import parse_priority
    from labhive.scheduler.sim.machines import load_sim_cluster
    from labhive.scheduler.sim.runner import run_policy
    from labhive.scheduler.sim.traces import JobStream, load_trace, scan_trace
    from labhive.scheduler.sim.waste import waste_warnings

    if args.limit is not None and args.limit < 1:
        raise UserError("--limit must be at least 1")
    if args.sample is not None and not 0 < args.sample <= 1:
        raise UserError("--sample must be a probability in (0, 1]")
    if args.checkpoint is not None and args.checkpoint <= 0:
        raise UserError("--checkpoint must be a positive number of seconds")
    if args.machines is not None and args.machines < 1:
        raise UserError("--machines must be at least 1")
    if args.restart_cost < 0:
        raise UserError("--restart-cost must be 0 or more seconds")
    _apply_model(args)
    if args.scenario is not None:
        return _run_scenario(args)
    if args.cluster is None:
        raise UserError("--trace needs --cluster (a HiveD config or a machine list)")
    from labhive.scheduler.sim.openb import is_node_list, is_pod_list

    if is_pod_list(args.trace):
        from labhive.scheduler.sim.sharing_cli import run_sharing

        _sharing_flags(args)
        return run_sharing(args)
    if is_node_list(args.cluster):
        raise UserError(
            f"{args.cluster} is the Alibaba node list: it goes with its pod list "
            "(openb_pod_list_*.csv); this trace needs a HiveD config or a machine list"
        )
    if args.fill or args.variant:
        flag = "--fill" if args.fill else "--variant"
        raise UserError(f"{flag} applies to the Alibaba trace (openb_pod_list_*.csv)")
    if args.per_vc:
        args.policy = [_per_vc(p) for p in args.policy]
    try:
        priority = parse_priority(args.priority)
    except ValueError as err:
        raise UserError(f"--priority: {err}") from None
    if not args.quiet:
        for warning in _thrash_warnings(args.policy, args.checkpoint):
            print(warning, file=sys.stderr, flush=True)
    config, cluster_note = load_sim_cluster(args.cluster, args.vcs, args.machines)
    # A file in submit order streams (a million jobs never sit in memory); another is sorted.
    kw = {"strict": args.strict, "service_time": args.service_time, "limit": args.limit}
    scanned = scan_trace(args.trace, **kw)
    if scanned is None:
        trace = load_trace(args.trace, **kw)
        jobs: Sequence[Any] | JobStream = trace.jobs
    else:
        trace, jobs = scanned
    notes = _notes(args, trace, cluster_note, len(jobs))
    runs = [
        run_policy(
            policy,
            config,
            jobs,
            locality=args.locality,
            checkpoint=args.checkpoint,
            restart_cost=args.restart_cost,
            priority=priority,
            sample=args.sample,
            seed=args.seed,
            progress=not args.quiet,
            keep_jobs=args.out is not None,  # per-job CSVs and figures need the jobs
        )
        for policy in args.policy
    ]
    if runs and not any(_queued(r) for r in runs):
        notes.append(
            "no job ever queued under any policy: the cluster is larger than this load needs, "
            "so every policy gives the same figures; try --machines N for a slice where jobs "
            "contend"
        )
    notes.extend(waste_warnings(runs, args.checkpoint, args.restart_cost))
    left_out = runs[0].left_out if runs else {}
    if left_out:
        notes.append(
            "not replayed on this cluster: "
            + ", ".join(f"{n} ({why})" for why, n in sorted(left_out.items()))
        )
    meta = _meta(args, trace, cluster_note, notes, dict(left_out))
    return _report(args, runs, meta, notes)


def _apply_model(args: argparse.Namespace) -> None:
    """``--model``: the peer's settings in ``args``; without it, ``--policy`` is required."""
    if args.model is None:
        if not args.policy:
            raise UserError("give --policy NAME (or --model tiresias|helios)")
        return
    from labhive.scheduler.sim.presets import apply_model

    if args.model == "helios" and args.per_vc:
        raise UserError(
            "--model helios gives each VC its own nodes; --per-vc (a GPU cap per VC on a shared "
            "pool) is another model: give one"
        )
    args.policy, args.checkpoint, args.locality = apply_model(
        args.model, args.policy, args.checkpoint, args.locality
    )


def _queued(run: PolicyRun) -> bool:
    """Whether any job ever waited (to start, or at the end), or was rejected."""
    overall = run.summary["overall"]
    return (
        bool(overall["queue_delay_avg"])
        or run.result.table.count(JobState.WAITING, JobState.REJECTED) > 0
    )


PER_VC_POLICIES = ("fifo", "sjf", "las")


def _sharing_flags(args: argparse.Namespace) -> None:
    """The Alibaba trace has no VCs, users or preemption: say which flags do not apply."""
    unused = [
        flag
        for flag, on in (
            ("--model", args.model is not None),
            ("--per-vc", args.per_vc),
            ("--vcs", args.vcs is not None),
            ("--checkpoint", args.checkpoint is not None),
            ("--restart-cost", args.restart_cost > 0),
            ("--sample", args.sample is not None),
            ("--locality", args.locality is not None),
        )
        if on
    ]
    if unused:
        raise UserError(
            f"{', '.join(unused)} do(es) not apply to the Alibaba trace (no VCs, no "
            "preemption); it takes --machines, --limit, --fill, --json, --out"
        )


def _per_vc(policy: str) -> str:
    """``--per-vc``: the policy with ``per_vc=true`` (FIFO, SJF and LAS offer it)."""
    name, _, rest = policy.partition(":")
    if name not in PER_VC_POLICIES:
        raise UserError(
            f"--per-vc applies to {', '.join(PER_VC_POLICIES)}; {name} "
            + ("keeps VC quotas already" if name in ("capacity", "hived") else "has no per-VC mode")
        )
    return f"{name}:{rest + ',' if rest else ''}per_vc=true"


def _thrash_warnings(policies: list[str], checkpoint: float | None) -> list[str]:
    """Said before the run, which may not end for minutes: LAS with starvation promotion
    and no checkpoints thrashes (a promoted job preempts others, which lose all their
    progress, are promoted back in turn and preempt it: on 400 jobs of 40 machines, 39,000
    wake-ups for 240 jobs ended, the simulated clock running on past the last arrival)."""
    from labhive.scheduler.sim.runner import parse_policy

    out = []
    for policy in policies:
        name, options = parse_policy(policy)
        try:
            knob = float(options.get("promote_knob", 0))
        except ValueError:
            continue  # the policy itself says what is wrong with it
        if name == "las" and knob > 0 and checkpoint is None:
            out.append(
                f"simulate: WARNING: {policy} without --checkpoint thrashes: preempted jobs "
                "lose all their progress and promotion brings them back to preempt others, so "
                "long jobs may never finish and the run may take minutes; give --checkpoint "
                "SECONDS, --model tiresias (Tiresias' dlas-gpu) or las:promote_knob=0"
            )
    return out


def _run_scenario(args: argparse.Namespace) -> int:
    from labhive.scheduler.drivers.scenario import load_scenario
    from labhive.scheduler.sim.runner import run_scenario

    if args.cluster is not None:
        raise UserError("a scenario names its own cluster; drop --cluster")
    if args.model is not None:  # a scenario's replay takes no locality: the model would not hold
        raise UserError(
            "--model applies to --trace; for a scenario give the settings as policy options "
            "(e.g. --policy las:promote_knob=0,quantum=0,same_queue=true,locality=anywhere "
            "--checkpoint 1)"
        )
    scenario = load_scenario(args.scenario)
    runs = [run_scenario(p, scenario, checkpoint=args.checkpoint) for p in args.policy]
    notes = [f"scenario: {args.scenario}: {len(scenario.events)} events"]
    meta = {"scenario": str(args.scenario), "checkpoint": args.checkpoint, "notes": notes}
    return _report(args, runs, meta, notes)


def _report(
    args: argparse.Namespace, runs: list[Any], meta: dict[str, Any], notes: list[str]
) -> int:
    """Files under --out, then the JSON document or the table (with the notes) on stdout."""
    from labhive.scheduler.sim.report import document, table, write_outputs

    if args.out is not None:
        files = write_outputs(runs, meta, args.out)
        notes.append(f"wrote {len(files)} files to {args.out}/")
    if args.json:
        print(json.dumps(document(runs, meta), indent=2))
    else:
        print(table(runs, notes))
    return 0


def _notes(args: argparse.Namespace, trace: Any, cluster_note: str, jobs: int) -> list[str]:
    notes = []
    if trace.synthetic:
        notes.append(SYNTHETIC_NOTE)
    notes.append(f"trace: {args.trace} ({trace.format}): {jobs:,} jobs to replay")
    if trace.skipped:
        notes.append(
            "  not runnable by the trace's rules: "
            + ", ".join(f"{n:,} ({why})" for why, n in sorted(trace.skipped.items()))
        )
    if trace.problems:
        shown = "; ".join(str(p) for p in trace.problems[:5])
        more = f" and {len(trace.problems) - 5} more" if len(trace.problems) > 5 else ""
        notes.append(
            f"  {len(trace.problems)} malformed rows skipped (--strict rejects): {shown}{more}"
        )
    notes.append(f"cluster: {cluster_note}")
    return notes


def _meta(
    args: argparse.Namespace,
    trace: Any,
    cluster_note: str,
    notes: list[str],
    left_out: dict[str, int],
) -> dict[str, Any]:
    model = {"model": args.model} if args.model else {}  # (older documents stay byte-identical)
    return {
        **model,
        "trace": str(args.trace),
        "trace_format": trace.format,
        "synthetic": trace.synthetic,
        "cluster": cluster_note,
        "seed": args.seed,
        "checkpoint": args.checkpoint,
        "skipped": dict(trace.skipped),
        "malformed": [{"line": p.line, "message": p.message} for p in trace.problems],
        "left_out": left_out,
        "notes": notes,
    }
