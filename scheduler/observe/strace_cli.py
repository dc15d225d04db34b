"""``labhive strace parse FILE... [--json]`` and ``labhive strace run -- COMMAND``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from labhive.scheduler.core.terminal import visible

_EPILOG = """examples:
  labhive strace parse train.strace.gz          readable summary (top syscalls, ioctls by device)
  labhive strace parse --json trace.log > s.json  the same as one JSON document
  strace -f -o /dev/stdout python x.py | labhive strace parse -
  labhive strace run -- python train.py --steps 10
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "strace",
        help="parse strace logs and decode GPU ioctls",
        description="Observe a job at the system-call level: parse strace output of any form, "
        "name the ioctls it sends to NVIDIA / AMD / tty / socket devices.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="strace_command", metavar="ACTION", required=True)

    p = sub.add_parser("parse", help="summarize strace logs (plain, .gz, - for stdin)")
    p.add_argument(
        "files", nargs="+", metavar="FILE", help="strace log(s); several = one run (-ff)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--top", type=int, default=15, help="syscalls and transitions to list")
    p.set_defaults(func=_parse)

    r = sub.add_parser("run", help="run a command under strace -f -tt -T -y and summarize it")
    r.add_argument("--json", action="store_true", help="print one JSON document")
    r.add_argument("--top", type=int, default=15, help="syscalls and transitions to list")
    r.add_argument("--keep", metavar="LOG", help="keep the raw strace log at LOG")
    r.add_argument(
        "--trace",
        metavar="SET",
        help="only these calls, as strace -e trace=SET (e.g. ioctl,openat)",
    )
    r.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    r.set_defaults(func=_run)


def _parse(args: argparse.Namespace) -> int:
    from labhive.scheduler.observe.strace import summarize_file

    summary = summarize_file(args.files, top=args.top if not args.json else None)
    _emit(summary, args)
    if args.json:  # the text form shows them first; the JSON document carries them as "notes"
        for note in summary.get("notes", ()):
            print(f"labhive strace parse: note: {visible(note)}", file=sys.stderr)
    return 0


def _run(args: argparse.Namespace) -> int:
    from labhive.scheduler.core.errors import UserError
    from labhive.scheduler.observe.strace import DEFAULT_FLAGS, run_strace

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UserError("give the command after --, e.g. labhive strace run -- python train.py")
    flags = list(DEFAULT_FLAGS) + (["-e", f"trace={args.trace}"] if args.trace else [])
    trace, rc = run_strace(cmd, flags=flags, output=args.keep)
    summary = trace.summary(top=None if args.json else args.top)
    summary["source"] = args.keep  # the log itself was temporary unless --keep
    summary["command"] = cmd
    summary["exit_status"] = rc
    _emit(summary, args, stream=sys.stderr if not args.json else sys.stdout)
    return rc


def _emit(summary: dict[str, Any], args: argparse.Namespace, stream: Any = None) -> None:
    out = stream or sys.stdout
    if args.json:
        json.dump(summary, out, indent=2, default=str)
        out.write("\n")
    else:
        out.write(visible(render_summary(summary, top=args.top), keep_newlines=True))


def render_summary(s: dict[str, Any], top: int = 15) -> str:
    """The summary dict as text a person reads in a terminal (the caller escapes control
    characters: names and unparsed lines come from the log)."""
    lines: list[str] = []
    src = s.get("source")
    if src:
        lines.append(f"strace log: {', '.join(src) if isinstance(src, list) else src}")
    lines.extend(f"note: {note}" for note in s.get("notes", ()))
    acc = s.get("lines")
    if acc:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(acc["kinds"].items()))
        lines.append(
            f"lines: {acc['total']} = {acc['parsed']} parsed + {acc['unparsed']} unparsed ({kinds})"
        )
    timed = s["seconds_in_syscalls"] > 0
    spent = f"; time in syscalls (-T): {s['seconds_in_syscalls']:.6f} s" if timed else ""
    if s["calls"] or not s["summary_table"]:
        lines.append(
            f"syscalls: {s['calls']} ({s['errors']} failed) in {len(s['tasks'])} task(s)" + spent
        )
    if s["syscalls"]:
        lines.append("")
        lines.append(
            f"{'syscall':<24}{'calls':>10}{'errors':>9}" + (f"{'seconds':>13}" if timed else "")
        )
        for row in s["syscalls"][:top]:
            secs = f"{row['seconds']:>13.6f}" if timed else ""
            lines.append(f"{row['name']:<24}{row['calls']:>10}{row['errors']:>9}{secs}")
    if s["ioctls"]:
        lines.append("")
        lines.append("ioctls by device:")
        device = None
        for row in s["ioctls"]:
            if row["device"] != device:
                device = row["device"]
                total = sum(r["count"] for r in s["ioctls"] if r["device"] == device)
                lines.append(f"  {device}  ({total})")
            kind = row["type_char"] or (None if row["type"] is None else hex(row["type"]))
            nr = None if row["nr"] is None else hex(row["nr"])
            fields = (
                f"{row['number']}: {row['direction']}, type {kind}, nr {nr}, size {row['size']}"
            )
            errs = f", {row['errors']} failed" if row["errors"] else ""
            lines.append(f"    {row['request']:<40}{row['count']:>7}{errs}   [{fields}]")
    if s["transitions"]:
        lines.append("")
        lines.append("most frequent transitions (within a task):")
        for e in s["transitions"][: min(top, 8)]:
            lines.append(f"  {e['source']} -> {e['target']}: {e['count']}")
    if s["signals"]:
        lines.append("")
        lines.append("signals: " + ", ".join(f"{k} {v}" for k, v in s["signals"].items()))
    exits = [t for t in s["tasks"] if t["exit_code"] is not None or t["killed_by"]]
    killed = [t for t in exits if t["killed_by"]]
    if exits:
        lines.append(f"exits: {len(exits) - len(killed)} exited, {len(killed)} killed")
    if s["summary_table"]:
        rows = [r for r in s["summary_table"] if r["syscall"] != "total"]
        total = next((r for r in s["summary_table"] if r["syscall"] == "total"), None)
        lines.append("")
        lines.append(f"-c table: {len(rows)} syscalls")
        if not s["syscalls"]:  # a -c log: the table is all there is, show its top rows
            lines.append(f"  {'% time':>7}{'seconds':>12}{'calls':>10}{'errors':>9}  syscall")
            for r in rows[:top]:
                pct = "" if r["percent_time"] is None else f"{r['percent_time']:.2f}"
                secs = "" if r["seconds"] is None else f"{r['seconds']:.6f}"
                lines.append(
                    f"  {pct:>7}{secs:>12}{r['calls'] or 0:>10}{r['errors']:>9}  {r['syscall']}"
                )
        if total:
            lines.append(
                f"  total: {total['calls']} calls, {total['errors']} errors, {total['seconds']} s"
            )
    if s["unparsed"]:
        lines.append("")
        lines.append("unparsed lines (first ones):")
        for u in s["unparsed"]:
            lines.append(f"  {u['line']}: {u['text'][:150]}")
    if "exit_status" in s:
        lines.append(f"\ncommand: {' '.join(s['command'])}")
        lines.append(f"command exit status: {s['exit_status']}")
    return "\n".join(lines) + "\n"
