"""Client sub-commands: ``labhive submit | jobs | show | logs | cancel | queue | cluster | node``.

They talk to a running service through ``labhive.client`` only; ``--json`` prints what the
service returned, otherwise a readable table.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.core.gpu_share import SHARES_SHOWN, gpus_arg, show_gpu_use
from labhive.scheduler.core.states import JobState
from labhive.scheduler.core.terminal import visible, visible_tree
from labhive.scheduler.core.time_limits import parse_time_limit


def register(subparsers: Any) -> None:
    p = _add(subparsers, "submit", "submit a job file (OpenPAI v2 or short form) or a command")
    p.add_argument(
        "--gpus",
        type=gpus_arg,
        help=f"GPUs per task, or a share of one GPU for a single task: {SHARES_SHOWN}",
    )
    p.add_argument("--tasks", type=int, help="tasks (a gang unless --no-gang)")
    p.add_argument("--vc", help="virtual cluster")
    p.add_argument("--priority", help="crit | prod | test | oppo, or a number")
    p.add_argument("--cpu", type=float, help="CPUs guaranteed per task (what placement counts)")
    p.add_argument("--memory-mb", type=int, help="memory guaranteed per task in MB")
    p.add_argument(
        "--cpu-limit", type=float, help="CPUs a task may use (its cgroup quota; default: --cpu)"
    )
    p.add_argument(
        "--memory-limit",
        "--memory-limit-mb",
        dest="memory_limit",
        type=int,
        metavar="MB",
        help="memory a task may use before it is killed, in MB (default: --memory-mb)",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--cwd",
        metavar="DIR",
        help="directory the tasks run in, entered as you (default: the current directory)",
    )
    where.add_argument(
        "--no-cwd",
        action="store_true",
        help="run in a fresh per-task work dir (e.g. submitting from another machine)",
    )
    p.add_argument("--retries", type=int, help="retries after a failed attempt")
    p.add_argument("--time", help='time limit per attempt: seconds or "30m", "2h"')
    p.add_argument("--name", help="job name (default: the command's first word)")
    p.add_argument("--observe", choices=["strace"], help="run the tasks under strace")
    p.add_argument("--image", help="run each task in a container from IMAGE (labhive image ls)")
    p.add_argument("--no-gang", action="store_true", help="start tasks as they fit")
    p.add_argument(
        "--wait",
        action="store_true",
        help="wait for the job to end, printing its state, queue position and why as they change",
    )
    p.add_argument("--follow", action="store_true", help="--wait, and print its log as it grows")
    p.add_argument("target", nargs="?", metavar="FILE", help="a job file (.yaml/.yml/.json)")
    p.add_argument("words", nargs="*", metavar="-- COMMAND", help="or the command to run")
    p.set_defaults(func=_submit)

    p = _add(subparsers, "jobs", "list your jobs (all jobs for an admin)")
    p.add_argument("--state", help="WAITING, RUNNING, SUCCEEDED, FAILED or STOPPED")
    p.add_argument("--vc")
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(func=_jobs)

    p = _add(subparsers, "show", "a job's state, tasks and history")
    p.add_argument("id")
    p.add_argument("--suggest", action="store_true", help="what would start a waiting job now")
    p.set_defaults(func=_show)

    p = _add(subparsers, "logs", "a job's output")
    p.add_argument("id")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until it ends")
    p.add_argument("--task", help="ROLE-INDEX (default: the first task)")
    p.add_argument("--stderr", action="store_true", help="stderr instead of stdout")
    p.set_defaults(func=_logs)

    p = _add(subparsers, "cancel", "stop a job")
    p.add_argument("id")
    p.set_defaults(func=_cancel)

    p = _add(subparsers, "queue", "the queue per VC: your jobs, and others' as counts")
    p.add_argument("--vc")
    p.add_argument("--limit", type=int, help="jobs a page (default 100, at most 1000)")
    p.add_argument("--offset", type=int, help="skip this many of your jobs (the next page)")
    p.set_defaults(func=_queue)

    p = _add(subparsers, "cluster", "nodes, GPUs and VCs (or: from-slurm, a config from Slurm)")
    p.add_argument(
        "source", nargs="?", choices=["from-slurm"],
        help="from-slurm: write a HiveD cluster config from sinfo (and topology.conf)",
    )  # fmt: skip
    p.add_argument(
        "--slurm-conf", help="from-slurm: the cluster's slurm.conf (default $SLURM_CONF)"
    )
    p.add_argument("-o", "--output", type=Path, help="from-slurm: write here (default: stdout)")
    p.add_argument(
        "--partition",
        help="from-slurm: the partition the service submits to, whose DefaultTime and MaxTime "
        "become the VC's timeLimit (default: Slurm's default partition)",
    )
    p.set_defaults(func=_cluster)

    p = _add(subparsers, "node", "take a node out of service or put it back (admins)")
    p.add_argument("action", choices=["down", "up"])
    p.add_argument("name", help="the node, as `labhive cluster` lists it")
    p.add_argument("--reason", default="", help="why (down only); users see it")
    p.add_argument(
        "--notice", type=parse_time_limit, default=0.0, metavar="DURATION",
        help="down only: tell its jobs first (a banner, on_stop, the notice file), go down "
        "this much later (e.g. 60s)",
    )  # fmt: skip
    p.set_defaults(func=_node)


def _add(subparsers: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--url", help="service URL (default: $LABHIVE_URL or http://127.0.0.1:8765)")
    p.add_argument(
        "--token",
        help="bearer token (default: $LABHIVE_TOKEN, else the file $LABHIVE_TOKEN_FILE names, "
        "else $JUPYTERHUB_API_TOKEN, ~/.config/labhive/token or ./data/admin.token, which "
        "labhive serve and labhive up write)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def _client(args: argparse.Namespace) -> Any:
    from labhive.scheduler.client import connect

    return connect(args.url, args.token)


def _guard(func: Any) -> Any:
    """Client errors become UserErrors: the service's message, exit code 2, no traceback."""

    def wrapper(args: argparse.Namespace) -> int:
        from labhive.scheduler.client import LabHiveError

        try:
            return int(func(args) or 0)
        except LabHiveError as err:
            raise UserError(err.message) from None

    return wrapper


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Aligned columns; control characters in a cell (a job name is anyone's text) are shown
    as escapes, so no cell can move the cursor or clear the screen."""
    cells = [[str(h) for h in headers]]
    cells += [["-" if v is None else visible(str(v)) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def _age(t: float | None) -> str:
    if not t:
        return "-"
    s = max(0, int(time.time() - t))
    return f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s // 3600}h"


@_guard
def _submit(args: argparse.Namespace) -> int:
    file, command = _file_or_command([args.target, *args.words] if args.target else [])
    short = {
        "gpus": args.gpus,
        "tasks": args.tasks,
        "vc": args.vc,
        "priority": _priority(args.priority),
        "cpu": args.cpu,
        "memory_mb": args.memory_mb,
        "cpu_limit": args.cpu_limit,
        "memory_limit_mb": args.memory_limit,
        "cwd": None if args.no_cwd else str(Path(args.cwd or ".").absolute()),
        "retries": args.retries,
        "time_limit": args.time,
        "name": args.name,
        "observe": args.observe,
        "image": args.image,
        "gang": False if args.no_gang else None,
        # one word is a shell line as typed ('echo $RANK; sleep 1'); several are quoted as given
        "command": (command[0] if len(command) == 1 else shlex.join(command)) if command else None,
    }
    job = _client(args).submit(file, **short)
    if args.wait or args.follow:
        _watch(job, args.follow, sys.stderr if args.json else sys.stdout)
        if job.state == JobState.FAILED:
            _print_stderr_tail(job.client, job.id, None, sys.stderr)
    if args.json:
        _print_json(job.data)
    else:
        where = f" (position {job.position})" if job.position else ""
        print(visible(f"job {job.id} '{job.name}' in {job.vc}: {job.state}{where}{_outcome(job)}"))
    return 0 if job.state != JobState.FAILED else 1


def _watch(job: Any, follow: bool, out: Any, poll_s: float = 0.5) -> None:
    """Until the job ends: a line whenever its state, queue position or why-text changes, and
    with ``follow`` its (first task's) log as it grows, so a waiting user sees why they wait."""
    print(visible(f"job {job.id} '{job.name}' submitted to {job.vc}"), file=out, flush=True)
    last: tuple[Any, ...] = ()
    offset = 0
    while True:
        d = job.info
        key = (d.state, d.attempt, d.queue_position, d.queue_length, d.why)
        if key != last:
            last = key
            print(visible(f"{time.strftime('%H:%M:%S')}  {_progress(job)}"), file=out, flush=True)
        if follow and job.state != JobState.WAITING:
            offset = _print_log(job, offset, drain=job.done)
        if job.done:
            return
        time.sleep(poll_s)
        job.refresh()


def _progress(job: Any) -> str:
    """The job in a line: "WAITING: position 1 of 2 in vc1 - <why>", "RUNNING on vnode-0 GPUs 0"."""
    from labhive.scheduler.client import why_without_position

    d = job.info
    if d.waiting:
        pos, length = d.queue_position, d.queue_length
        where = f"position {pos} of {length} in {d.vc}" if pos else ""
        why = why_without_position(d.why or d.reason or "")
        return f"WAITING{': ' + where if where else ''}{' - ' + why if why else ''}"
    on = "; ".join(
        f"{t.node} GPUs {','.join(map(str, t.gpus)) or 'none'}" for t in d.tasks if t.node
    )
    text = f"{d.state}{' on ' + on if on and d.running else ''}"
    attempt = int(d.attempt or 1)
    return text + (f" (attempt {attempt})" if attempt > 1 else "") + _outcome(job)


def _outcome(job: Any) -> str:
    """Why a job ended badly, for its last line; nothing for a success."""
    d = job.info
    if d.state not in (JobState.FAILED, JobState.STOPPED):
        return ""
    code = f", exit code {d.exit_code}" if d.exit_code is not None else ""
    return f" - {d.why or d.reason or 'no reason given'}{code}"


def _print_log(job: Any, offset: int, drain: bool) -> int:
    """Print the log from ``offset``; all that is left when ``drain``. Returns the new offset."""
    while True:
        chunk = job.logs(offset)
        sys.stdout.write(chunk.data)
        sys.stdout.flush()
        offset = chunk.next_offset
        if not drain or not chunk.data:
            return offset


def _file_or_command(rest: list[str]) -> tuple[str | None, list[str]]:
    """One argument naming a .yaml/.yml/.json file is a job file; anything else is a command."""
    if not rest:
        raise UserError("give a job file or a command, e.g. labhive submit --gpus 1 -- nvidia-smi")
    if len(rest) == 1 and rest[0].endswith((".yaml", ".yml", ".json")):
        if not Path(rest[0]).is_file():
            raise UserError(f"no job file {rest[0]}")
        return rest[0], []
    return None, rest


def _priority(value: str | None) -> str | int | None:
    if value is None:
        return None
    return int(value) if value.lstrip("-").isdigit() else value


@_guard
def _jobs(args: argparse.Namespace) -> int:
    jobs = _client(args).jobs(state=args.state, vc=args.vc, limit=args.limit)
    if args.json:
        _print_json([j.data for j in jobs])
        return 0
    rows = [
        (j.id, j.name, j.user, j.vc, j.priority, j.state, j.attempt, j.gpus,
         _age(j.submitted_at), _starts(j.data), j.why or j.reason)
        for j in jobs
    ]  # fmt: skip
    headers = ("ID", "NAME", "USER", "VC", "PRIO", "STATE", "TRY", "GPUS", "AGE", "STARTS", "WHY")
    print(table(headers, rows) if rows else "no jobs")
    return 0


@_guard
def _show(args: argparse.Namespace) -> int:
    client = _client(args)
    job = client.job(args.id)
    events = job.events()
    tips = client._get(f"/jobs/{job.id}/suggest") if args.suggest else None
    if args.json:
        _print_json({**job.data, "events": events, **({"suggest": tips} if tips else {})})
        return 0
    d = visible_tree(job.data)  # names, users and why-texts come from other people
    print(f"job {d['id']} '{d['name']}'  user {d['user']}  vc {d['vc']}  priority {d['priority']}")
    line = f"state {d['state']}  attempt {d['attempt']}  retries {d['retries_used']}/{d['retries']}"
    if d.get("queue_position"):
        line += f"  position {d['queue_position']} of {d['queue_length']}"
    if when := _starts(d):
        line += f"  {when}"
    print(line)
    if d.get("gpu_sharing"):  # a GPU share: its fraction, and whether anything enforces it
        print(visible(f"GPU share {d['gpus']:g} of one GPU; {d['gpu_sharing']}"))
    if d.get("why"):
        from labhive.scheduler.client import why_without_position

        why = why_without_position(d["why"]) if d.get("queue_position") else d["why"]
        print(visible(f"why   {why}"))
    if tips is not None:
        _print_suggestions(tips["suggestions"])
    if d["tasks"]:
        print(table(("TASK", "NODE", "GPU IDS", "STATE", "EXIT"), [
            (f"{t['role']}-{t['index']}", t["node"], ",".join(map(str, t["gpus"])) or "-",
             t["state"], t["exit_code"]) for t in d["tasks"]
        ]))  # fmt: skip
    print(table(("TIME", "FROM", "TO", "TRY", "REASON", "WHY"), [
        (time.strftime("%H:%M:%S", time.localtime(e["time"])), e["from_state"], e["to_state"],
         e["attempt"], e["reason"], e["why"]) for e in events
    ]))  # fmt: skip
    if d["state"] == JobState.FAILED:
        _print_stderr_tail(client, job.id, None, sys.stdout)
    return 0


def _print_suggestions(tips: list[dict[str, Any]]) -> None:
    """What would start it now (the soon ones), else the change that starts it soonest. The
    service offers only changes that start the job sooner than it starts unchanged."""
    soon = [t for t in tips if t["soon"]]
    for t in soon:
        risk = f" ({t['risk']})" if t["risk"] else ""
        print(visible(f"to start it now: {t['change']} ({t['flags']}), {_starts(t)}{risk}"))
    if soon:
        return
    if not tips:
        print("to start it sooner: nothing LabHive can change starts it sooner")
        return
    t = min(tips, key=lambda t: t["eta"])
    risk = f" ({t['risk']})" if t["risk"] else ""
    print(visible(f"to start it sooner: {t['change']} ({t['flags']}), {_starts(t)}{risk}"))


def _starts(d: dict[str, Any]) -> str | None:
    """A waiting job's estimated start, "starts in ~25 min (10-50)"; what it waits for when
    its start has no grounds, "waits for a notebook server in VC default to stop; no
    estimate" (None: neither)."""
    from labhive.scheduler.client.eta_words import eta_text, no_estimate_text

    if d.get("eta") is None:
        return no_estimate_text(d["waits_for"]) if d.get("waits_for") else None
    return eta_text(d["eta"], d["eta_low"], d["eta_high"], time.time())


#: How many of a failed job's last stderr lines ``logs``, ``show`` and ``submit --wait`` print.
STDERR_TAIL_LINES = 20


def _print_stderr_tail(client: Any, job_id: Any, task: str | None, out: Any) -> None:
    """A task's last stderr lines under a heading: where a failed job says why (a traceback,
    "can't open file 'train.py'"), which its stdout log alone never shows."""
    tail = client.log_tail(job_id, STDERR_TAIL_LINES, task=task, stream="stderr")
    lines = tail.split("\n") if tail else []
    if lines:  # each line made safe for the terminal (the task wrote them)
        text = "\n".join(visible(line) for line in lines)
        print(f"stderr (last {len(lines)} lines):\n{text}", file=out, flush=True)


@_guard
def _logs(args: argparse.Namespace) -> int:
    client = _client(args)
    stream = "stderr" if args.stderr else "stdout"
    printed = False
    if args.follow:
        for text in client.follow_logs(args.id, task=args.task, stream=stream):
            sys.stdout.write(text)
            sys.stdout.flush()
            printed = printed or bool(text)
    else:
        offset = 0
        while True:  # the whole log, chunk by chunk
            chunk = client.logs(args.id, offset, task=args.task, stream=stream)
            if args.json:
                _print_json(chunk.__dict__)
                return 0
            sys.stdout.write(chunk.data)
            offset = chunk.next_offset
            printed = printed or bool(chunk.data)
            if not chunk.data:
                break
    if stream == "stdout" and (not printed or client.job(args.id).state == JobState.FAILED):
        sys.stdout.flush()  # the tail goes to stderr, so `logs ID > out.txt` stays the log
        _print_stderr_tail(client, args.id, args.task, sys.stderr)
    return 0


@_guard
def _cancel(args: argparse.Namespace) -> int:
    job = _client(args).cancel(args.id)
    if args.json:
        _print_json(job.data)
    else:
        pending = "" if job.state == JobState.STOPPED else " (stopping)"
        print(visible(f"job {job.id} '{job.name}': {job.state}{pending}"))
    return 0


@_guard
def _queue(args: argparse.Namespace) -> int:
    q = _client(args).queue(vc=args.vc, limit=args.limit, offset=args.offset)
    if args.json:
        _print_json(q)
        return 0
    others = q.get("others") or {}
    print(table(("VC", "GUARANTEED", "USED", "OPPORTUNISTIC", "WAITING", "OTHERS' JOBS"), [
        (v["name"], v["guaranteed_gpus"], v["used_gpus"], v["opportunistic_gpus"], v["waiting"],
         _others(others.get(v["name"])))
        for v in q["vcs"].values()
    ]))  # fmt: skip
    standing = q.get("standing") or {}
    if standing:
        print("\nYour fair-share standing:")
        for vc, mine in standing.items():
            print(visible(f"  {vc}: {mine['text']}"))
    entries = q["running"] + q["waiting"]
    if entries:
        print()
        print(table(("POS", "VC", "STATE", "GPUS", "TASKS", "PRIO", "JOB", "STARTS"), [
            (e["position"], e["vc"], e["state"], e["gpus"], e["tasks"], e["priority"],
             f"{e['id']} {e['name']}", _starts(e))
            for e in entries
        ]))  # fmt: skip
    if q.get("next_offset") is not None:
        shown = q["offset"] + len(entries)
        print(f"\n{shown} of {q['total']} jobs shown; more: --offset {q['next_offset']}")
    return 0


def _others(counts: dict[str, Any] | None) -> str:
    """Other users' jobs in a VC, as the service gives them: counts, never whose."""
    if not counts:
        return "-"
    running, gpus, waiting = counts["running"], counts["running_gpus"], counts["waiting"]
    return f"{running} running ({gpus} GPUs), {waiting} waiting"


def _cluster_from_slurm(args: argparse.Namespace) -> int:
    import os

    from labhive.scheduler.executors.slurm_cli import Slurm, SlurmError
    from labhive.scheduler.executors.slurm_config import cluster_from_slurm

    try:
        slurm = Slurm(conf=args.slurm_conf or os.environ.get("SLURM_CONF"))
        text = cluster_from_slurm(slurm, partition=args.partition)
    except (SlurmError, ValueError, OSError) as err:
        raise UserError(f"cannot write a cluster config from Slurm: {err}") from err
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
        print(f"wrote {args.output}; check it with `labhive validate {args.output}`")
    return 0


@_guard
def _cluster(args: argparse.Namespace) -> int:
    if args.source == "from-slurm":
        return _cluster_from_slurm(args)
    c = _client(args).cluster()
    if args.json:
        _print_json(c)
        return 0
    kind = "virtual cluster: GPU slots, nothing computes" if c["virtual"] else "cluster"
    print(visible(f"{kind}; policy {c['policy']}"))
    print(table(("NODE", "SKU", "HEALTH", "GPUS (index:job)"), [
        (n["name"], n["sku"], "ok" if n["healthy"] else n["reason"],
         " ".join(_gpu_cell(n, g) for g in n["gpus"]))
        for n in c["nodes"]
    ]))  # fmt: skip
    for n in c["nodes"]:  # "n0 GPU 0: 0.75 used by 2 jobs (12: 0.5, 13: 0.25)"
        for g, held in sorted((n.get("shares") or {}).items()):
            parts = ", ".join(f"{s['job']}: {s['share']:g}" for s in held)
            print(f"{n['name']} {show_gpu_use(g, [s['share'] for s in held])} ({parts})")
    return 0


def _gpu_cell(node: dict[str, Any], gpu: int) -> str:
    """``index:job``; a GPU with shares lists its sharers (``0:12+13``)."""
    held = (node.get("shares") or {}).get(str(gpu))
    if held:
        return f"{gpu}:" + "+".join(str(s["job"]) for s in held)
    return f"{gpu}:{node['used'].get(str(gpu), '-')}"


@_guard
def _node(args: argparse.Namespace) -> int:
    client = _client(args)
    if args.action == "down":
        n = client.node_down(args.name, args.reason, args.notice)
    else:
        if args.reason:
            raise UserError("--reason goes with `labhive node down`")
        n = client.node_up(args.name)
    if args.json:
        _print_json(n)
    elif args.action == "down" and args.notice and n["healthy"]:
        print(f"{n['name']}: its jobs are told; it goes down in {args.notice:g} s")
    elif n["healthy"]:
        print(visible(f"{n['name']}: in service"))
    else:
        print(visible(f"{n['name']}: down ({n['reason']})"))
    return 0
