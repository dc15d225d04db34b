"""``labhive image build | ls | rm``: the images jobs run in (see ``images.py``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def register(subparsers: Any) -> None:
    image = subparsers.add_parser("image", help="build, list and remove the images jobs run in")
    sub = image.add_subparsers(dest="image_command", metavar="ACTION")
    image.set_defaults(func=lambda _: image.print_help() or 2)
    build = sub.add_parser(
        "build", help="build an image from Debian packages (mmdebstrap + podman import)"
    )
    build.add_argument("name", help="image name; jobs use labhive/NAME")
    build.add_argument("--packages", default="", help="comma-separated Debian packages")
    build.add_argument("--suite", default="bookworm", help="Debian suite (default bookworm)")
    build.add_argument("--mirror", help="Debian mirror URL (default: mmdebstrap's)")
    build.set_defaults(func=_build)
    ls = sub.add_parser("ls", help="list the images jobs can name")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=_ls)
    rm = sub.add_parser("rm", help="remove an image")
    rm.add_argument("name")
    rm.set_defaults(func=_rm)


def _build(args: argparse.Namespace) -> int:
    from labhive.scheduler.executors import images

    started = time.monotonic()

    def progress(line: str) -> None:
        print(f"[{time.monotonic() - started:5.0f}s] {line}", flush=True)

    packages = images.parse_packages(args.packages)
    images.build(args.name, packages, suite=args.suite, mirror=args.mirror, progress=progress)
    return 0


def _ls(args: argparse.Namespace) -> int:
    from labhive.scheduler.cli.client_commands import table
    from labhive.scheduler.executors import images

    found = images.list_images()
    if args.json:
        print(json.dumps([{"name": i.name, "id": i.id, "size": i.size} for i in found], indent=2))
        return 0
    rows = [(i.name, i.id, f"{i.size / (1 << 20):.0f} MiB") for i in found]
    print(table(["IMAGE", "ID", "SIZE"], rows) if rows else "no images: labhive image build NAME")
    return 0


def _rm(args: argparse.Namespace) -> int:
    from labhive.scheduler.executors import images

    images.remove(args.name)
    print(f"removed {images.qualified(args.name)}", file=sys.stderr)
    return 0
