"""``labhive serve`` and the provisional ``labhive up`` (the JupyterHub helper extends ``up``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    serve = subparsers.add_parser(
        "serve", help="run the scheduler service (REST API) alone", description=_serve_doc()
    )
    _service_options(serve, stop_default=False)
    serve.set_defaults(func=_serve)
    up = subparsers.add_parser(
        "up",
        help="start the platform on embedded defaults (SQLite in ./data, local executor)",
        description="Start the service on embedded defaults and print how to use it; Ctrl-C "
        "stops the service and every job process (their jobs wait again for the next start).",
    )
    _service_options(up, stop_default=True)
    up.set_defaults(func=_up)


def _serve_doc() -> str:
    return (
        "Run the LabHive scheduler service: REST API under /api/v1, the job store, the "
        "scheduling policy and the executor. Running tasks survive a restart of the service "
        "and are re-adopted."
    )


def _service_options(parser: argparse.ArgumentParser, stop_default: bool) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    parser.add_argument("--port", type=int, default=8765, help="port (default %(default)s)")
    parser.add_argument(
        "--db", help="a SQLite path or postgresql://... (default: SQLite in the data dir)"
    )
    parser.add_argument("--cluster", help="HiveD cluster config (default: this machine's GPUs)")
    parser.add_argument("--data-dir", type=Path, default=Path("data"), help="default ./data")
    parser.add_argument("--policy", default="hived", help="scheduling policy (default hived)")
    parser.add_argument("--executor", default="local", choices=["local"], help="where tasks run")
    parser.add_argument("--users", type=Path, help="users/groups YAML (tokens, group -> VCs)")
    parser.add_argument("--grace-s", type=float, default=10.0, help="SIGTERM -> SIGKILL delay")
    parser.add_argument("--log-level", default="warning", help="uvicorn/service log level")
    parser.add_argument(
        "--gpu-sample-s",
        type=float,
        default=10.0,
        help="seconds between NVML GPU samples; 0 turns GPU sampling off (default 10)",
    )
    parser.set_defaults(stop_tasks_on_exit=stop_default)


def _options(args: argparse.Namespace) -> Any:
    from labhive.scheduler.service.server import ServeOptions

    return ServeOptions(
        host=args.host,
        port=args.port,
        db=args.db,
        cluster=args.cluster,
        data_dir=args.data_dir,
        policy=args.policy,
        executor=args.executor,
        users=args.users,
        grace_s=args.grace_s,
        stop_tasks_on_exit=args.stop_tasks_on_exit,
        log_level=args.log_level,
        gpu_sample_s=args.gpu_sample_s,
    )


def _serve(args: argparse.Namespace) -> int:
    from labhive.scheduler.service.server import run

    return run(_options(args))


def _up(args: argparse.Namespace) -> int:
    from labhive.scheduler.service.server import describe, run

    def banner(running: Any) -> str:
        return "\n".join(
            [
                describe(running),
                "  try:   labhive submit --gpus 1 --name hello -- echo hello",
                "         labhive jobs; labhive logs 1",
            ]
        )

    return run(_options(args), banner=banner)
