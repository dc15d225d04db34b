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
        "--fair-share",
        default="7d",
        metavar="HALF_LIFE",
        help="users of one VC share it fairly: waiting jobs in order of their users' recent GPU "
        "use, decayed with this half-life (default %(default)s; 'off': first come, first served)",
    )
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
    up.add_argument(
        "--authenticator",
        choices=["native", "pam", "external"],
        default="native",
        help="native (default): each user their own password, hashed in the hub's database; "
        "students sign up and an admin approves them, or `labhive hub adduser` makes them. "
        "pam: this machine's accounts and passwords. external: the authenticator that "
        "--hub-config sets (OAuth, LTI: docs/hub.md)",
    )
    up.add_argument(
        "--hub-config",
        type=Path,
        help="a jupyterhub_config.py read after LabHive's settings (say, an OAuth or LTI "
        "authenticator with --authenticator external)",
    )
    up.add_argument(
        "--roster",
        type=Path,
        help="a class list (YAML: students with optional password, groups, vcs; see "
        "docs/hub.md): each gets an approved login, generated passwords go to "
        "DATA/hub/roster-passwords.yaml (0600), a student without groups gets the default VC",
    )
    up.add_argument(
        "--admin", default="admin", help="the admin's hub user name (default %(default)s)"
    )
    up.add_argument(
        "--first-uid",
        type=int,
        help="the service's first allocated uid (labhive serve's default 200000): a second hub "
        "on this host needs a range of its own",
    )
    up.add_argument("--uid-count", type=int, help="how many uids the range holds (1000000)")
    _engine_options(up)
    up.set_defaults(func=_up)
    _hub_commands(subparsers)


def _hub_commands(subparsers: Any) -> None:
    hub = subparsers.add_parser("hub", help="manage the logins of a running `labhive up`")
    commands = hub.add_subparsers(dest="hub_command", metavar="HUB_COMMAND", required=True)
    add = commands.add_parser(
        "adduser",
        help="give a user their own password on the running hub (native logins)",
        description="Make NAME's hub account with their own password (generated and printed "
        "once, or read from --password-file), approved at once, in the groups given (each "
        "must grant VCs in the hub's grants file); without --group, in the course's default "
        "VC's group. An approved account keeps its password unless --reset. Needs the "
        "admin's token that `labhive up` wrote (DATA/admin.token).",
    )
    add.add_argument("name", help="the user's hub name")
    add.add_argument("--group", action="append", default=[], help="a hub group (repeatable)")
    add.add_argument(
        "--password-file", type=Path, help="read the password from this file ('-': stdin)"
    )
    add.add_argument(
        "--reset", action="store_true", help="set the password even if the account has one"
    )
    add.add_argument("--data-dir", type=Path, default=Path("data"), help="default ./data")
    add.set_defaults(func=_hub_adduser)


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
        "--db",
        help="a SQLite path or postgresql://USER@HOST/DB, without a password (every user can "
        "read a command line): default SQLite in the data dir",
    )
    parser.add_argument(
        "--db-file",
        type=Path,
        help="a file (mode 0600) holding the database URL, password included; or export "
        "LABHIVE_DB_URL=URL (removed from the service's environment once read)",
    )
    parser.add_argument("--cluster", help="HiveD cluster config (default: this machine's GPUs)")
    parser.add_argument("--data-dir", type=Path, default=Path("data"), help="default ./data")
    parser.add_argument("--policy", default="hived", help="scheduling policy (default hived)")
    parser.add_argument(
        "--task-path",
        action="append",
        type=Path,
        metavar="DIR",
        help="a directory under /tmp or /dev/shm that every task must still reach, though each "
        "task's own /tmp is private (repeatable; the data dir always is)",
    )
    parser.add_argument(
        "--fair-share",
        type=_half_life,
        metavar="HALF_LIFE",
        help="order each VC's waiting jobs by their users' recent GPU use, decayed with this "
        "half-life (say 7d; docs/policies.md); a cluster config's fairShare wins",
    )
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
        "--first-uid",
        type=int,
        default=200000,
        help="allocated uids start here (200000); the range is claimed for this host, and a "
        "second service whose range overlaps a live one's refuses to start",
    )
    parser.add_argument(
        "--uid-count",
        type=int,
        default=1_000_000,
        help="how many uids the range holds (1000000)",
    )
    _disk_options(parser)
    k8s_serve.add_options(parser)
    slurm_serve.add_options(parser)


def _size(text: str) -> int | None:
    from labhive.scheduler.core.sizes import parse_size

    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _keep(text: str) -> float | None:
    from labhive.scheduler.core.time_limits import parse_time_limit

    if text.strip().lower() in ("forever", "never", "off"):
        return None
    try:
        return parse_time_limit(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{err}, or forever") from None


def _disk_options(parser: argparse.ArgumentParser) -> None:
    """What a task may write and how long its files stay (docs/service.md, "Disk")."""
    parser.add_argument(
        "--output-cap",
        type=_size,
        default=_size("100M"),
        metavar="SIZE",
        help="keep this much of each task's stdout and of its stderr (local, Slurm; Kubernetes: "
        "what a log read serves); past it the log says so in one line and the rest is "
        "dropped (default 100M; off: no cap)",
    )
    parser.add_argument(
        "--output-cap-kills",
        action="store_true",
        help="stop a task whose output passes the cap (it fails), instead of dropping the rest",
    )
    parser.add_argument(
        "--work-quota",
        type=_size,
        default=_size("10G"),
        metavar="SIZE",
        help="what a local task's work dir may hold; over it the task is stopped and fails "
        "with 'over its disk quota' (measured every 5 s; default 10G; off: no quota)",
    )
    parser.add_argument(
        "--disk-reserve",
        type=_size,
        default=-1,
        metavar="SIZE",
        help="free space the data dir's file system keeps for the service: below it "
        "submissions get 507 'disk full' (default 200M or 1%% of the file system, whichever "
        "is smaller; off: never refuse)",
    )
    parser.add_argument(
        "--keep-work",
        type=_keep,
        default=7 * 86400.0,
        metavar="DURATION",
        help="remove a finished task's work dir this long after its end (its stdout/stderr "
        "stay with the job); e.g. 12h, 7d (default), forever",
    )
    parser.add_argument(
        "--journal-days",
        type=float,
        default=30.0,
        metavar="N",
        help="keep the event journal (what the policy was given and decided: `labhive twin "
        "check`) this many days (default %(default)g; 0: forever)",
    )


def _half_life(text: str) -> float:
    from labhive.scheduler.core.time_limits import parse_time_limit

    try:
        return parse_time_limit(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"a half-life {err}") from None


def _half_life_text(text: str) -> str:
    """The half-life as given, once checked (``labhive up`` hands it on to ``serve``)."""
    try:
        _half_life(text)
    except argparse.ArgumentTypeError as err:
        raise SystemExit(f"labhive up: --fair-share: {err} (or 'off')") from None
    return text


def _options(args: argparse.Namespace) -> Any:
    from labhive.scheduler.executors import k8s_serve, slurm_serve
    from labhive.scheduler.service.db_source import database_from
    from labhive.scheduler.service.server import ServeOptions

    return ServeOptions(
        host=args.host,
        port=args.port,
        db=database_from(args.db, args.db_file),
        cluster=args.cluster,
        data_dir=args.data_dir,
        policy=args.policy,
        fair_share_half_life=args.fair_share,
        task_paths=tuple(str(p) for p in args.task_path or ()),
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
        uid_count=args.uid_count,
        output_cap=args.output_cap,
        output_cap_kills=args.output_cap_kills,
        work_quota=args.work_quota,
        disk_reserve=args.disk_reserve,
        keep_work_s=args.keep_work,
        journal_days=None if args.journal_days <= 0 else args.journal_days,
    )


def _serve(args: argparse.Namespace) -> int:
    from labhive.scheduler.service.server import run

    return run(_options(args))


def _up(args: argparse.Namespace) -> int:
    from labhive.hub_extension.up import run_up
    from labhive.hub_extension.up_engine import Engine

    return run_up(
        args.data_dir, port=args.port, service_port=args.service_port, cluster=args.cluster,
        policy=args.policy, grants=args.users, grace_s=args.grace_s, course=args.course,
        course_data=args.course_data, authenticator=args.authenticator, admin=args.admin,
        fair_share=None if args.fair_share == "off" else _half_life_text(args.fair_share),
        roster=args.roster, hub_config=args.hub_config,
        first_uid=args.first_uid, uid_count=args.uid_count, culling=_culling(args),
        engine=Engine(args.executor, args.slurm_conf, args.partition, args.kubeconfig,
                      args.hub_ip),
    )  # fmt: skip


def _engine_options(up: argparse.ArgumentParser) -> None:
    """Where servers and jobs run (hub_extension/up_engine.py; docs/slurm.md, kubernetes/)."""
    group = up.add_argument_group("engine (servers and jobs on a Slurm or Kubernetes site)")
    group.add_argument(
        "--executor", choices=["local", "slurm", "kubernetes"], default="local",
        help="local (default): this machine; slurm: Slurm's nodes (sbatch); kubernetes: pods",
    )  # fmt: skip
    group.add_argument(
        "--slurm-conf", default=os.environ.get("SLURM_CONF"),
        help="the site's slurm.conf (default: $SLURM_CONF, then Slurm's own default)",
    )  # fmt: skip
    group.add_argument("--partition", help="Slurm partition (default: Slurm's default one)")
    group.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
    group.add_argument(
        "--hub-ip",
        help="the address the nodes reach this machine at (default: this machine's address on "
        "the route to the first Slurm node, or to the Kubernetes API server)",
    )


def _hub_adduser(args: argparse.Namespace) -> int:
    from labhive.hub_extension.hubusers import adduser_command

    return adduser_command(
        args.data_dir, args.name, groups=args.group, password_file=args.password_file,
        reset=args.reset,
    )  # fmt: skip


def _notice_options(parser: argparse.ArgumentParser, culler: bool = False) -> None:
    """Stop notices (service/notices.py) and, for ``labhive up``, the idle culling."""
    from labhive.scheduler.core.time_limits import parse_time_limit

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
