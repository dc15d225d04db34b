"""``labhive serve`` (the service alone) and ``labhive up`` (JupyterHub, spawner and service)."""

from __future__ import annotations

import argparse
import os
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
        help="start the platform: JupyterHub + LabHive spawner + service, on localhost",
        description="Start JupyterHub with the LabHive spawner and the scheduler service as its "
        "managed service at /services/labhive/ (SQLite and the local executor in the data dir, "
        "this machine's GPUs or a virtual cluster); print the URL, the admin login and how to "
        "add users and groups. Ctrl-C stops the hub, the service and every job process.",
    )
    up.add_argument("--port", type=int, default=8000, help="the hub's port (default %(default)s)")
    up.add_argument("--service-port", type=int, default=8765, help="service port (default 8765)")
    up.add_argument("--data-dir", type=Path, default=Path("data"), help="default ./data")
    up.add_argument("--cluster", help="HiveD cluster config (default: this machine's GPUs)")
    up.add_argument("--policy", default="hived", help="scheduling policy (default hived)")
    up.add_argument(
        "--users", type=Path, help="group -> VC grants YAML (default: DATA/hub/grants.yaml)"
    )
    up.add_argument("--grace-s", type=float, default=10.0, help="SIGTERM -> SIGKILL delay")
    _notice_options(up, culler=True)
    up.add_argument(
        "--course",
        type=Path,
        help="a folder of course material (e.g. labs) copied into every user's home on their "
        "server's start, new files only (make up: labs)",
    )
    up.add_argument(
        "--course-data",
        type=Path,
        help="the course's data folder, LABHIVE_DATA in every server (make up: ../shared/data)",
    )
    up.set_defaults(func=_up)


def _serve_doc() -> str:
    return (
        "Run the LabHive scheduler service: REST API under /api/v1, the job store, the "
        "scheduling policy and the executor. Running tasks survive a restart of the service "
        "and are re-adopted."
    )


def _service_options(parser: argparse.ArgumentParser, stop_default: bool = False) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    parser.add_argument("--port", type=int, default=8765, help="port (default %(default)s)")
    parser.add_argument(
        "--db", help="a SQLite path or postgresql://... (default: SQLite in the data dir)"
    )
    parser.add_argument("--cluster", help="HiveD cluster config (default: this machine's GPUs)")
    parser.add_argument("--data-dir", type=Path, default=Path("data"), help="default ./data")
    parser.add_argument("--policy", default="hived", help="scheduling policy (default hived)")
    from labhive.scheduler.executors import k8s_serve, slurm_serve
    from labhive.scheduler.service.server import EXECUTORS

    parser.add_argument("--executor", default="local", choices=EXECUTORS, help="where tasks run")
    parser.add_argument("--users", type=Path, help="users/groups YAML (tokens, group -> VCs)")
    parser.add_argument(
        "--auth",
        choices=["token", "hub"],
        default="token",
        help="token: bearer tokens (admin token file, --users); hub: identity from JupyterHub, "
        "when run as a hub-managed service (--users then holds only the group -> VC grants)",
    )
    parser.add_argument("--grace-s", type=float, default=10.0, help="SIGTERM -> SIGKILL delay")
    _notice_options(parser)
    parser.add_argument(
        "--loop-stall-s",
        type=float,
        default=30.0,
        help="/health answers 503 degraded once the scheduler loop has not completed a pass "
        "for this long (a liveness probe then restarts the service; default 30)",
    )
    parser.add_argument(
        "--stops",
        choices=["tasks", "jobs"],
        default="tasks",
        help="tasks (default): preemption, lazy preemption and a node failure stop or downgrade "
        "only the tasks of an incremental job (or the affinity group) they hit, as HiveD does, "
        "where the executor can (local, bare or in containers; Kubernetes and Slurm stop whole "
        "jobs); jobs: whole jobs always (docs/scheduler-core.md, 'In the live service')",
    )
    parser.add_argument("--log-level", default="warning", help="uvicorn/service log level")
    parser.add_argument(
        "--gpu-sample-s",
        type=float,
        default=10.0,
        help="seconds between NVML GPU samples; 0 turns GPU sampling off (default 10)",
    )
    parser.add_argument(
        "--stop-tasks-on-exit",
        action="store_true",
        default=stop_default,
        help="on exit stop every job process (their jobs wait again) instead of leaving them "
        "running for the next start to re-adopt",
    )
    parser.add_argument(
        "--task-identity",
        choices=["users", "service"],
        default=os.environ.get("LABHIVE_TASK_IDENTITY", "users"),
        help="users (default; $LABHIVE_TASK_IDENTITY): a root service runs every task as its "
        "user's uid/gid; service: every task as the service's own user (no separation)",
    )
    parser.add_argument(
        "--first-uid", type=int, default=200000, help="allocated uids start here (200000)"
    )
    k8s_serve.add_options(parser)
    slurm_serve.add_options(parser)


def _options(args: argparse.Namespace) -> Any:
    from labhive.scheduler.executors import k8s_serve, slurm_serve
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
        auth=args.auth,
        grace_s=args.grace_s,
        stop_notice_s=args.stop_notice,
        loop_stall_s=args.loop_stall_s,
        partial_stops=args.stops == "tasks",
        stop_tasks_on_exit=args.stop_tasks_on_exit,
        log_level=args.log_level,
        gpu_sample_s=args.gpu_sample_s,
        executor_options={**k8s_serve.options_from(args), **slurm_serve.options_from(args)},
        task_identity=args.task_identity,
        first_uid=args.first_uid,
    )


def _serve(args: argparse.Namespace) -> int:
    from labhive.scheduler.service.server import run

    return run(_options(args))


def _up(args: argparse.Namespace) -> int:
    from labhive.hub_extension.up import run_up

    return run_up(
        args.data_dir, port=args.port, service_port=args.service_port, cluster=args.cluster,
        policy=args.policy, grants=args.users, grace_s=args.grace_s, course=args.course,
        course_data=args.course_data, culling=_culling(args),
    )  # fmt: skip


def _notice_options(parser: argparse.ArgumentParser, culler: bool = False) -> None:
    """Stop notices (service/notices.py) and, for ``labhive up``, the idle culling."""
    from labhive.scheduler.time_limits import parse_time_limit

    parser.add_argument(
        "--stop-notice", type=parse_time_limit, default=60.0, metavar="DURATION",
        help="notice before a stop: a time limit's comes this long before it; culls wait "
        "this long after theirs (default 60 s)",
    )  # fmt: skip
    if not culler:
        return
    parser.add_argument(
        "--cull-idle", type=parse_time_limit, default=7200.0, metavar="DURATION",
        help="jupyterhub-idle-culler stops servers idle this long (default 2h)",
    )  # fmt: skip
    parser.add_argument(
        "--cull-gpu-idle", type=parse_time_limit, default=900.0, metavar="DURATION",
        help="a server holding a GPU whose kernels are idle and GPU at 0%% this long gets a "
        "notice, then is stopped (default 15m)",
    )  # fmt: skip
    parser.add_argument("--no-cull", action="store_true", help="run no culler at all")


def _culling(args: argparse.Namespace) -> dict[str, float] | None:
    if args.no_cull:
        return None
    return {"idle_s": args.cull_idle, "gpu_idle_s": args.cull_gpu_idle,
            "notice_s": args.stop_notice}  # fmt: skip
