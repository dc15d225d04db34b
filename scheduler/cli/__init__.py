"""The ``labhive`` command.

Each feature keeps its sub-commands in its own module, which defines ``register(subparsers)``
and sets ``func`` on its parsers; this file only assembles them. Handlers import what they need
lazily, so ``labhive --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from labhive import __version__
from labhive.scheduler.core.errors import UserError
from labhive.scheduler.core.terminal import visible

#: What ``labhive`` exits with when its reader went away (``labhive jobs | head``): the status
#: of a process that SIGPIPE ended, as a shell pipeline expects.
EXIT_BROKEN_PIPE = 128 + 13
#: Where LabHive's own code lies: a bug is reported at its innermost frame there, not in the
#: standard library function it called.
_PACKAGE_DIRS = tuple(
    os.path.dirname(importlib.import_module(name).__file__ or "")
    for name in ("labhive.scheduler", "labhive")
)

#: Modules that contribute sub-commands, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "labhive.scheduler.cli.scenario_cli",
    "labhive.scheduler.observe.strace_cli",
    "labhive.scheduler.sim.cli",
    "labhive.scheduler.service.commands",
    "labhive.scheduler.cli.client_commands",
    "labhive.scheduler.cli.eta_cli",
    "labhive.scheduler.cli.image_cli",
    "labhive.scheduler.observe.monitoring_cli",
    "labhive.scheduler.service.journal.cli",
    "labhive.scheduler.service.journal.whatif_cli",
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
        code = int(func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
        return code
    except BrokenPipeError:
        return _reader_gone()
    except UserError as err:
        print(f"labhive {args.command}: {visible(str(err), keep_newlines=True)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # the last resort: a bug, said in one line
        print(bug_message(args.command, err), file=sys.stderr)
        return 2


def bug_message(command: str, err: BaseException) -> str:
    """One line for an exception no handler expected: it is LabHive's bug, not the user's
    mistake, and the file and line where it happened make the report useful."""
    frames = traceback.extract_tb(err.__traceback__)
    ours = [f for f in frames if f.filename.startswith(_PACKAGE_DIRS)] or frames
    where = f" at {os.path.basename(ours[-1].filename)}:{ours[-1].lineno}" if ours else ""
    text = visible(f"{type(err).__name__}: {err}")[:300]
    return (
        f"labhive {command}: internal error (a bug in LabHive, please report it with the input "
        f"that caused it): {text}{where}"
    )


def _reader_gone() -> int:
    """The reader of stdout closed the pipe: stop quietly. stdout is pointed at /dev/null so
    that the interpreter's final flush does not complain either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (captured in tests)
        pass
    finally:
        os.close(devnull)
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
