"""``labhive whatif`` (the journal's submissions under a changed setting) and ``labhive journal
export`` (the journal as a trace). Admins only, as ``labhive twin check``: both read the store
directly (docs/admin.md, the trust model)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.service.journal.cli import read_journal, store_options


def register(subparsers: Any) -> None:
    w = subparsers.add_parser(
        "whatif",
        help="the journal's submissions replayed under another cluster, policy or VC quota "
        "(admins: reads the store)",
        description="Replay the submissions the service recorded (its journal), with their real "
        "run times, under a changed setting and under the live one, and compare per VC: wait "
        "p50/p95, use of the quota, GPU-hours wasted, jobs refused, and the jobs whose wait "
        "changed most.",
    )
    store_options(w)
    w.add_argument("--since", help="from this time on: epoch seconds, ISO 8601, or 7d/12h ago")
    w.add_argument(
        "--live-cluster", help="the cluster config the service runs (as for serve; the baseline)"
    )
    w.add_argument(
        "--live-policy",
        help="the service's policy (default: the one the journal says it ran)",
    )
    w.add_argument("--fair-share", metavar="HALF_LIFE", help="the service's --fair-share")
    w.add_argument("--cluster", help="what-if: this cluster config instead")
    w.add_argument("--policy", help="what-if: this policy instead (NAME or NAME:key=value,...)")
    w.add_argument(
        "--vc-quota",
        action="append",
        default=[],
        metavar="VC=+Nnodes",
        help="what-if: a VC with N more nodes (new ones), or -N fewer (repeat for more VCs)",
    )
    w.add_argument("--json", action="store_true", help="print the report as JSON")
    w.add_argument("--html", type=Path, help="write a plotly figure of the waits to this file")
    w.set_defaults(func=_whatif)

    journal = subparsers.add_parser(
        "journal", help="the service's event journal (admins: reads the store)"
    )
    sub = journal.add_subparsers(dest="journal_command", required=True)
    e = sub.add_parser(
        "export",
        help="the journal's jobs as a trace labhive simulate reads",
        description="Write the jobs the journal recorded (submit time, VC, user, GPUs, real run "
        "time, outcome) as a trace: the simulator's generic CSV (labhive) or Philly's "
        "cluster_job_log JSON (philly). Job names and commands are never written.",
    )
    store_options(e)
    e.add_argument("--since", help="from this time on: epoch seconds, ISO 8601, or 7d/12h ago")
    e.add_argument("--format", choices=("labhive", "philly"), default="labhive")
    e.add_argument(
        "--hash-names",
        action="store_true",
        help="users and VCs as salted hashes (stable within this export, not across exports)",
    )
    e.add_argument("-o", "--output", type=Path, help="write here (default: stdout)")
    e.set_defaults(func=_export)


def _whatif(args: argparse.Namespace) -> int:
    from labhive.scheduler.service.journal import recorded, whatif, whatif_report

    if args.cluster is None and args.policy is None and not args.vc_quota:
        raise UserError("what should change? give --cluster, --policy or --vc-quota")
    from labhive.scheduler.service.journal import vc_quota

    changes = [vc_quota.parse_vc_quota(q) for q in args.vc_quota]  # (bad syntax: before reading)
    recording = read_journal(
        args, lambda passes, _conn: recorded.recorded_jobs(passes), fresh=False
    )
    if not recording.jobs:
        raise UserError("the journal holds no submission in that span: nothing to replay")
    baseline, changed = _settings(args, recording.policy or "hived", changes)
    report = whatif.whatif(recording, baseline, changed).to_json()
    if args.html is not None:
        whatif_report.write_html(report, args.html)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(whatif_report.text(report))
        if args.html is not None:
            print(f"figure: {args.html}")
    return 0


def _settings(args: argparse.Namespace, ran: str, changes: list[Any]) -> tuple[Any, Any]:
    from labhive.scheduler.core.config import load_cluster_config
    from labhive.scheduler.core.detect import default_cluster
    from labhive.scheduler.core.time_limits import parse_time_limit
    from labhive.scheduler.core.yamlines import load_yaml
    from labhive.scheduler.service.journal import vc_quota
    from labhive.scheduler.service.journal.whatif import Setting
    from labhive.scheduler.service.server import with_fair_share

    half_life = parse_time_limit(args.fair_share) if args.fair_share else None
    live_name = args.live_cluster or "the detected cluster"
    live = load_cluster_config(args.live_cluster) if args.live_cluster else default_cluster()
    live_policy = args.live_policy or ran
    base = Setting(f"{live_policy} on {live_name}", live_policy, with_fair_share(live, half_life))
    source = args.cluster or args.live_cluster
    config, name = (
        (load_cluster_config(args.cluster), args.cluster) if args.cluster else (live, live_name)
    )
    if changes:
        if source is None:
            raise UserError(
                "--vc-quota edits a cluster config file: give the service's --live-cluster "
                "(or a --cluster) as a YAML file"
            )
        data = load_yaml(Path(source).read_text(), origin=str(source))
        config = load_cluster_config(vc_quota.apply(data, changes))
        name += " with " + ", ".join(str(c) for c in changes)
    policy = args.policy or live_policy
    changed = Setting(f"{policy} on {name}", policy, with_fair_share(config, half_life))
    return base, changed


def _export(args: argparse.Namespace) -> int:
    from labhive.scheduler.service.journal import export, recorded
    from labhive.scheduler.service.store import queries

    def use(passes: Any, conn: Any) -> export.Export:
        recording = recorded.recorded_jobs(passes)
        outcomes = queries.job_states(conn, [j.job_id for j in recording.jobs])
        return export.export(recording, args.format, hash_names=args.hash_names, outcomes=outcomes)

    out = read_journal(args, use, fresh=False)
    if args.output is not None:
        args.output.write_text(out.text)
    else:
        sys.stdout.write(out.text)
    left = ", ".join(f"{n} {why}" for why, n in sorted(out.skipped.items()))
    print(
        f"exported {out.jobs} jobs ({args.format})" + (f"; left out: {left}" if left else ""),
        file=sys.stderr,
    )
    return 0
