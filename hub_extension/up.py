"""``labhive up``: the whole platform on localhost, from embedded defaults.

JupyterHub (with configurable-http-proxy) runs the LabHive spawner, and the scheduler service
runs as its managed service at ``/services/labhive/`` (SQLite and the local executor in the data
dir, this machine's GPUs or the virtual default cluster). Secrets are made once and kept
(0600) in ``DATA/hub``, so a restart keeps logins and tokens. Nothing is installed at run
time: a missing proxy is an error that says how to install it.

Ctrl-C stops it all in order: every notebook server (cancelling its job), then the hub, which
stops the service, which stops every remaining job process (their jobs wait for the next start).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from labhive.hub_extension.hubconfig import HubPlan, write_config
from labhive.hub_extension.up_engine import Engine, hub_lines, prepare_engine
from labhive.scheduler.core.errors import UserError

DEFAULT_GRANTS = """\
# Which VCs each JupyterHub group may use (LabHive reads group membership from the hub).
# The group "*" applies to everyone; "admin: true" makes a group LabHive admins.
groups:
  "*": {vcs: [default]}
  instructors: {vcs: ["*"], admin: true}
  vc1: {vcs: [vc1]}
"""
UP_SERVICE = "labhive-up"
COURSE_GRANTS = "grants-course.yaml"  # the grants and the course's VC groups: the service's
ROSTER_PASSWORDS = "roster-passwords.yaml"  # the roster's generated passwords, 0600


def prepare(
    data_dir: Path,
    *,
    port: int = 8000,
    service_port: int = 8765,
    cluster: str | None = None,
    policy: str = "hived",
    grants: Path | None = None,
    grace_s: float = 10.0,
    course: Path | None = None,
    course_data: Path | None = None,
    authenticator: str = "native",
    admin: str = "admin",
    roster: Path | None = None,
    hub_config: Path | None = None,
    first_uid: int | None = None,
    uid_count: int | None = None,
    fair_share: str | None = "7d",
    culling: dict[str, float] | None = None,
    engine: Engine | None = None,
) -> tuple[HubPlan, Path, dict[str, str]]:
    """Write the hub's config (and first-start secrets and grants); return the plan, the
    config file and the secrets."""
    if shutil.which("configurable-http-proxy") is None:
        raise UserError(
            "configurable-http-proxy is not installed (JupyterHub's proxy): install it with "
            "`npm install -g configurable-http-proxy` (`make test` does, through .ci/deps.sh)"
        )
    for folder, option in ((course, "--course"), (course_data, "--course-data")):
        if folder is not None and not Path(folder).is_dir():
            raise UserError(f"{option} {folder}: no such folder; give an existing one")
    hub_dir = data_dir.resolve() / "hub"
    hub_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(data_dir, 0o711)  # homes and the service's task dirs lie below: pass, don't list
    os.chmod(hub_dir, 0o711)
    keys = _secrets(hub_dir / "secrets.json")
    site = prepare_engine(engine or Engine(), cluster, hub_dir)
    cluster = site.cluster
    if grants is None:
        grants = hub_dir / "grants.yaml"
        if not grants.exists():
            grants.write_text(DEFAULT_GRANTS)
    if authenticator == "external" and hub_config is None:
        raise UserError(
            "--authenticator external needs --hub-config FILE, a file that sets "
            "c.JupyterHub.authenticator_class (OAuth, LTI: docs/hub.md, 'Logins')"
        )
    if hub_config is not None and not Path(hub_config).is_file():
        raise UserError(f"--hub-config {hub_config}: no such file")
    if roster is not None and authenticator != "native":
        raise UserError(
            "--roster gives students passwords, which only --authenticator native keeps; under "
            f"{authenticator} add the students' accounts on the hub's admin page"
        )
    setup = _course(hub_dir, Path(grants).resolve(), cluster, roster)
    plan = HubPlan(
        data_dir=str(hub_dir),
        service_token=keys["service_token"],
        public_port=port,
        hub_port=_free_port(),
        proxy_api_port=_free_port(),
        service_port=service_port,
        grants=str(setup.grants),
        grants_source=str(Path(grants).resolve()),
        groups=setup.groups,
        passwords=setup.passwords,
        default_group=setup.default_group,
        roster=str(Path(roster).resolve()) if roster else None,
        cluster=str(Path(cluster).resolve()) if cluster else None,
        policy=policy,
        authenticator=authenticator,
        admin_users=[admin],
        first_uid=first_uid,
        uid_count=uid_count,
        fair_share=fair_share,
        admin_password=keys["admin_password"],
        cleanup_servers=True,
        stop_tasks_on_exit=True,
        grace_s=grace_s,
        log_level="WARN",
        notebook_dir=str(data_dir.resolve() / "home" / "{username}"),
        course_dir=str(Path(course).resolve()) if course else None,
        course_data=str(Path(course_data).resolve()) if course_data else None,
        service_args=site.service_args,
        engine_lines=site.lines,
    )
    up_args = f"{str(hub_dir / 'secrets.json')!r}, {plan.admin_users!r}"
    config = write_config(
        plan,
        hub_dir,
        "from labhive.hub_extension.up import add_up_service",
        f"add_up_service(c, {up_args})  # noqa: F821",
        *_culling_lines(plan, culling),
        *hub_lines(site, plan.public_port, plan.hub_port),
        *_hub_config_lines(hub_config),  # last: the instructor's own settings win
    )
    return plan, config, keys


def _hub_config_lines(hub_config: Path | None) -> list[str]:
    """The instructor's own hub settings, read last so they win (an OAuth authenticator)."""
    if hub_config is None:
        return []
    return [f"load_subconfig({str(Path(hub_config).resolve())!r})  # noqa: F821"]


@dataclass(frozen=True)
class _CourseSetup:
    grants: Path
    default_group: str | None  # the default VC's group; None where the grants say otherwise
    groups: dict[str, list[str]]
    passwords: dict[str, str]


def _course(hub_dir: Path, grants: Path, cluster: str | None, roster: Path | None) -> _CourseSetup:
    """The grants the service reads, with a group for the default VC (the first of the
    cluster's, or the roster's ``default_vc``: where ``labhive hub adduser`` puts a student
    given no group) and for each VC the roster puts students in; the roster's groups and
    initial passwords."""
    from labhive.hub_extension.roster import course_grants, load_roster, plan_course
    from labhive.scheduler.service.auth import load_grants

    vcs = _cluster_vcs(cluster)
    given = {name: grant.vcs for name, grant in load_grants(grants).items()}
    if roster is None:  # no class list: a grants file that names its groups otherwise wins
        default, groups, passwords = vcs[0], {}, {}
        fits = default not in given or default in given[default]
        needed, default_group = ([default], default) if fits else ([], None)
    else:
        course = plan_course(load_roster(roster), vcs, given, hub_dir / ROSTER_PASSWORDS)
        default, groups, passwords = course.default_vc, course.groups, course.passwords
        needed, default_group = [default, *course.vc_groups], default
    missing = sorted({group for group in needed if group not in given})
    effective = course_grants(grants, missing, hub_dir / COURSE_GRANTS)
    return _CourseSetup(effective, default_group, groups, passwords)


def _cluster_vcs(cluster: str | None) -> list[str]:
    """The VCs the service will run, in the cluster config's order."""
    from labhive.scheduler.core.config import load_cluster_config
    from labhive.scheduler.core.detect import default_cluster

    config = load_cluster_config(cluster) if cluster else default_cluster()
    return list(config.vcs)


def _culling_lines(plan: HubPlan, culling: dict[str, float] | None) -> list[str]:
    """The cullers as hub-managed services (hub_extension/culling.py); none when off."""
    if culling is None:
        return []
    args = f"{plan.service_url!r}, {plan.public_url!r}, **{culling!r}"
    return [
        "from labhive.hub_extension.culling import add_culling",
        f"add_culling(c, {args})  # noqa: F821",
    ]


def add_up_service(c: Any, secrets_file: str, admins: list[str] | None = None) -> None:
    """A token for ``labhive up`` itself: it stops every server on Ctrl-C, before the hub, and
    makes the admins' API token for the CLI and papermill (``admin_token``)."""
    token = json.loads(Path(secrets_file).read_text())["up_token"]
    c.JupyterHub.services.append({"name": UP_SERVICE, "api_token": token})
    tokens = [f"tokens!user={name}" for name in admins or ["admin"]]
    c.JupyterHub.load_roles.append(
        {
            "name": "labhive-up",
            "scopes": ["admin:servers", "list:users", *tokens],
            "services": [UP_SERVICE],
        }
    )


def _secrets(path: Path) -> dict[str, str]:
    if path.exists():
        return dict(json.loads(path.read_text()))
    keys = {
        "service_token": secrets.token_hex(32),
        "up_token": secrets.token_hex(32),
        "admin_password": secrets.token_urlsafe(24),  # 32 characters
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(keys, out)
    return keys


def _free_port() -> int:
    from labhive.scheduler.executors.env import free_port

    return free_port()


def start_hub(config: Path, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """JupyterHub in its own process group (so it can be stopped as a whole), told to stop
    when its parent dies, so a killed ``labhive up`` leaves no hub behind."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(config)],
            cwd=config.parent,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            preexec_fn=_term_with_parent if sys.platform.startswith("linux") else None,
        )


def _term_with_parent() -> None:
    """In the child before exec: SIGTERM me when my parent exits (Linux PR_SET_PDEATHSIG)."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None).prctl(pr_set_pdeathsig, int(signal.SIGTERM))


def wait_ready(plan: HubPlan, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    """Until the hub's API and the LabHive service both answer 200. On a timeout the error
    says which of the two last answered what, and ends with the hub's log (the managed
    service writes there too), which a throwaway data directory may not outlive."""
    deadline = time.monotonic() + timeout
    last = {"the hub's API": "no answer yet", "the LabHive service": "no answer yet"}
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise UserError(f"JupyterHub exited (status {proc.returncode}); its log:\n{_tail(log)}")
        if _answers(f"{plan.public_url}/hub/api/", "the hub's API", last) & _answers(
            f"{plan.service_url}/api/v1/health", "the LabHive service", last
        ):
            return
        time.sleep(0.5)
    said = "; ".join(f"{who}: {what}" for who, what in last.items())
    raise UserError(
        f"JupyterHub did not answer within {timeout:.0f} s ({said}); see {log}, "
        f"which ends:\n{_tail(log)}"
    )


def _answers(url: str, who: str, last: dict[str, str]) -> bool:
    """Does ``url`` answer 200? What it answered goes to ``last[who]``."""
    try:
        status = httpx.get(url, timeout=2).status_code
    except httpx.TransportError as e:
        last[who] = f"{type(e).__name__} at {url}"
        return False
    last[who] = f"HTTP {status} at {url}"
    return status == 200


def _tail(log: Path, chars: int = 3000) -> str:
    try:
        return log.read_text(errors="replace")[-chars:]
    except OSError as e:
        return f"(the log could not be read: {e})"


def stop_servers(plan: HubPlan, token: str, timeout: float = 60) -> int:
    """Ask the hub to stop every running server; wait until they are gone. Returns how many."""
    api = f"{plan.public_url}/hub/api"
    headers = {"Authorization": f"token {token}"}
    try:
        users = httpx.get(f"{api}/users", params={"state": "active"}, headers=headers, timeout=10)
        users.raise_for_status()
    except httpx.HTTPError:
        return 0
    names = [(u["name"], s) for u in users.json() for s in (u.get("servers") or {})]
    for name, server in names:
        path = f"{api}/users/{name}/servers/{server}" if server else f"{api}/users/{name}/server"
        httpx.delete(path, headers=headers, timeout=timeout)
    deadline = time.monotonic() + timeout
    while names and time.monotonic() < deadline:
        left = httpx.get(f"{api}/users", params={"state": "active"}, headers=headers, timeout=10)
        if left.status_code != 200 or not left.json():
            break
        time.sleep(0.5)
    return len(names)


def stop_group(proc: subprocess.Popen, grace_s: float = 30) -> None:
    """SIGTERM the hub's process group; after ``grace_s`` SIGKILL what is left of it and of its
    direct children, which JupyterHub starts in sessions of their own (the proxy, the
    service). Job processes are left to the service: the next start re-adopts them."""
    import psutil

    try:
        children = psutil.Process(proc.pid).children()
    except psutil.Error:
        children = []
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.kill()


def admin_token(plan: HubPlan, up_token: str, path: Path) -> Path:
    """The first admin's own JupyterHub API token in ``path`` (0600), for the CLI and papermill.

    In hub mode the service accepts only tokens the hub vouches for, so the token ``labhive
    serve`` writes for itself would be refused; this one acts as the admin user (their groups,
    the LabHive admin scope). It is kept while the hub still accepts it (restarts keep it)."""
    api = f"{plan.public_url}/hub/api"
    if path.exists():
        kept = path.read_text().strip()
        who = httpx.get(f"{api}/user", headers={"Authorization": f"token {kept}"}, timeout=10)
        if kept and who.status_code == 200:
            return path
    name = plan.admin_users[0]
    try:
        made = httpx.post(
            f"{api}/users/{name}/tokens",
            json={"note": "labhive up: the CLI and papermill"},
            headers={"Authorization": f"token {up_token}"},
            timeout=10,
        )
        made.raise_for_status()
    except httpx.HTTPError as err:
        raise UserError(
            f"JupyterHub did not make {name}'s API token ({err}); make one at "
            f"{plan.public_url}/hub/token and put it in {path}"
        ) from None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(made.json()["token"] + "\n")
    return path


def cluster_line(plan: HubPlan, token_file: Path) -> str:
    """What the service runs on, in a line: "virtual: 2 nodes x 4 GPU slots; VCs default, vc1"."""
    from labhive.client import Client, LabHiveError

    try:
        with Client(plan.service_url, token_file.read_text().strip(), timeout=10) as client:
            cluster = client.cluster()
    except LabHiveError as err:
        return f"(cannot ask the service: {err.message})"
    nodes = cluster.get("nodes") or []
    slots = sorted({len(n.get("gpus") or ()) for n in nodes})
    per = f"{slots[0]}" if len(slots) == 1 else "-".join(map(str, (slots[0], slots[-1])))
    vcs = ", ".join(cluster.get("vcs") or {}) or "none"
    if cluster.get("virtual"):
        return f"VIRTUAL (no NVIDIA driver): {len(nodes)} nodes x {per} GPU slots; VCs {vcs}"
    return f"{len(nodes)} nodes x {per} GPUs; VCs {vcs}"


def banner(plan: HubPlan, keys: dict[str, str], log: Path, token_file: Path) -> str:
    hub = plan.public_url
    return "\n".join(
        [
            f"LabHive is up: {hub}/",
            *_login_lines(plan, keys),
            f"  add groups:   {hub}/hub/admin -> Groups; group -> VC grants in",
            f"                {plan.grants_source}",
            "                (group 'instructors' = LabHive admins; restart to reload grants)",
            f"  cluster:      {cluster_line(plan, token_file)}",
            f"  fair share:   {_fair_share_line(plan)}",
            f"  service:      {hub}/services/labhive/api/v1/queue (LabHive REST API, OAuth)",
            f"  notebooks:    {plan.notebook_dir} (each user's server starts there)",
            *_course_lines(plan),
            f"  data & logs:  {plan.data_dir} (hub log: {log.name})",
            "  CLI and papermill as the admin (in another terminal; a user's own token comes",
            f"  from {hub}/hub/token):",
            f"    export LABHIVE_URL={plan.service_url} LABHIVE_TOKEN_FILE={token_file}",
            "  Ctrl-C stops the hub, the service and every job process",
        ]
    )


def _fair_share_line(plan: HubPlan) -> str:
    if not plan.fair_share:
        return "off: each VC's jobs first come, first served (labhive up --fair-share 7d)"
    return (
        f"on: a VC's waiting jobs in order of their users' GPU use (half-life "
        f"{plan.fair_share}; a cluster file's fairShare wins)"
    )


def _login_lines(plan: HubPlan, keys: dict[str, str]) -> list[str]:
    """Who logs in how, for the authenticator in use (docs/admin.md, "Logins")."""
    hub, admin = plan.public_url, plan.admin_users[0]
    data = Path(plan.data_dir).parent
    if plan.authenticator == "external":
        return [
            f"  admin login:  {admin}, through the authenticator your --hub-config sets",
            f"  user logins:  as that authenticator says; {hub}/hub/admin -> Add Users",
        ]
    if plan.authenticator == "pam":
        return [
            f"  admin login:  {admin}, with that account's password on this machine (PAM)",
            "  user logins:  this machine's accounts (PAM), once an admin adds them:",
            f"  add users:    {hub}/hub/admin -> Add Users (the account's name)",
        ]
    return [
        f"  admin login:  {admin} / {keys['admin_password']}",
        "  user logins:  each user their own password (hashed in the hub's database)",
        f"  add users:    labhive hub adduser NAME [--group G] --data-dir {data}",
        "                (prints a generated password; --password-file F sets one), or",
        f"                students sign up at {hub}/hub/signup and you approve them at",
        f"                {hub}/hub/authorize",
        *_roster_lines(plan),
    ]


def _roster_lines(plan: HubPlan) -> list[str]:
    vc = f"VC {plan.default_group}" if plan.default_group else "the grants' '*' group"
    where = f"students without a group: {vc}"
    if not plan.roster:
        return [f"  a class:      labhive up --roster course.yaml (docs/hub.md); {where}"]
    passwords = Path(plan.data_dir) / ROSTER_PASSWORDS
    return [
        f"  roster:       {len(plan.passwords)} students from {plan.roster}; {where}",
        f"                generated passwords: {passwords} (0600, hand each out once)",
    ]


def _course_lines(plan: HubPlan) -> list[str]:
    if not plan.course_dir:
        return ["  course:       none (--course DIR copies a folder into every user's home)"]
    name = Path(plan.course_dir).name
    lines = [f"  course:       {plan.course_dir} -> ~/{name}/ in every home (new files only)"]
    if plan.course_data:
        lines.append(f"                its data: {plan.course_data} (LABHIVE_DATA in servers)")
    return lines


def run_up(
    data_dir: Path, *, port: int, service_port: int, cluster: str | None, policy: str,
    grants: Path | None, grace_s: float, course: Path | None = None,
    course_data: Path | None = None, authenticator: str = "native", admin: str = "admin",
    roster: Path | None = None, hub_config: Path | None = None,
    first_uid: int | None = None, uid_count: int | None = None, fair_share: str | None = "7d",
    culling: dict[str, float] | None = None, engine: Engine | None = None,
) -> int:  # fmt: skip
    plan, config, keys = prepare(
        data_dir, port=port, service_port=service_port, cluster=cluster, policy=policy,
        grants=grants, grace_s=grace_s, course=course, course_data=course_data,
        authenticator=authenticator, admin=admin, roster=roster, hub_config=hub_config,
        first_uid=first_uid, uid_count=uid_count, fair_share=fair_share,
        culling=culling, engine=engine,
    )  # fmt: skip
    for busy in (port, service_port):
        _check_free(busy)
    log = Path(plan.data_dir) / "jupyterhub.log"
    # Ctrl-C and `kill` both stop it cleanly. SIGINT is set explicitly because a shell that
    # starts a command in the background without job control (scripts, CI) leaves SIGINT
    # ignored, and Python then never raises KeyboardInterrupt: Ctrl-C sent later did nothing.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    proc = start_hub(config, log)
    try:
        wait_ready(plan, proc, log)
        token_file = admin_token(plan, keys["up_token"], data_dir.resolve() / "admin.token")
        print(banner(plan, keys, log, token_file), flush=True)
        print(f"  tasks run as: {_tasks_run_as(plan)}", flush=True)
        for line in plan.engine_lines or [f"  GPU devices: {_gpu_devices()}"]:
            print(line, flush=True)
        proc.wait()
        print(f"JupyterHub exited (status {proc.returncode}); see {log}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping: notebook servers...", flush=True)
        n = stop_servers(plan, keys["up_token"])
        print(f"  {n} server(s) stopped; hub, service and job processes...", flush=True)
        return 0
    finally:
        stop_group(proc, grace_s=grace_s + 20)


def _tasks_run_as(plan: HubPlan) -> str:
    """Whom jobs and notebook servers run as (the trust model), as the service will say."""
    from labhive.scheduler.service.server import ServeOptions, tasks_run_as, unreachable_python

    opts = ServeOptions()
    opts.first_uid = plan.first_uid if plan.first_uid is not None else opts.first_uid
    opts.uid_count = plan.uid_count if plan.uid_count is not None else opts.uid_count
    problem = unreachable_python(opts)
    return tasks_run_as(opts) + (f"\n  WARNING: {problem}" if problem else "")


def _gpu_devices() -> str:
    """How jobs are kept to their own GPU device nodes, as the service's local executor will
    do it (a cgroup v2 device filter, v1 devices rules, or NOT enforced and why)."""
    from labhive.scheduler.executors.limits import detect

    return detect().devices_enforced()


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def _check_free(port: int) -> None:
    import socket

    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as err:
            raise UserError(
                f"port {port} is busy ({err.strerror}); stop what uses it or pick another "
                "(--port for the hub, --service-port for the service)"
            ) from None
