"""Assemble and run the service: cluster, policy, store, executor, loop, REST app, uvicorn.

``labhive serve`` and ``labhive up`` both come through ``run``; tests that need the real thing
in a subprocess do too.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import Scheduler
from labhive.scheduler.core.sizes import MIB
from labhive.scheduler.executors.base import Executor
from labhive.scheduler.executors.capabilities import (
    DeviceGuard,
    NodeHealth,
    OutputCapped,
    TaskAddresses,
)
from labhive.scheduler.executors.gpu_share_env import sharing_note

EXECUTORS = ("local", "kubernetes", "slurm")
TASK_IDENTITIES = ("users", "service")
log = logging.getLogger("labhive.service")


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8765
    db: str | None = None
    cluster: str | None = None
    data_dir: Path = field(default_factory=lambda: Path("data"))
    policy: str = "hived"
    #: ``--fair-share 7d``: HiveD orders each VC's waiting jobs by their users' recent usage
    #: (``fairShare`` in the cluster config, whose own setting wins); None: as the config says.
    fair_share_half_life: float | None = None
    #: Host directories under /tmp that tasks must still reach though each task's /tmp is its
    #: own (``--task-path``; ``labhive up`` names its data dir: homes, servers' launch files).
    task_paths: tuple[str, ...] = ()
    executor: str = "local"
    users: Path | None = None
    auth: str = "token"  # "hub": identity from JupyterHub (run as a hub-managed service)
    grace_s: float = 10.0
    stop_notice_s: float = 60.0  # a time limit's notice comes this long before it
    loop_stall_s: float = 30.0  # /health is 503 "degraded" past this long without a pass
    #: Stop or downgrade only the tasks preemption or a node failure hits (``--stops tasks``,
    #: the default), where the executor can; False: whole jobs (``--stops jobs``).
    partial_stops: bool = True
    stop_tasks_on_exit: bool = False
    log_level: str = "warning"
    gpu_sample_s: float = 10.0  # NVML sampling interval; 0 turns GPU sampling off
    executor_options: dict[str, Any] = field(default_factory=dict)  # kubernetes, slurm
    #: "users": each task runs as its user's uid/gid (when the service is root); "service": as
    #: the service's own user, users not separated (the test suite's default: see conftest.py)
    task_identity: str = field(
        default_factory=lambda: os.environ.get("LABHIVE_TASK_IDENTITY", "users")
    )
    first_uid: int = 200000  # allocated uids start here (service/accounts.py)
    uid_count: int = 1_000_000  # ... and end before first_uid + uid_count (claimed per host)
    # Disk (docs/service.md, "Disk"): None turns each off.
    output_cap: int | None = 100 * MIB  # per stream of each local task
    output_cap_kills: bool = False  # stop a task whose output passes the cap
    work_quota: int | None = 10 * 1024 * MIB  # per local task's work dir
    disk_reserve: int | None = -1  # -1: 200 MiB or 1% of the data dir's file system
    keep_work_s: float | None = 7 * 86400.0  # finished tasks' work dirs go after this
    journal_days: float | None = 30.0  # the event journal's passes go after this (None: never)


@dataclass
class Running:
    """What ``build`` made, for the banner and for tests."""

    service: Any
    app: Any
    url: str
    token_file: Path
    token_created: bool
    database: str
    virtual: bool
    tasks_run_as: str = ""
    gpu_devices: str = ""


def make_executor(
    name: str, data_dir: Path, grace_s: float, opts: ServeOptions | None = None, config: Any = None
) -> Executor:
    if name == "local":
        from labhive.scheduler.executors.local import LocalExecutor

        # pids per task: the host's share for tasks split by how many may run at once here
        slots = max(os.cpu_count() or 1, config.total_gpus() if config is not None else 0)
        paths = [Path(p) for p in opts.task_paths] if opts is not None else []
        return LocalExecutor(data_dir, grace_s=grace_s, task_slots=slots, task_paths=paths)
    if name == "kubernetes":
        from labhive.scheduler.executors.k8s_serve import kubernetes_executor

        opts = opts or ServeOptions()
        k8s: Executor = kubernetes_executor(opts.executor_options, config, bool(opts.cluster))
        return k8s
    if name == "slurm":
        from labhive.scheduler.executors.slurm_serve import slurm_executor

        opts = opts or ServeOptions()
        slurm: Executor = slurm_executor(
            opts.executor_options, config, bool(opts.cluster), data_dir, grace_s
        )
        return slurm
    raise UserError(f"unknown executor {name!r}; choose one of: {', '.join(EXECUTORS)}")


def launch_builder_for(executor: str, config: Any) -> Any:
    """On a machine with NVIDIA GPUs, local tasks get exactly their devices, by UUID.
    (Hook owned by the local executor; the default launches already carry ``task_env``.)"""
    if executor != "local" or config.virtual:
        return None
    from functools import partial

    from labhive.scheduler.executors.env import nvml_uuids, with_device_uuids
    from labhive.scheduler.service.loop import default_launches

    uuids = nvml_uuids()
    return with_device_uuids(
        partial(default_launches, virtual=False), {n.name: uuids for n in config.nodes()}
    )


def image_check_for(executor: str, check: Callable[[JobSpec], None]) -> Callable[[JobSpec], None]:
    """The local executor runs a job's image from podman's storage: a job naming one it does
    not have is refused at submit, with the names of those it has (see ``images.py``)."""
    if executor != "local":
        return check
    from labhive.scheduler.executors.images import Catalog

    catalog = Catalog()

    def checked(spec: JobSpec) -> None:
        check(spec)
        if spec.image:
            catalog.check(spec.image)

    return checked


def build(opts: ServeOptions, make_policy: Callable[[Any], Scheduler] | None = None) -> Running:
    """Everything but the HTTP server; the loop is not started yet. ``make_policy`` (a cluster
    config -> a ``Scheduler``) replaces the policy registry's ``opts.policy``."""
    from labhive.scheduler.core.config import load_cluster_config
    from labhive.scheduler.core.detect import default_cluster
    from labhive.scheduler.core.jobs import SpecError, parse_job, with_vc_limits
    from labhive.scheduler.policies import admission, get_policy
    from labhive.scheduler.service.accounts import Accounts, load_configured, load_members
    from labhive.scheduler.service.app import Service, create_app
    from labhive.scheduler.service.auth import (
        Authenticator,
        BrowserLogin,
        TokenAuthenticator,
        ensure_admin_token,
        load_grants,
        load_users,
    )
    from labhive.scheduler.service.datadir import (
        check_private,
        secure_data_dir,
        secure_sqlite,
    )
    from labhive.scheduler.service.loop import SchedulerLoop
    from labhive.scheduler.service.store import Store, database_url

    if opts.task_identity not in TASK_IDENTITIES:
        raise UserError(
            f"unknown task identity {opts.task_identity!r}; choose one of: users, service"
        )
    data_dir = secure_data_dir(Path(opts.data_dir).resolve())
    if opts.users and opts.auth == "token" and opts.task_identity == "users":
        check_private(Path(opts.users), "users' tokens")
    config = load_cluster_config(opts.cluster) if opts.cluster else default_cluster()
    config = with_fair_share(config, opts.fair_share_half_life)
    default_vc = "default" if "default" in config.vcs else next(iter(config.vcs), "default")
    policy = make_policy or (lambda cfg: get_policy(opts.policy, cfg))
    # Every submission is checked once, here at intake, by what the config says alone (HiveD's
    # ``Admission``); the loop's policy takes it as admitted and does not check it again.
    check = admission(opts.policy, config) if make_policy is None else make_policy(config).check

    def parse(doc: dict[str, Any]) -> JobSpec:
        spec = parse_job(doc, default_vc=default_vc)
        try:  # the VC's time limits (a default, a maximum)
            return with_vc_limits(spec, config.vcs.get(spec.vc), strict=True)
        except ValueError as err:
            raise SpecError(str(err)) from None

    def load_spec(row: dict[str, Any]) -> JobSpec:
        spec = parse_job(row["spec"], default_vc=default_vc)
        spec = with_vc_limits(spec, config.vcs.get(spec.vc), strict=False)
        return dataclasses.replace(spec, user=row["user"], name=row["name"])

    url = database_url(opts.db, data_dir)
    store = Store(url)
    with secure_sqlite(store):
        store.migrate()
    members = load_members(opts.users) if opts.auth == "token" else None
    accounts = Accounts(
        store, load_configured(opts.users), opts.first_uid, opts.uid_count, members=members
    )
    accounts.sync()
    if separates_users(opts):  # before any task is launched or adopted under those uids
        from labhive.scheduler.service import uid_claims

        uid_claims.claim(data_dir, *accounts.claimed_span(), users=accounts.configured_uids())
    token_file = data_dir / "admin.token"
    token, created = ensure_admin_token(token_file)
    auth: Authenticator
    if opts.auth == "hub":
        # Identity from JupyterHub (tokens and OAuth cookies resolved over its REST API): the
        # resolver lives with the hub integration, imports no Jupyter code, and implements
        # auth's Authenticator, which knows nothing of it.
        from labhive.hub_extension.hubauth import HubAuthenticator

        auth = HubAuthenticator.from_environment(load_grants(opts.users))
    elif opts.auth == "token":
        auth = TokenAuthenticator(token, load_users(opts.users), token_file)
    else:
        raise UserError(f"unknown --auth {opts.auth!r}; choose token or hub")
    executor = make_executor(opts.executor, data_dir, opts.grace_s, opts, config)
    from labhive.scheduler.executors.gpu_share_env import MigGpus
    from labhive.scheduler.service.eta import EtaTracker
    from labhive.scheduler.service.monitoring import LoopCounters, Monitoring

    def forecast(loop: SchedulerLoop) -> EtaTracker | None:
        if os.environ.get("LABHIVE_ETA", "on") == "off":  # off: to measure what ETAs cost
            return None
        return EtaTracker(store, loop, loop.new_policy, load_spec, check=check)

    counters = LoopCounters(store)
    mig = MigGpus()  # GPUs NVML reports in MIG mode: no shares are launched on them
    loop = SchedulerLoop(
        store,
        lambda: policy(config),
        executor,
        load_spec,
        virtual=config.virtual,
        grace_s=opts.grace_s,
        launch_builder=_with_identity(opts, config, accounts, mig),
        node_events=executor.node_events if isinstance(executor, NodeHealth) else None,
        addresses=executor.addresses if isinstance(executor, TaskAddresses) else None,
        partial_stops=opts.partial_stops,
        stop_notice_s=opts.stop_notice_s,
        observers=[counters],
        forecast=forecast,
        journal=os.environ.get("LABHIVE_JOURNAL", "on") != "off",  # off: to measure its cost
    )
    monitoring = Monitoring(store, loop, interval_s=opts.gpu_sample_s, counters=counters, mig=mig)
    disk, housekeeping = _housekeeping(opts, store, data_dir, executor, config)
    service = Service(
        store, loop, executor, auth, parse, image_check_for(opts.executor, check),
        policy=opts.policy, monitoring=monitoring, loop_stall_s=opts.loop_stall_s,
        accounts=accounts if opts.task_identity == "users" else None, owners=accounts,
        disk=disk, housekeeping=housekeeping, gpu_sharing_note=sharing_note(config.gpu_sharing),
    )  # fmt: skip
    app = create_app(service)
    if isinstance(auth, BrowserLogin):  # hub mode: the hub's prefix and its OAuth flow for browsers
        app = auth.wrap(app)
    return Running(
        service=service,
        app=app,
        url=f"http://{opts.host}:{opts.port}/api/v1",
        token_file=token_file,
        token_created=created,
        database=store.engine.url.render_as_string(hide_password=True),
        virtual=config.virtual,
        tasks_run_as=tasks_run_as(opts),
        gpu_devices=gpu_devices(executor, config.virtual),
    )


def _housekeeping(
    opts: ServeOptions, store: Any, data_dir: Path, executor: Executor, config: Any
) -> tuple[Any, Any]:
    """The data dir's disk guard (the store frees its reserve before writing on a full disk),
    the local executor's disk limits (the service's options, the VCs' ``disk:``), and the
    thread that tends the guard and removes finished tasks' work dirs (not started here)."""
    from labhive.scheduler.executors.local import LocalExecutor
    from labhive.scheduler.service.diskspace import DiskGuard
    from labhive.scheduler.service.housekeeping import Housekeeping
    from labhive.scheduler.service.journal.retention import JournalRetention
    from labhive.scheduler.service.retention import WorkRetention

    days = opts.journal_days
    journal = JournalRetention(store, None if days is None else days * 86400.0)
    disk = DiskGuard(data_dir, opts.disk_reserve)
    store.before_write = disk.make_room
    if not isinstance(executor, LocalExecutor):
        if isinstance(executor, OutputCapped):  # Slurm's run scripts, Kubernetes' log reads
            executor.output_cap = opts.output_cap
        return disk, Housekeeping(disk, None, journal=journal)
    executor.disk_check = disk.launch_refusal  # no launches into the store's last reserve
    executor.output_cap, executor.work_quota = opts.output_cap, opts.work_quota
    executor.output_cap_kills = opts.output_cap_kills
    executor.vc_disk = {vc.name: (vc.output_cap, vc.work_quota) for vc in config.vcs.values()}
    retention = WorkRetention(store, data_dir, opts.keep_work_s)
    return disk, Housekeeping(disk, retention, journal=journal)


def _with_identity(opts: ServeOptions, config: Any, accounts: Any, mig: Any = None) -> Any:
    """The launch builder, with every task's uid/gid filled in unless tasks run as the
    service's own user."""
    from functools import partial

    from labhive.scheduler.executors.gpu_share_env import with_gpu_shares
    from labhive.scheduler.service.loop import default_launches

    builder = launch_builder_for(opts.executor, config)
    # A GPU share's tasks get its variables (MPS limits when ``gpuSharing: mps``); a share on
    # a GPU in MIG mode is refused (``mig``: what the GPU sampler saw).
    builder = with_gpu_shares(
        builder or partial(default_launches, virtual=config.virtual), config.gpu_sharing, mig
    )
    if opts.task_identity != "users":
        return builder
    return accounts.filling(builder)


def unreachable_python(opts: ServeOptions) -> str:
    """Why users' uids cannot run this Python (jobs and notebook servers that use it would
    fail with "Permission denied"), or "" when they can or tasks do not switch uids."""
    if opts.task_identity != "users" or os.geteuid() != 0:
        return ""
    exe = Path(sys.executable).resolve()
    for path in (exe, *exe.parents):
        if not path.stat().st_mode & 0o001:
            return (
                f"tasks run as users' uids cannot execute {sys.executable} ({path} is not open "
                "to other users): jobs and notebook servers using it will fail with 'Permission "
                "denied'; install LabHive where every uid can run it (/usr, /opt), or start with "
                "--task-identity service (then users are not separated)"
            )
    return ""


def separates_users(opts: ServeOptions) -> bool:
    """Whether tasks run as their users' own uids (else all as the service's)."""
    return opts.task_identity == "users" and os.geteuid() == 0


def tasks_run_as(opts: ServeOptions) -> str:
    """Whom tasks run as, in words for the start-up banner and log (the trust model)."""
    me = os.geteuid()
    if separates_users(opts):
        last = opts.first_uid + opts.uid_count - 1
        return (
            f"each user's own uid/gid (configured, or allocated from {opts.first_uid}-{last}, "
            "claimed for this host)"
        )
    why = (
        "--task-identity service was chosen"
        if opts.task_identity != "users"
        else "the service is not root, so it cannot switch uids"
    )
    return (
        f"uid {me}, the service's own ({why}): users are NOT separated, every job can read "
        "the data dir, other users' output and the tokens"
    )


def gpu_devices(executor: Executor, virtual: bool) -> str:
    """How tasks are kept to their own GPU device nodes, in words for the banner and log;
    "" for executors whose cluster manager does that (Slurm's cgroups, Kubernetes' plugin)."""
    if not isinstance(executor, DeviceGuard):
        return ""
    how = str(executor.limit_support.devices_enforced())
    if virtual:
        return f"virtual cluster, no task may open an NVIDIA device: {how}"
    return how


def run(opts: ServeOptions, banner: Callable[[Running], str] | None = None) -> int:
    """Serve until SIGINT/SIGTERM, then stop the loop (and the tasks, when asked)."""
    import uvicorn

    logging.basicConfig(level=opts.log_level.upper(), format="%(asctime)s %(name)s: %(message)s")
    running = build(opts)
    if "NOT separated" in running.tasks_run_as:
        log.warning("tasks run as %s", running.tasks_run_as)
    if problem := unreachable_python(opts):
        log.warning("%s", problem)
    if "NOT enforced" in running.gpu_devices:
        log.warning("GPU devices: %s", running.gpu_devices)
    config = uvicorn.Config(
        running.app,
        host=opts.host,
        port=opts.port,
        log_level=opts.log_level,
        access_log=False,
        # Nothing reads the client's address (identity is the bearer token), so uvicorn need
        # not rewrite it from X-Forwarded-* on every request.
        proxy_headers=False,
        lifespan="off",
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    sock = _bind(opts.host, opts.port)
    running.service.loop.start()
    running.service.monitoring.start()  # no-op without an NVIDIA driver
    running.service.housekeeping.start()
    try:
        print((banner or describe)(running), flush=True)
        server.run(sockets=[sock])
    finally:
        running.service.housekeeping.stop()
        running.service.monitoring.stop()
        running.service.intake.close()
        running.service.loop.stop(stop_tasks=opts.stop_tasks_on_exit)
        running.service.store.dispose()
    return 0 if server.started else 1


def _bind(host: str, port: int) -> socket.socket:
    """Bind before announcing the URL, so a busy port is a clear error, not a log line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port} ({err.strerror}); pick --port") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def describe(running: Running) -> str:
    created = " (created now, mode 0600)" if running.token_created else ""
    kind = "virtual cluster (GPU slots, nothing computes)" if running.virtual else "cluster"
    return "\n".join(
        [
            f"LabHive service at {running.url}",
            f"  admin token: {running.token_file}{created}",
            f"  database:    {running.database}",
            f"  tasks run as {running.tasks_run_as}",
            *([f"  GPU devices: {running.gpu_devices}"] if running.gpu_devices else []),
            f"  {kind}; Ctrl-C stops the service",
            f"  export LABHIVE_URL={running.url} LABHIVE_TOKEN_FILE={running.token_file}",
        ]
    )


if __name__ == "__main__":  # pragma: no cover - used by `python -m` in tests
    sys.exit(run(ServeOptions()))


def with_fair_share(config: Any, half_life: float | None) -> Any:
    """The config with ``fairShare: {halfLife: half_life}`` when it names no fair share of its
    own (``labhive serve --fair-share``; ``labhive up`` turns it on for a class)."""
    from labhive.scheduler.core.config import FairShare

    if half_life is None or config.fair_share is not None:
        return config
    return dataclasses.replace(config, fair_share=FairShare(half_life))
