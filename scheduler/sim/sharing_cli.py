"""``labhive simulate`` on the Alibaba GPU trace v2023: the sharing model's table, JSON, files."""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path
from typing import Any

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.sim.openb import NodeSpec, Pod, is_node_list, load_nodes, load_pods
from labhive.scheduler.sim.openb_variants import build_variant
from labhive.scheduler.sim.report import _grid, duration_text
from labhive.scheduler.sim.sharing import FillPoint, fill
from labhive.scheduler.sim.sharing_paper import (
    PAPER_PLACEMENTS,
    PUBLISHED_UNALLOCATED,
    TIES,
    paper_fill,
    summarise,
)
from labhive.scheduler.sim.sharing_sim import SharingResult, sharing_policy, simulate_sharing

#: (label, key, kind) of the table's rows.
ROWS = (
    ("pods replayed", "pods", "int"),
    ("rejected (fit on no node)", "rejected", "int"),
    ("finished", "finished", "int"),
    ("unfinished at end", "unfinished", "int"),
    ("JCT avg", "avg_jct_s", "dur"),
    ("wait avg", "avg_wait_s", "dur"),
    ("wait p95", "p95_wait_s", "dur"),
    ("pods that waited", "ever_waited", "int"),
    ("GPU capacity allocated (time avg)", "gpu_allocated", "pct"),
    ("fragmentation (time avg)", "fragmentation", "pct"),
)


def run_sharing(args: argparse.Namespace) -> int:
    if not is_node_list(args.cluster):
        raise UserError(
            f"{args.cluster}: the Alibaba trace needs its node list (columns sn, cpu_milli, "
            "memory_mib, gpu, model), e.g. openb_node_list_gpu_node.csv"
        )
    paper = args.fill == "paper"
    if args.seeds < 1:
        raise UserError("--seeds must be at least 1")
    for policy in args.policy:
        if paper:
            _paper_policy(policy)
        else:
            sharing_policy(policy)  # every name checked before any run
    pods = load_pods(args.trace, strict=args.strict, limit=args.limit, unscheduled=paper)
    if args.variant:
        pods.pods = build_variant(pods.pods, args.variant, args.seed)
    if paper:
        return _run_paper(args, pods, load_nodes(args.cluster, args.machines))
    nodes = load_nodes(args.cluster, args.machines)
    notes = _notes(args, pods, nodes)
    if not pods.timed and not args.fill:
        raise UserError(
            f"{args.trace} has no creation/deletion/scheduled times (only task shapes): it can "
            "feed --fill, not a replay in time; add --fill"
        )
    timed = pods.timed
    results = [_run(args, nodes, pods.pods, policy) for policy in args.policy] if timed else []
    if timed and not any(r.ever_waited or r.unfinished for r in results):
        notes.append(
            "no pod ever waited under any policy: this cluster is larger than the load needs; "
            "try --machines N (e.g. 20) for a slice where placements matter, or --fill"
        )
    curves = {}
    if args.fill:  # the placements --policy names (fifo and sjf place first-fit)
        chosen = dict.fromkeys(sharing_policy(p)[1] for p in args.policy)
        curves = {p: fill(nodes, pods.pods, p, seed=args.seed) for p in chosen}
    doc = {
        "trace": str(args.trace),
        "trace_format": "alibaba-openb",
        "synthetic": False,
        "cluster": _cluster_note(args, nodes),
        "skipped": dict(pods.skipped),
        "malformed": [{"line": p.line, "message": p.message} for p in pods.problems],
        "notes": notes,
        "policies": [r.summary() for r in results],
        "fill": {p: [_point(pt) for pt in c] for p, c in curves.items()},
    }
    if args.out is not None:
        files = _write(args.out, doc, results)
        notes.append(f"wrote {len(files)} files to {args.out}/")
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(_table(results, notes, curves))
    return 0


def _run(args: argparse.Namespace, nodes: list[NodeSpec], pods: list[Pod], policy: str) -> Any:
    from labhive.scheduler.sim.runner import progress_reporter

    report = progress_reporter(len(pods), policy, quiet=args.quiet)
    started = time.perf_counter()
    try:
        result = simulate_sharing(
            nodes, pods, policy, progress=report.update, series=args.out is not None
        )
    finally:
        report.close(time.perf_counter() - started)
    return result


def _point(p: FillPoint) -> dict[str, float]:
    return {
        "load": p.load,
        "unallocated": round(p.unallocated, 4),
        "fragmentation": round(p.fragmentation, 4),
        "failed": p.failed,
    }


def _cluster_note(args: argparse.Namespace, nodes: list[NodeSpec]) -> str:
    models: dict[str, int] = {}
    for n in nodes:
        models[n.model] = models.get(n.model, 0) + n.gpus
    parts = ", ".join(f"{g} {m}" for m, g in sorted(models.items()) if g)
    sliced = f" (the first {len(nodes)}, --machines)" if args.machines else ""
    return (
        f"{Path(args.cluster).name}: {len(nodes)} nodes{sliced}, "
        f"{sum(n.gpus for n in nodes)} GPUs ({parts})"
    )


def _notes(args: argparse.Namespace, pods: Any, nodes: list[NodeSpec]) -> list[str]:
    sharing = sum(1 for p in pods.pods if p.sharing)
    cpu_only = sum(1 for p in pods.pods if p.gpus == 0)
    notes = [
        f"trace: {args.trace} (Alibaba GPU trace v2023, REAL): {len(pods.pods):,} pods to "
        f"replay ({sharing:,} share a GPU, {cpu_only:,} CPU-only)"
    ]
    if args.variant:
        notes.append(f"  the FGD paper's variant {args.variant}, built from it (seed {args.seed})")
    if pods.skipped:
        notes.append(
            "  not replayed: " + ", ".join(f"{n:,} ({why})" for why, n in pods.skipped.items())
        )
    if pods.problems:
        notes.append(f"  {len(pods.problems)} malformed rows skipped (--strict rejects)")
    notes.append(f"cluster: {_cluster_note(args, nodes)}")
    return notes


def _fmt(value: Any, kind: str) -> str:
    if kind == "int":
        return f"{int(value):,}"
    if kind == "pct":
        return f"{100 * value:.2f}%"
    return duration_text(float(value))


def _table(results: list[SharingResult], notes: list[str], curves: dict[str, Any]) -> str:
    summaries = [r.summary() for r in results]
    header = ["", *[s["policy"] for s in summaries]]
    rows = [[label, *[_fmt(s[key], kind) for s in summaries]] for label, key, kind in ROWS]
    out = [*notes, "", _grid(header, rows)] if results else list(notes)
    if curves:
        loads = [p.load for p in next(iter(curves.values()))]
        head = ["GPU capacity unallocated at arrived load", *[f"{x:.0%}" for x in loads]]
        lines = [[p, *[f"{pt.unallocated:.1%}" for pt in c]] for p, c in curves.items()]
        out += ["", _grid(head, lines)]
    return "\n".join(out)


def _write(out: Path, doc: dict[str, Any], results: list[SharingResult]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "summary.json"]
    files[0].write_text(json.dumps(doc, indent=2))
    for r in results:
        path = out / f"{r.policy.replace(':', '_').replace('=', '-')}.series.csv"
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["t", "gpu_allocated", "fragmentation", "waiting"])
            w.writerows(r.series)
        files.append(path)
    return files


PAPER_LOADS = (0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3)


def _paper_policy(text: str) -> tuple[str, str]:
    """(placement, tie rule) for ``NAME`` or ``NAME:ties=seeded|name|random`` under --fill
    paper."""
    name, _, rest = text.partition(":")
    if name not in PAPER_PLACEMENTS:
        raise UserError(
            f"--fill paper: policy {name!r} is not one of the paper's placements; choose "
            f"{', '.join(PAPER_PLACEMENTS)} (docs/policies.md, FGD section)"
        )
    ties = "seeded"
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key.strip() != "ties" or value.strip() not in TIES:
            raise UserError(f"option {item!r} of {name}: only ties={' or ties='.join(TIES)}")
        ties = value.strip()
    return name, ties


def _run_paper(args: argparse.Namespace, pods: Any, nodes: list[NodeSpec]) -> int:
    """The paper's fill: each --policy over --seeds seeds (seed, seed+1, ...), mean and spread
    of the unallocated GPU share and of the fragmentation at each arrived load."""
    notes = _notes(args, pods, nodes)
    notes.append(
        "workload: every row (CPU-only and never-scheduled kept) in a seeded random order, then "
        "random copies up to 130% of GPU capacity; scores 0..100, ties to the node whose name "
        "sorts first, the names prefixed by a seeded random rank as the paper's simulator does "
        "(NAME:ties=name for the nodes' own names, NAME:ties=random for random)"
    )
    policies: dict[str, Any] = {}
    for policy in dict.fromkeys(args.policy):
        name, ties = _paper_policy(policy)
        started = time.perf_counter()
        runs = [
            paper_fill(nodes, pods.pods, name, loads=PAPER_LOADS, seed=args.seed + i,
                       frag=args.frag, ties=ties)
            for i in range(args.seeds)
        ]  # fmt: skip
        unalloc = summarise([[p.unallocated for p in r] for r in runs], PAPER_LOADS)
        frag = summarise([[p.fragmentation for p in r] for r in runs], PAPER_LOADS)
        policies[policy] = {
            "seconds": round(time.perf_counter() - started, 1),
            "points": [
                {"load": u.load, "unallocated_mean": round(u.mean, 4),
                 "unallocated_sd": round(u.spread, 4), "unallocated_min": round(u.low, 4),
                 "unallocated_max": round(u.high, 4), "fragmentation_mean": round(f.mean, 4),
                 "failed_mean": sum(r[j].failed for r in runs) / len(runs)}
                for j, (u, f) in enumerate(zip(unalloc, frag, strict=True))
            ],
        }  # fmt: skip
    doc = {
        "trace": str(args.trace),
        "cluster": _cluster_note(args, nodes),
        "fill": "paper",
        "frag": args.frag,
        "seeds": list(range(args.seed, args.seed + args.seeds)),
        "notes": notes,
        "policies": policies,
        "published_unallocated_at_100": PUBLISHED_UNALLOCATED,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    head = ["GPU unallocated (mean ± sd)", *[f"{x:.0%}" for x in PAPER_LOADS], "s"]
    rows = [
        [p, *[f"{100 * x['unallocated_mean']:.2f}±{100 * x['unallocated_sd']:.2f}"
              for x in d["points"]], f"{d['seconds']}"]
        for p, d in policies.items()
    ]  # fmt: skip
    frag_head = [f"fragmentation, {args.frag}'s (mean)", *[f"{x:.0%}" for x in PAPER_LOADS]]
    frag_rows = [
        [p, *[f"{100 * x['fragmentation_mean']:.2f}" for x in d["points"]]]
        for p, d in policies.items()
    ]
    print("\n".join([*notes, "", _grid(head, rows), "", _grid(frag_head, frag_rows)]))
    return 0
