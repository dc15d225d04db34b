"""``labhive replay SCENARIO`` and ``labhive validate FILE...``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.core.terminal import visible


def register(subparsers: Any) -> None:
    replay = subparsers.add_parser(
        "replay",
        help="replay a scenario in virtual time",
        description="Replays a scenario file (or a shipped example such as 'demo') in virtual "
        "time, prints the state after every event, exits 1 if an expectation fails.",
    )
    replay.add_argument("scenario", help="scenario file, or the name of a shipped example")
    replay.add_argument("--json", action="store_true", help="print one JSON document")
    replay.add_argument("--policy", default="hived", help="scheduling policy (default hived)")
    replay.set_defaults(func=run_replay)
    validate = subparsers.add_parser(
        "validate",
        help="check cluster configs, job specs or scenarios",
        description="Checks HiveD cluster configs, OpenPAI/short-form job specs or scenarios, "
        "each file on its own; exits 2, with the offending key and line, when any is wrong.",
    )
    validate.add_argument("file", nargs="+", help="one or more files")
    validate.set_defaults(func=run_validate)


def run_replay(args: argparse.Namespace) -> int:
    from labhive.scheduler.drivers.replay import replay
    from labhive.scheduler.drivers.scenario import load_scenario
    from labhive.scheduler.drivers.timeline import render

    scenario = load_scenario(args.scenario)
    result = replay(scenario, args.policy)
    if args.json:
        doc = {
            "virtual": scenario.cluster.virtual,  # GPU slots, not real GPUs
            "steps": result.steps,
            "failures": result.failures,
        }
        json.dump(doc, sys.stdout, indent=1)
        print()
    else:
        # job names and reasons are whatever the scenario's author wrote: shown, never obeyed
        print(visible(render(result.steps, virtual=scenario.cluster.virtual), keep_newlines=True))
        for failure in result.failures:
            print(visible(f"EXPECTATION FAILED: {failure}"))
        if scenario.expects and result.ok:
            print(f"all {len(scenario.expects)} expectations hold")
    if not result.ok:
        print(f"labhive replay: expectation failed: {visible(result.failures[0])}", file=sys.stderr)
        return 1
    return 0


def run_validate(args: argparse.Namespace) -> int:
    """Each file checked on its own: one line per file, errors on stderr, exit 2 if any."""
    if len(args.file) == 1:
        return validate_file(Path(args.file[0]))
    wrong = 0
    for name in args.file:
        try:
            validate_file(Path(name))
        except UserError as err:
            print(f"labhive validate: {err}", file=sys.stderr)
            wrong += 1
    if wrong:
        raise UserError(f"{wrong} of {len(args.file)} files have errors (above)")
    return 0


def validate_file(path: Path) -> int:
    from labhive.scheduler.core.yamlines import YamlSyntaxError, load_yaml

    try:
        text = path.read_text()
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror}") from None
    except ValueError as err:  # not UTF-8, or a NUL in the name
        from labhive.scheduler.core.yamlines import unreadable

        raise UserError(unreadable(path, "file", err)) from None
    try:
        data = load_yaml(text, origin=str(path))
    except YamlSyntaxError as err:
        raise UserError(str(err)) from None
    print(visible(describe(path, data)))
    return 0


def describe(path: Path, data: Any) -> str:
    """Check ``path`` as whatever kind of file it is; a one-line summary when it is fine."""
    from labhive.scheduler.core.config import load_cluster_config
    from labhive.scheduler.core.jobs import load_job_file
    from labhive.scheduler.drivers.scenario import load_scenario

    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a YAML mapping (a cluster config, job or scenario)")
    if "events" in data:
        scenario = load_scenario(path)
        return (
            f"{path}: scenario OK: {len(scenario.events)} events, "
            f"{len(scenario.expects)} expectations"
        )
    if "physicalCluster" in data or "hivedscheduler" in data or "virtualClusters" in data:
        config = load_cluster_config(path)
        nodes = config.nodes()
        return (
            f"{path}: cluster config OK: {len({n.name for n in nodes})} nodes, "
            f"{sum(len(n.gpus) for n in nodes)} GPUs, VCs {', '.join(sorted(config.vcs))}"
        )
    spec = load_job_file(path)
    return (
        f"{path}: job OK: {spec.name} in VC {spec.vc}, priority {spec.priority}, "
        f"{spec.task_count} tasks, {spec.total_gpus} GPUs, {'gang' if spec.gang else 'incremental'}"
    )
