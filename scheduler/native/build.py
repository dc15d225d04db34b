"""Builds the compiled modules that ``native/__init__.py`` lists and guards (its docstring says
why). ``python -m labhive.scheduler.native.build [build|status|check|clean]``; ``make native``
runs ``build --optional``; ``check`` exits 0 only when the compiled modules load (``make test``
then runs the white-box ``sources`` tests again, against the sources). Kept apart from the
guard, which every ``import labhive`` reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from labhive.scheduler.native import (
    GROUP,
    HERE,
    MANIFEST,
    MODULES,
    Status,
    build_key,
    built,
    clean,
    source_digests,
    status,
)

#: The setup run in the scratch folder: ``python -c _SETUP JOBS [mypy options] PATHS...``. It
#: runs in a child so that setuptools reads no pyproject.toml and keeps its state out of ours.
_SETUP = f"""
import sys
from setuptools import setup
from mypyc.build import mypycify
jobs, args = sys.argv[1], sys.argv[2:]
setup(name="labhive-native", script_args=["build_ext", "--inplace", "-j", jobs],
      ext_modules=mypycify(args, opt_level="3", group_name="{GROUP}"))
"""


def build(jobs: int = 0, *, force: bool = False) -> Status:
    """Compile ``MODULES`` in place with mypyc and write the manifest (a few minutes on 2 cores).

    mypyc names a module by its path under the working directory, so the build runs in a
    scratch folder holding ``labhive/scheduler`` as a link to this package: the extensions land
    beside their sources through the link, and mypyc's C files stay in the scratch folder. The
    type check reads the checkout's mypy settings (pyproject.toml) when there is one. Nothing
    is done while the build matches the sources (``force`` builds anyway)."""
    if not force and built().compiled:
        return status()
    clean()
    digests = source_digests()
    with tempfile.TemporaryDirectory(prefix="labhive-native-") as tmp:
        root = Path(tmp) / "labhive"
        root.mkdir()
        (root / "__init__.py").write_text("")
        (root / "scheduler").symlink_to(HERE, target_is_directory=True)
        config = HERE.parent / "pyproject.toml"
        options = ["--config-file", str(config)] if config.exists() else []
        paths = [f"labhive/scheduler/{rel}" for rel in MODULES]
        done = subprocess.run(
            [sys.executable, "-c", _SETUP, str(jobs or os.cpu_count() or 1), *options, *paths],
            cwd=tmp,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            clean()
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-25:])
            raise BuildError(f"mypyc failed (exit {done.returncode}); the last lines:\n{tail}")
    if source_digests() != digests:
        clean()
        raise BuildError("a source changed while it was being compiled: build again")
    MANIFEST.write_text(json.dumps({"build": build_key(), "sources": digests}, indent=1) + "\n")
    return status()


class BuildError(RuntimeError):
    """The compiled modules could not be built; LabHive runs as plain Python meanwhile."""


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m labhive.scheduler.native.build",
        description="Build, check or remove the simulator's mypyc-compiled modules.",
    )
    parser.add_argument("action", choices=("build", "status", "check", "clean"))
    parser.add_argument("--jobs", type=int, default=0, help="C compiler processes (all cores)")
    parser.add_argument("--force", action="store_true", help="build even when up to date")
    parser.add_argument(
        "--optional",
        action="store_true",
        help="a failed build warns and leaves plain Python instead of failing (make's default)",
    )
    args = parser.parse_args(argv)
    if args.action == "clean":
        clean()
    elif args.action == "build":
        try:
            build(args.jobs, force=args.force)
        except (BuildError, ImportError, OSError) as exc:
            print(f"labhive native: {exc}", file=sys.stderr)
            if not args.optional:
                return 1
            print(
                "labhive native: running as plain Python (slower simulations); the build needs"
                " mypy (the dev extra), a C compiler and Python's headers (Debian: apt-get"
                " install gcc python3-dev), then `make native`",
                file=sys.stderr,
            )
    now = status()
    print(f"labhive native: {now}")
    return 1 if args.action == "check" and not now.compiled else 0


if __name__ == "__main__":
    sys.exit(main())
