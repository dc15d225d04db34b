"""The ``labhive`` command.

Each feature keeps its sub-commands in its own module, which defines ``register(subparsers)``
and sets ``func`` on its parsers; this file only assembles them. Handlers import what they need
lazily, so ``labhive --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from labhive import __version__
from labhive.scheduler.errors import UserError

#: Modules that contribute sub-commands, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "labhive.scheduler.scenario_cli",
    "labhive.scheduler.observe.strace_cli",
    "labhive.scheduler.sim.cli",
    "labhive.scheduler.service.commands",
    "labhive.scheduler.client_commands",
    "labhive.scheduler.image_cli",
    "labhive.scheduler.observe.monitoring_cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="labhive",
        description="Share a GPU cluster from Jupyter: scheduler, job service and simulator.",
    )
    parser.add_argument("--version", action="version", version=f"labhive {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except UserError as err:
        print(f"labhive {args.command}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
