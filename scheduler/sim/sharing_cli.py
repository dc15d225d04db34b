"""``labhive simulate`` on the Alibaba GPU trace v2023: the sharing model's table, JSON, files."""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path
from typing import Any

from labhive.scheduler.errors import UserError
from labhive.scheduler.sim.openb import NodeSpec, Pod, is_node_list, load_nodes, load_pods
from labhive.scheduler.sim.report import _grid, duration_text
from labhive.scheduler.sim.sharing import PLACEMENTS, FillPoint, fill
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
    for policy in args.policy:
        sharing_policy(policy)  # every name checked before any run
    pods = load_pods(args.trace, strict=args.strict, limit=args.limit)
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
    if args.fill:
        curves = {p: fill(nodes, pods.pods, p, seed=args.seed) for p in PLACEMENTS}
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
