"""One JupyterHub configuration for LabHive, shared by ``labhive up`` and the hub tests.

A ``HubPlan`` (plain data, saved as JSON beside the hub) says where things listen and who logs
in; ``configure(c, plan)`` turns it into JupyterHub settings: the LabHive spawner, the service
as a hub-managed service at ``/services/labhive/`` with OAuth, and the roles that make
identities flow:

- ``server`` role (the notebook server's token, which its kernels inherit) keeps its two
  defaults and gains ``access:services!service=labhive``, so ``%submit`` acts as the owner;
  it also lists the LabHive admin scope, which a token only ever gets where its owner has it.
- ``user`` role: ``self`` plus access to the service (the browser's OAuth login).
- ``labhive-admin``: the custom scope ``custom:labhive:admin`` for instructors (the
  ``instructors`` group and the admin users): they see every job and the whole queue.
- ``labhive-service``: the service may read users' groups (group -> VC grants) and, holding
  the admin scope, its token is what the spawner uses to follow and stop server jobs.

Logins (``_authenticator``): NativeAuthenticator by default, each user their own password
(``hub_extension/accounts.py``); PAM; or "external", where the lines after ``configure`` set
the authenticator (OAuth, LTI: docs/hub.md).

A single-machine deployment's own ``jupyterhub_config.py`` can use the same (loopback
addresses; put TLS in front)::

    from labhive.hub_extension.hubconfig import HubPlan, configure
    configure(c, HubPlan(data_dir="/srv/labhive", service_token=SECRET,
                         grants="/etc/labhive/grants.yaml", cluster="/etc/labhive/cluster.yaml",
                         admin_password=ADMIN_PASSWORD,  # or authenticator="external", then
                         profiles=[{"slug": "1gpu", "display_name": "1 GPU", "gpus": 1}]))
    # c.JupyterHub.authenticator_class = "github" ...
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labhive.hub_extension.hubauth import ADMIN_SCOPE

SERVICE = "labhive"
#: How hub users log in: native (each their own password, sign-up with an admin's approval),
#: pam (this machine's accounts), dummy (any password: tests only), external (the deployment's
#: own config sets ``c.JupyterHub.authenticator_class`` after ``configure``: OAuth, LTI, ...).
AUTHENTICATORS = ("native", "pam", "dummy", "external")
ACCESS = f"access:services!service={SERVICE}"
#: The native authenticator's account API (hub_extension/accounts.py), under /hub/.
ACCOUNTS_API = "/api/labhive/accounts"
MIN_PASSWORD = 8  # characters, for sign-ups, roster passwords and ``labhive hub adduser``


@dataclass
class HubPlan:
    data_dir: str
    service_token: str
    public_port: int = 8000
    hub_port: int = 8081
    proxy_api_port: int = 8001
    service_port: int = 8765
    grants: str | None = None  # group -> VC grants (the ``groups`` section of a users file)
    grants_source: str | None = None  # the file an instructor edits (labhive up adds VC groups)
    roster: str | None = None  # labhive up --roster: the class list
    cluster: str | None = None
    policy: str = "hived"
    #: users of one VC share it fairly (``labhive serve --fair-share``): a class's default
    fair_share: str | None = "7d"
    authenticator: str = "native"  # one of AUTHENTICATORS; "dummy" (any password) for tests
    admin_users: list[str] = field(default_factory=lambda: ["admin"])
    admin_password: str = ""  # the first admin's, set at every start (native)
    passwords: dict[str, str] = field(default_factory=dict)  # a roster's initial ones (native)
    default_group: str | None = None  # where `labhive hub adduser` puts a user given no group
    groups: dict[str, list[str]] = field(default_factory=dict)
    instructors_group: str = "instructors"
    cleanup_servers: bool = True  # on hub exit stop every server (labhive up); tests keep them
    stop_tasks_on_exit: bool = False  # the service stops every job process when it exits
    profiles: list[dict[str, Any]] = field(default_factory=list)
    server_args: list[str] = field(default_factory=list)
    notebook_dir: str | None = None  # e.g. "/srv/notebooks/{username}"; made when missing
    course_dir: str | None = None  # copied into every user's notebook_dir (spawner.course_dir)
    course_data: str | None = None  # the course's data, LABHIVE_DATA in servers and kernels
    poll_interval: int = 30  # seconds between the hub's polls of each server (its job)
    grace_s: float = 10.0
    log_level: str = "INFO"
    #: The service's uid range (``labhive serve --first-uid/--uid-count``; None: its defaults):
    #: two hubs on one host need disjoint ones (the service refuses an overlap).
    first_uid: int | None = None
    uid_count: int | None = None
    #: More ``labhive serve`` arguments: the executor ``labhive up --executor`` names.
    service_args: list[str] = field(default_factory=list)
    engine_lines: list[str] = field(default_factory=list)  # the banner's, on that engine

    def groups_members(self) -> list[str]:
        return sorted({name for users in self.groups.values() for name in users})

    @property
    def public_url(self) -> str:
        return f"http://127.0.0.1:{self.public_port}"

    @property
    def service_url(self) -> str:
        return f"http://127.0.0.1:{self.service_port}"

    def save(self, path: Path) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds secrets
        with os.fdopen(fd, "w") as out:
            json.dump(asdict(self), out, indent=1)

    @classmethod
    def load(cls, path: str | Path) -> HubPlan:
        return cls(**json.loads(Path(path).read_text()))


def write_config(plan: HubPlan, folder: Path, *extra: str) -> Path:
    """``plan.json`` (0600) and a ``jupyterhub_config.py`` that applies it (plus ``extra``
    lines), in ``folder``; returns the config file."""
    folder.mkdir(parents=True, exist_ok=True)
    plan.save(folder / "plan.json")
    config = folder / "jupyterhub_config.py"
    lines = [
        "# Written by LabHive from plan.json; regenerated on every start.",
        "from labhive.hub_extension.hubconfig import HubPlan, configure",
        "",
        f"configure(c, HubPlan.load({str(folder / 'plan.json')!r}))  # noqa: F821",
        *extra,
    ]
    config.write_text("\n".join(lines) + "\n")
    return config


def service_command(plan: HubPlan) -> list[str]:
    """``labhive serve`` as the hub starts (and restarts) it."""
    data = Path(plan.data_dir)
    cmd = [
        sys.executable, "-m", "labhive.scheduler.cli", "serve", "--auth", "hub",
        "--port", str(plan.service_port), "--data-dir", str(data / "service"),
        "--policy", plan.policy, "--grace-s", str(plan.grace_s),
    ]  # fmt: skip
    if plan.grants:
        cmd += ["--users", plan.grants]
    if plan.cluster:
        cmd += ["--cluster", plan.cluster]
    if plan.fair_share:
        cmd += ["--fair-share", plan.fair_share]
    # the hub's homes and servers' launch files, for a data dir under /tmp (each task's /tmp is
    # its own: docs/local-executor.md)
    cmd += ["--task-path", str(data)]
    if plan.stop_tasks_on_exit:
        cmd.append("--stop-tasks-on-exit")
    if plan.first_uid is not None:
        cmd += ["--first-uid", str(plan.first_uid)]
    if plan.uid_count is not None:
        cmd += ["--uid-count", str(plan.uid_count)]
    cmd += plan.service_args
    identity = os.environ.get("LABHIVE_TASK_IDENTITY")
    if identity:  # the hub passes managed services only the variables it names
        cmd += ["--task-identity", identity]
    return cmd


#: What every student's server is started with: a class of 50 boots 50 of them on a few
#: cores, so each leaves out start-up work a student's server has no use for (measured with
#: ``benchmarks/bench_classroom.py``, docs/hub.md "A class of 50"):
#: - jupyter_lsp looks for language servers at each start (``npm prefix -g``: a node process,
#:   ~0.2 CPU s) and none is installed; an instructor who installs one turns it back on in
#:   ``labhive up --hub-config``'s file (``c.Spawner.args.append(
#:   "--ServerApp.jpserver_extensions=jupyter_lsp=True")``: the later argument wins);
#: - the "pypi" extension manager offers ``pip install`` of lab extensions, which a student's
#:   server, running as the student's uid, cannot do to the hub's environment: read-only
#:   lists what is installed, as before, and installs nothing;
#: - notebook_shim's server extension runs classic Notebook server extensions, and a student's
#:   server has none (~0.1 CPU s to link it; JupyterLab keeps the shim's config mixin).
#: JupyterLab's rebuild check (``/lab/api/build``: ``node`` twice, ~0.8 CPU s at each page load)
#: is off in the servers' ``labconfig/page_config.json`` (``buildCheck``, ``buildAvailable``),
#: which the spawner puts on ``JUPYTER_CONFIG_PATH``: students cannot rebuild the hub's lab.
LIGHT_SERVER_ARGS = (
    "--LabApp.news_url=None",
    "--LabApp.extension_manager=readonly",
    "--ServerApp.jpserver_extensions=jupyter_lsp=False",
    "--ServerApp.jpserver_extensions=notebook_shim=False",
)


def server_args(plan: HubPlan) -> list[str]:
    args = [*LIGHT_SERVER_ARGS, *plan.server_args]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--allow-root")  # the single-user server refuses root without it
    return args


def private_hub_dir(data: Path) -> None:
    """The hub's directory holds the service's data dir (tasks pass through to their work
    dirs: 0711) and the hub's secrets; JupyterHub creates its database with the umask's mode,
    so it is made 0600 first (SQLite keeps an existing file's mode)."""
    data.mkdir(parents=True, exist_ok=True)
    os.chmod(data, 0o711)
    db = data / "jupyterhub.sqlite"
    os.close(os.open(db, os.O_WRONLY | os.O_CREAT, 0o600))
    os.chmod(db, 0o600)


def configure(c: Any, plan: HubPlan) -> None:
    """Apply the plan to a JupyterHub config object (see the module docstring)."""
    data = Path(plan.data_dir)
    private_hub_dir(data)
    hub = c.JupyterHub
    hub.bind_url = plan.public_url
    hub.hub_bind_url = f"http://127.0.0.1:{plan.hub_port}"
    c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{plan.proxy_api_port}"
    c.ConfigurableHTTPProxy.pid_file = str(data / "proxy.pid")
    hub.db_url = f"sqlite:///{data / 'jupyterhub.sqlite'}"
    hub.cookie_secret_file = str(data / "jupyterhub_cookie_secret")
    hub.pid_file = str(data / "jupyterhub.pid")
    hub.cleanup_servers = plan.cleanup_servers
    hub.log_level = plan.log_level

    hub.spawner_class = "labhive"
    spawner = c.LabHiveSpawner
    spawner.service_url = plan.service_url
    spawner.server_service_url = f"{plan.public_url}/services/{SERVICE}"
    spawner.service_token = plan.service_token
    spawner.secrets_dir = str(data / "servers")
    spawner.profiles = plan.profiles
    if plan.grants:
        spawner.grants_file = plan.grants  # the spawn form's VC choice, the user's own first
    c.Spawner.args = server_args(plan)
    c.Spawner.default_url = "/lab"
    c.Spawner.poll_interval = plan.poll_interval
    if plan.notebook_dir:
        c.Spawner.notebook_dir = plan.notebook_dir
    if plan.course_dir:
        spawner.course_dir = plan.course_dir
    if plan.course_data:
        spawner.course_data = plan.course_data

    hub.services = [
        {
            "name": SERVICE,
            "url": plan.service_url,
            "command": service_command(plan),
            "api_token": plan.service_token,
            "oauth_no_confirm": True,
            "oauth_client_allowed_scopes": [ADMIN_SCOPE],
            "display": True,
            "environment": {"LABHIVE_URL": f"{plan.public_url}/services/{SERVICE}"},
        }
    ]
    hub.custom_scopes = {
        ADMIN_SCOPE: {
            "description": "LabHive admin: see every job and the whole queue, act on any job",
        }
    }
    hub.load_roles = [
        {
            "name": "server",
            "scopes": ["users:activity!user", "access:servers!server", ACCESS, ADMIN_SCOPE],
        },
        {"name": "user", "scopes": ["self", ACCESS]},
        {
            "name": "labhive-admin",
            "description": "instructors: every LabHive job and queue",
            "scopes": [ADMIN_SCOPE, ACCESS],
            "groups": [plan.instructors_group],
            "users": list(plan.admin_users),
        },
        {
            "name": "labhive-service",
            "scopes": ["list:users", "read:users:groups", "read:groups", ADMIN_SCOPE, ACCESS],
            "services": [SERVICE],
        },
    ]
    groups = {plan.instructors_group: [], **plan.groups}
    hub.load_groups = {name: {"users": list(users)} for name, users in groups.items()}
    _authenticator(c, plan)


def _authenticator(c: Any, plan: HubPlan) -> None:
    if plan.authenticator not in AUTHENTICATORS:
        raise ValueError(f"authenticator {plan.authenticator!r}: one of {AUTHENTICATORS}")
    auth = c.Authenticator
    auth.admin_users = set(plan.admin_users)
    if plan.authenticator == "dummy":
        c.JupyterHub.authenticator_class = "dummy"
        auth.allow_all = True
    elif plan.authenticator == "native":
        _native(c, plan)
    elif plan.authenticator == "pam":
        c.JupyterHub.authenticator_class = "pam"
        # the plan's group members and the users an admin adds on the admin page; not every
        # account of the machine (allow_all would admit any of them)
        auth.allowed_users = set(plan.groups_members())
        auth.allow_existing_users = True


def _native(c: Any, plan: HubPlan) -> None:
    """NativeAuthenticator (hub_extension/accounts.py): the admins' accounts exist before the
    hub listens, so no one can sign up under an admin's name first; a sign-up waits for an
    admin's approval; its own check (an approved account, the right password) is the only one,
    hence ``allow_all``."""
    c.JupyterHub.authenticator_class = "labhive.hub_extension.accounts.LabHiveNativeAuthenticator"
    native = c.LabHiveNativeAuthenticator
    first, *others = plan.admin_users
    if not plan.admin_password:
        raise ValueError(f"the native authenticator needs {first}'s password (admin_password)")
    native.seed_passwords = {first: plan.admin_password}
    # other admins' names are taken at once, with an unguessable password until one is set
    # for them (labhive hub adduser NAME --reset)
    unset = {name: secrets.token_urlsafe(24) for name in others}
    native.initial_passwords = {**unset, **plan.passwords}
    native.minimum_password_length = MIN_PASSWORD
    native.check_common_password = True
    native.allow_all = True
