"""``LabHiveSpawner``: a user's notebook server is a LabHive job in their VC.

Servers and training jobs then share the same GPUs under the same policy, and a student whose
VC is full waits in its queue with a visible position instead of a spinner. Enable it with
``c.JupyterHub.spawner_class = "labhive"`` (entry point ``jupyterhub.spawners``).

- ``start`` submits the server (``jupyterhub-singleuser``) as a one-task job with the user's
  own server token, so the job is theirs and the service checks their groups' VC grants; it
  returns once the job runs and its server listens (the hub's own wait backs off to 5 s).
  ``progress`` streams the scheduler's why-text ("WAITING: position 2 of 3 in vc1 — ...") to
  the spawn page.
- The hub's credentials for the server (its token, ``JUPYTERHUB_*``) never enter the job store:
  they go to a 0600 file that ``labhive.hub_extension.launch`` reads when the task starts.
- With ``server_on_nodes`` (Slurm, Kubernetes: the server runs on another machine) the server
  listens on its node and the hub reaches it at the address the executor reports for the task
  (``GET /jobs/{id}`` tasks' ``address``); the secrets never touch the hub's filesystem: the
  launcher on the node takes them from the hub over TCP (``launch.hand_over``).
- ``poll``/``stop`` map to the job; ``get_state`` keeps the job id, so a restarted hub
  re-adopts a running server instead of starting a new one.
- A server whose job is preempted (it went back to WAITING) is cancelled and ends with a
  message that the hub page shows the next time the user starts a server.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import secrets as tokens
import shlex
import shutil
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from jupyterhub.spawner import Spawner
from jupyterhub.utils import random_port
from traitlets import Bool, Dict, Float, Integer, List, Unicode, default

from labhive.hub_extension import homes, spawn_form
from labhive.hub_extension.launch import HandoffRefused, hand_over, is_secret
from labhive.hub_extension.serverboot import server_command
from labhive.hub_extension.shared_client import TokenClient
from labhive.scheduler.client import (
    JobInfo,
    JobState,
    LabHiveError,
    NotFoundError,
    ServiceUnavailable,
    eta_text,
    no_estimate_text,
)
from labhive.scheduler.core.gpu_share import SHARES_SHOWN, ShareError, as_number

STATE_VERSION = 1
JUPYTER_CONFIG = Path(__file__).resolve().parent / "jupyter-config"
_POSITION_TAIL = re.compile(r";?\s*position \d+ of \d+ in \S+\s*$")


class ServerJobEnded(Exception):
    """The server's job ended before the server ran; the message is shown on the spawn page."""


#: Characters a server job name (and its launch file's name) keeps from the hub's names.
_PLAIN = re.compile(r"[A-Za-z0-9_.-]+")
JOB_NAME_LEN = 64
#: The longest gap between two asks about a booting server's job (``_wait_listening``).
LISTEN_CHECK_MAX_S = 5.0


def server_job_name(user: str, server: str = "") -> str:
    """One job name (and launch file) per hub user and server, whatever their names.

    A user's default server whose name is plain and short keeps the readable
    ``jupyter-NAME``. Any other name is cut and sanitized, then gets ``~`` and a hash of the
    exact (user, server) pair: a plain name never holds ``~``, so ``eve@x`` cannot meet
    ``eve_x``, two long names sharing a prefix cannot meet, and user ``a``'s server ``b``
    cannot meet user ``a-b``.
    """
    plain = f"jupyter-{user}"
    if not server and _PLAIN.fullmatch(user) and len(plain) <= JOB_NAME_LEN:
        return plain
    digest = hashlib.sha256(json.dumps([user, server]).encode())
    tag = "~" + digest.hexdigest()[:16]
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{plain}-{server}" if server else plain)
    return readable[: JOB_NAME_LEN - len(tag)] + tag


def handoff_command(launcher: str, port: int, doc: dict[str, Any], key: str) -> str:
    """The job's command for a server on another node: the launcher with the non-secret
    launch document in its arguments and the one-time handoff key on stdin (a here-document,
    which any POSIX shell reads, keeps the key out of the launcher's argv, which ``ps`` shows
    every user of the node)."""
    packed = base64.b64encode(json.dumps(doc).encode()).decode()
    return f"exec {launcher} --handoff {port} {packed} <<'LABHIVE_KEY'\n{key}\nLABHIVE_KEY"


class LabHiveSpawner(Spawner):
    """Runs each single-user server as a LabHive job (see the module docstring)."""

    service_url = Unicode(
        help="""URL of the LabHive service as the hub reaches it (``.../api/v1`` optional),
        e.g. ``http://127.0.0.1:8765``. Default: $LABHIVE_URL, else http://127.0.0.1:8765.""",
    ).tag(config=True)

    server_service_url = Unicode(
        "",
        help="""LABHIVE_URL given to the notebook server and its kernels (so ``%submit`` finds
        the service). Default: the service_url.""",
    ).tag(config=True)

    service_token = Unicode(
        "",
        help="""A hub API token the spawner uses to follow and stop jobs: the LabHive hub
        service's own ``api_token`` (its role needs ``custom:labhive:admin``). Without it the
        spawner uses the server's token, which a restarted hub no longer has, so re-adoption
        then rests on the hub finding the server's URL alive.""",
    ).tag(config=True)

    vcs = List(
        Unicode(),
        help="""VCs to put servers in, in order of preference: the first the user's groups
        grant is used. Empty: the user's own VC (see ``grants_file``), else the first granted
        VC in the service's order.""",
    ).tag(config=True)

    grants_file = Unicode(
        "",
        help="""The service's group -> VC grants (the ``groups`` section of its users file,
        e.g. ``labhive up``'s ``grants.yaml``). With it the spawn form offers each user the
        VCs their groups grant, their own first (those of their named groups, then those
        every user gets through ``"*"``), and a server goes to the user's own VC by default.""",
    ).tag(config=True)

    priority = Unicode(
        "prod",
        help="Priority class of server jobs (crit, prod, test, oppo or a number).",
    ).tag(config=True)

    options_form_template = Unicode(
        "",
        help="""The path of a Jinja2 template for the spawn form, to restyle or reword it; it
        gets ``last_end``, ``vcs``, ``selected_vc``, ``own_vc``, ``sizes`` and ``standing``
        (see labhive/hub_extension/templates/labhive_spawn_form.html, the default, to start
        from). Values are autoescaped.""",
    ).tag(config=True)

    profiles = List(
        Dict(),
        help="""Sizes users choose from, shown as the spawn form when there are two or more.
        Each: ``{"slug": "1gpu", "display_name": "1 GPU", "gpus": 1, "cpu": 2,
        "cpu_limit": 4, "memory_mb": 8192, "memory_limit_mb": 16384}`` (all but slug optional:
        cpu/memory_mb are the guarantee placement counts, cpu_limit/memory_limit_mb what the
        cgroup enforces; each defaults to the ``server_*`` trait). Default: one CPU-only size.""",
    ).tag(config=True)

    # A notebook server idles most of the time: it is placed by a small guarantee and may burst
    # to a larger limit (zero-to-jupyterhub's cpu_guarantee/cpu_limit, mem_guarantee/mem_limit),
    # so a classroom of servers fits on a few cores (docs/hub.md).
    server_cpu = Float(
        0.1, help="CPUs guaranteed to a server job (what placement counts) unless its profile says."
    ).tag(config=True)
    server_cpu_limit = Float(
        2.0, help="CPUs a server job may use (its cgroup quota) unless its profile says."
    ).tag(config=True)
    server_memory_mb = Integer(
        512,
        help="Memory (MB) guaranteed to a server job (what placement counts) unless its profile "
        "says.",
    ).tag(config=True)
    server_memory_limit_mb = Integer(
        4096,
        help="""Memory (MB) a server job may use unless its profile says; the local executor
        enforces it for the server and its kernels together (one cgroup).""",
    ).tag(config=True)

    poll_s = Float(1.0, help="How often start and progress ask the service.").tag(config=True)

    server_on_nodes = Bool(
        False,
        help="""The service's executor runs servers on other machines than the hub's (``labhive
        serve --executor slurm`` or ``kubernetes``). The server then listens on its node
        (``--ip=0.0.0.0`` on a port the hub picks and the node checks), the hub's proxy reaches
        it at the address the executor reports for its task, and its tokens are handed to its
        launcher over TCP instead of through a file (the node's filesystem need not be the
        hub's). The nodes must reach the hub's API (set ``c.JupyterHub.hub_connect_ip``) and
        the LabHive service (``server_service_url``), and run ``launcher`` at the same path.
        Off: the local executor, the server on the hub's machine.""",
    ).tag(config=True)

    secrets_dir = Unicode(
        help="""Directory (mode 0700) for the per-server 0600 files that carry the hub's
        credentials to the server task. Default: ./labhive-servers next to the hub.""",
    ).tag(config=True)

    launcher = List(
        Unicode(),
        help="""The command that starts the server in its task from the launch file (given as
        its last argument). Default: the hub's Python with ``-m labhive.hub_extension.launch``.
        Where users' uids cannot execute the hub's Python (it lives in a private home), name
        one they can: the launcher needs only the standard library, e.g.
        ``["/usr/bin/python3", "/path/to/labhive/hub_extension/launch.py"]``.""",
    ).tag(config=True)

    quick_boot = Bool(
        True,
        help="""Start ``jupyterhub-singleuser`` through ``labhive.hub_extension.serverboot``,
        which imports JupyterLab without ``node`` on PATH (so JupyterLab does not run ``node
        yarn.js config``, ~0.5 CPU s per server start), then puts the PATH back before the
        server starts any kernel or terminal. Applies only where the server's script is run by
        the hub's own Python. Off: the script is run as it is.""",
    ).tag(config=True)

    course_dir = Unicode(
        help="""A folder of course material (labs, their helper module) copied into each
        user's server folder under its own name (``/srv/course/labs`` -> ``~/labs``) when
        their server starts: only files not delivered before, so a student's edits are never
        overwritten (``labhive.hub_extension.course``). Default: $LABHIVE_COURSE_DIR.""",
    ).tag(config=True)

    course_data = Unicode(
        help="""The course's data folder, given to servers and kernels as ``LABHIVE_DATA``
        (the labs find their data there wherever they are opened). Default: $LABHIVE_DATA.""",
    ).tag(config=True)

    # ---- state kept across hub restarts ---------------------------------------------------
    job_id: int | None = None
    last_end: str = ""  # why the last server ended, when the user should be told
    _ending: bool = False

    @default("service_url")
    def _default_service_url(self) -> str:
        return os.environ.get("LABHIVE_URL", "http://127.0.0.1:8765")

    @default("course_dir")
    def _default_course_dir(self) -> str:
        return os.environ.get("LABHIVE_COURSE_DIR", "")

    @default("course_data")
    def _default_course_data(self) -> str:
        return os.environ.get("LABHIVE_DATA", "")

    @default("secrets_dir")
    def _default_secrets_dir(self) -> str:
        return str(Path.cwd() / "labhive-servers")

    @default("start_timeout")
    def _default_start_timeout(self) -> int:
        return 4 * 3600  # a server may queue behind jobs for a long time

    @default("http_timeout")
    def _default_http_timeout(self) -> int:
        return 120

    @default("ip")
    def _default_ip(self) -> str:
        return "127.0.0.1"

    @default("options_form")
    def _default_options_form(self) -> Any:
        return self._options_form

    # ---- state --------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        state["labhive_version"] = STATE_VERSION
        if self.job_id is not None:
            state["labhive_job_id"] = self.job_id
        if self.last_end:
            state["labhive_last_end"] = self.last_end
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        job = state.get("labhive_job_id")
        self.job_id = int(job) if job is not None else None
        self.last_end = str(state.get("labhive_last_end") or "")

    def clear_state(self) -> None:
        """Forget the job, but keep why the last server ended, to show it next time."""
        super().clear_state()
        self.job_id = None

    # ---- the form -----------------------------------------------------------------------

    def _sizes(self) -> list[dict[str, Any]]:
        return list(self.profiles) or [{"slug": "cpu", "display_name": "CPU only", "gpus": 0}]

    async def _options_form(self, _spawner: Any = None) -> str:
        """The notice of how the last server ended, the VC choice and the size choice; empty
        (no form: the server starts at once) when there is nothing to choose or tell. Rendered
        from ``options_form_template`` (hub_extension/spawn_form.py)."""
        choices = await self._vc_choices()
        chosen = len(choices) >= 2 or len(self._sizes()) >= 2
        standing = await self._standing() if chosen else {}
        values = spawn_form.FormValues(
            last_end=self.last_end,
            vcs=choices,
            selected_vc=next((v for v in self.vcs if v in choices), choices[0] if choices else ""),
            sizes=spawn_form.sizes_shown(self._sizes()),
            standing=[(vc, standing[vc]) for vc in (choices or list(standing)) if standing.get(vc)],
        )
        return spawn_form.render(values, self.options_form_template)

    def options_from_form(self, formdata: dict[str, list[str]]) -> dict[str, Any]:
        options = {"profile": (formdata.get("profile") or [""])[0]}
        if formdata.get("vc"):
            options["vc"] = formdata["vc"][0]
        return options

    async def _vc_choices(self) -> list[str]:
        """The VCs this user's groups grant, their own first: those of their named groups
        (in name order), then those everyone gets through ``"*"``. Empty without a
        ``grants_file`` or when it cannot be read (the service still checks at start)."""
        if not self.grants_file:
            return []
        from labhive.scheduler.core.errors import UserError
        from labhive.scheduler.service.auth import EVERYONE, load_grants

        try:
            grants = load_grants(Path(self.grants_file))
        except (OSError, UserError) as err:
            self.log.warning("%s: cannot read grants %s: %s", self._log_name, self.grants_file, err)
            return []
        groups = sorted(str(getattr(g, "name", g)) for g in getattr(self.user, "groups", ()))
        ordered: list[str] = []
        every_vc: list[str] | None = None
        for group in [*groups, EVERYONE]:
            grant = grants.get(group)
            if grant is None:
                continue
            names = sorted(grant.vcs)
            if "*" in grant.vcs:
                if every_vc is None:
                    every_vc = await self._every_vc()
                names = every_vc
            ordered += [v for v in names if v not in ordered]
        return ordered

    async def _every_vc(self) -> list[str]:
        """Every VC of the cluster, in the service's order (a grant of "*"); none when the
        service cannot say (the form then offers fewer VCs; start still checks)."""
        try:
            return [str(name) for name in await self._call(lambda c: list(c.vcs()))]
        except LabHiveError as err:
            self.log.warning("%s: cannot list VCs for the form: %s", self._log_name, err.message)
            return []

    def _profile(self) -> dict[str, Any]:
        sizes = self._sizes()
        slug = (self.user_options or {}).get("profile")
        if not slug:
            return sizes[0]
        for p in sizes:
            if str(p["slug"]) == str(slug):
                return p
        known = ", ".join(str(p["slug"]) for p in sizes)
        raise ServerJobEnded(f"unknown server size {slug!r}; choose one of: {known}")

    def _resources(self, profile: dict[str, Any]) -> dict[str, Any]:
        """A server's guarantee and limit: the profile's, else the traits; a limit under its
        guarantee is raised to it (an admin who raises only a profile's ``cpu`` means it)."""
        cpu = float(profile.get("cpu", self.server_cpu))
        memory = int(profile.get("memory_mb", self.server_memory_mb))
        return {
            "cpu": cpu,
            "memory_mb": memory,
            "cpu_limit": max(cpu, float(profile.get("cpu_limit", self.server_cpu_limit))),
            "memory_limit_mb": max(
                memory, int(profile.get("memory_limit_mb", self.server_memory_limit_mb))
            ),
        }

    # ---- talking to the service ---------------------------------------------------------

    def _client(self, token: str | None = None) -> TokenClient:
        """This spawner's client for this token, over the hub's one shared connection pool
        to the service (``shared_client``): making an httpx client costs ~50 ms of the hub's
        CPU and keeps its own sockets, and a hub of 50 servers held 50 of them. The token
        goes on each request, never into the shared pool. Clients of tokens no longer in use
        (a previous start's server token) give their lease back."""
        key = token or self.service_token or self.api_token
        clients: dict[str, TokenClient] = self.__dict__.setdefault("_labhive_clients", {})
        for old in set(clients) - {key, self.service_token, self.api_token}:
            clients.pop(old).close()
        if key not in clients:
            clients[key] = TokenClient(self.service_url, key, timeout=15)
        return clients[key]

    def _close_clients(self) -> None:
        """Give back this spawner's leases on the shared pool (a stopped server's spawner
        may wait for days for its next start); requests in flight keep the pool open."""
        for client in self.__dict__.pop("_labhive_clients", {}).values():
            client.close()

    async def _call(self, fn: Any, *args: Any, token: str | None = None) -> Any:
        """Run a (blocking) client call off the hub's event loop."""
        client = self._client(token)
        with client.held():  # taken here: a stop() while the thread starts cannot close it
            return await asyncio.to_thread(fn, client, *args)

    async def _standing(self) -> dict[str, str]:
        """The user's fair-share standing per VC in words (``GET /me/standing``), asked with
        the spawner's service token (an admin's, naming the user) or else the user's own;
        empty when fair share is off or the service cannot say (the page goes without)."""
        name = str(self.user.name)
        try:
            if self.service_token:
                found = await self._call(lambda c: c.standing(user=name))
            elif self.api_token:
                found = await self._call(lambda c: c.standing(), token=self.api_token)
            else:
                return {}
        except LabHiveError as err:
            self.log.info("%s: no fair-share standing: %s", self._log_name, err.message)
            return {}
        return {str(vc): str(v.get("text", "")) for vc, v in (found.get("vcs") or {}).items()}

    async def _job(self) -> JobInfo:
        assert self.job_id is not None
        return await self._call(lambda c, i: c.job(i).info, self.job_id)  # type: ignore[no-any-return]

    # ---- start --------------------------------------------------------------------------

    async def start(self) -> str:
        """Submit the server as a job and return its URL once it runs (see module docstring)."""
        self.last_end = ""
        self._ending = False
        profile = self._profile()
        vc = await self._choose_vc()
        self.port = random_port()
        owner = await self._owner()
        default = [sys.executable, "-m", "labhive.hub_extension.launch"]
        launcher = " ".join(map(shlex.quote, self.launcher or default))
        secrets_file: Path | None = None
        key, handed = "", {}
        if self.server_on_nodes:
            self.ip = "0.0.0.0"  # the server listens on its node, reached at the node's address
            key = tokens.token_urlsafe(32)
            doc = self._launch_doc(owner, on_node=True)
            doc["cmd"].append("--ServerApp.port_retries=0")  # the hub only knows this port
            handed = {k: doc["env"].pop(k) for k in list(doc["env"]) if is_secret(k)}
            command = handoff_command(launcher, self.port, doc, key)
        else:
            secrets_file = self._write_launch_file(owner)
            command = f"exec {launcher} {shlex.quote(str(secrets_file))}"
        doc = {
            "name": self._job_name(),
            "command": command,
            "vc": vc,
            "priority": self.priority,
            "tasks": 1,
            "gpus": _profile_gpus(profile),
            **self._resources(profile),
            "retries": 0,
        }
        try:
            job = await self._call(lambda c, d: c.submit(d).info, doc, token=self.api_token)
        except LabHiveError as err:
            if secrets_file is not None:
                secrets_file.unlink(missing_ok=True)
            raise ServerJobEnded(f"LabHive refused your server: {err.message}") from None
        self.job_id = int(job.id)
        self.log.info("%s: job %s in %s", self._log_name, self.job_id, vc)
        # give up (with the queue's words) before the hub cuts start() off without them
        patience = max(self.start_timeout - 30, self.start_timeout * 0.8)
        await self._wait_running(deadline=time.monotonic() + patience)
        if self.server_on_nodes:
            address = await self._hand_over(key, handed, time.monotonic() + self.http_timeout)
            await self._wait_on_node(address, time.monotonic() + self.http_timeout)
            return f"http://{address}:{self.port}"
        await self._wait_listening(time.monotonic() + self.http_timeout)
        return f"http://{self.ip}:{self.port}"

    async def _wait_listening(self, deadline: float) -> None:
        """Until the server accepts connections on its port (checked 4 times a second; the job
        every ``poll_s``), or ``deadline``: then the hub's own wait takes over.

        JupyterHub's wait for a server backs off up to 5 s between tries, so a server that
        boots in 15 s on a loaded machine was seen only at 15-20 s; a class of 50 starting at
        once paid that on every login. A refused connect on loopback costs next to nothing; a
        job that ends before its server listens ends the start with its own words.

        The job is asked after ``poll_s``, then at doubling gaps up to ``LISTEN_CHECK_MAX_S``:
        a server's boot takes 10-40 s while a class logs in, and asking every second cost the
        hub and the service ~5 ms of CPU each time for each booting server (a job that ends
        during the boot is reported up to that many seconds later)."""
        checked, gap = 0.0, 0.0
        while time.monotonic() < deadline:
            try:
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(self.ip, self.port), timeout=2
                )
            except (OSError, TimeoutError):
                pass
            else:
                writer.close()
                return
            if time.monotonic() - checked >= gap:
                checked = time.monotonic()
                gap = min(max(gap * 2, self.poll_s), max(self.poll_s, LISTEN_CHECK_MAX_S))
                job = await self._job()
                if not job.running:
                    raise ServerJobEnded(
                        f"your server's job {self.job_id} ended {job.state} before the server "
                        f"listened: {job.reason or 'no reason given'} (its log: "
                        f"`labhive logs {self.job_id} --stderr`)"
                    )
            await asyncio.sleep(0.25)

    async def _hand_over(self, key: str, env: dict[str, str], deadline: float) -> str:
        """Hand the server's tokens to its launcher on its node; the node's address.

        Retried while the launcher is not listening yet; the job ending, a node the executor
        gives no address for, or something other than the launcher on the port ends it."""
        while True:
            job = await self._job()
            if job.state != JobState.RUNNING:
                raise ServerJobEnded(
                    f"your server's job {self.job_id} ended {job.state} before the server "
                    f"started: {job.why or job.reason or 'no reason given'} (its log: "
                    f"`labhive logs {self.job_id} --stderr`)"
                )
            # RUNNING is recorded before the executor's launch returns: the address follows
            address = next((t.address for t in job.tasks), None)
            problem = "LabHive's executor has not said where your server runs (no task address)"
            if address:
                try:
                    await asyncio.to_thread(hand_over, address, self.port, key, env)
                    return str(address)
                except HandoffRefused as err:
                    await self._cancel(wait=0)
                    raise ServerJobEnded(f"your server could not start safely: {err}") from None
                except OSError as err:
                    problem = f"its launcher at {address}:{self.port} did not answer: {err}"
            if time.monotonic() > deadline:
                await self._cancel(wait=0)
                raise ServerJobEnded(
                    f"your server's job {self.job_id} runs but {problem}; start it again (if "
                    "this executor runs servers on the hub's machine, the hub admin should "
                    "turn off server_on_nodes)"
                )
            await asyncio.sleep(min(self.poll_s, 0.5))

    async def _wait_on_node(self, address: str, deadline: float) -> None:
        """Until the server listens on its node; a job that ends first, or a server that does
        not listen in time (then cancelled), ends the start with its words.

        Returning earlier left the hub's own wait to notice a server that died after the
        handoff, where JupyterHub (5.x) raises InvalidStateError instead of the spawn's
        error; the user saw a bare 500."""
        while time.monotonic() < deadline:
            try:
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(address, self.port), timeout=2
                )
            except (OSError, TimeoutError):
                pass
            else:
                writer.close()
                return
            job = await self._job()
            if not job.running:
                raise ServerJobEnded(
                    f"your server's job {self.job_id} ended {job.state} on its node before the "
                    f"server listened: {job.why or job.reason or 'no reason given'}"
                    f"{await self._said()}"
                )
            await asyncio.sleep(min(self.poll_s, 0.5))
        await self._cancel(wait=0)
        raise ServerJobEnded(
            f"your server's job {self.job_id} ran, but its server did not listen at "
            f"{address}:{self.port} within {self.http_timeout} s and was cancelled; start it "
            f"again{await self._said()}"
        )

    async def _said(self) -> str:
        """The last words of the server's error output (the launcher's reason), if any."""
        try:
            tail = await self._call(lambda c, i: c.log_tail(i, 3), self.job_id)
        except LabHiveError:
            return ""
        lines = [ln for ln in str(tail).splitlines() if ln.strip()]
        return f"; it said: {lines[-1].strip()}" if lines else ""

    async def _choose_vc(self) -> str:
        try:
            vcs = await self._call(lambda c: c.vcs(), token=self.api_token)
        except ServiceUnavailable as err:
            raise ServerJobEnded(
                f"cannot reach LabHive to start your server: {err.message}"
            ) from None
        except LabHiveError as err:
            raise ServerJobEnded(f"LabHive refused to start your server: {err.message}") from None
        granted = [name for name, v in vcs.items() if v.get("may_submit")]
        chosen = (self.user_options or {}).get("vc")
        if chosen:
            if chosen in granted:
                return str(chosen)
            raise ServerJobEnded(
                f"you may not start a server in VC {chosen!r}; your groups grant: "
                f"{', '.join(granted) or 'none'}"
            )
        for name in [*self.vcs, *await self._vc_choices(), *granted]:
            if name in granted:
                return str(name)
        raise ServerJobEnded(
            "your JupyterHub groups grant no LabHive virtual cluster, so there is nowhere to run "
            "your server; ask an instructor to add you to a group that grants one"
        )

    async def _owner(self) -> homes.Owner | None:
        """The uid/gid the server's task will run as (asked of the service), when this hub
        can hand the server its home and launch file; None: files stay the hub's own."""
        try:
            me = await self._call(lambda c: c.me(), token=self.api_token)
        except NotFoundError:  # a service from before per-user identities
            return None
        except LabHiveError as err:
            raise ServerJobEnded(f"LabHive refused to start your server: {err.message}") from None
        return homes.owner_from(me)

    def _job_name(self) -> str:
        return server_job_name(self.user.name, self.name)

    def get_env(self) -> dict[str, str]:
        """The hub's environment for the server, plus where the course's files and data are."""
        env = dict(super().get_env())
        if self.course_dir:
            env["LABHIVE_COURSE_DIR"] = os.path.abspath(self.course_dir)
        if self.course_data:
            env["LABHIVE_DATA"] = os.path.abspath(self.course_data)
        return env

    def _write_launch_file(self, owner: homes.Owner | None = None) -> Path:
        """The server's command and environment (its hub token included), readable by the
        hub's user only, or by the server's own uid (see ``homes``); the job's stored command
        names this file, never the secrets."""
        doc = self._launch_doc(owner)
        path = homes.launch_folder(Path(self.secrets_dir), owner) / f"{self._job_name()}.json"
        with os.fdopen(homes.open_launch_file(path, owner), "w") as out:
            json.dump(doc, out)
        return path

    def _launch_doc(self, owner: homes.Owner | None, on_node: bool = False) -> dict[str, Any]:
        """The server's command, environment and folder; ``on_node``: the launcher makes the
        folder there (the hub's filesystem may not be the node's)."""
        env = self.get_env()
        env["LABHIVE_URL"] = self.server_service_url or self.service_url
        # the server extension is enabled by this package's own config dir, however installed
        config = [str(JUPYTER_CONFIG), *filter(None, [env.get("JUPYTER_CONFIG_PATH")])]
        env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(config)
        cmd = [*self.cmd, *self.get_args()]
        beside_python = str(Path(sys.executable).parent)  # the hub's venv, even when not on PATH
        cmd[0] = shutil.which(cmd[0]) or shutil.which(cmd[0], path=beside_python) or cmd[0]
        cmd = server_command(cmd, self.quick_boot)
        cwd = self._cwd()
        if cwd:
            if not on_node or owner is not None:
                # on nodes that share the hub's file system (a Slurm site's /home), this is
                # the node's home too; the launcher makes or checks it on the node itself
                homes.make_home(Path(cwd), owner)
            if owner is not None:
                env["HOME"] = cwd  # the hub's home is not theirs
        return {"env": env, "cmd": cmd, "cwd": cwd}

    def _cwd(self) -> str | None:
        notebook_dir = self.format_string(self.notebook_dir) if self.notebook_dir else ""
        return os.path.expanduser(notebook_dir) if notebook_dir else None

    async def _wait_running(self, deadline: float) -> None:
        """Until the job runs; raise with the queue's words when it ends or waits too long."""
        job: JobInfo | None = None
        since = time.monotonic()
        while time.monotonic() < deadline:
            try:
                job = await self._job()
            except ServiceUnavailable as err:
                self.log.warning("%s: %s", self._log_name, err.message)
                await asyncio.sleep(self.poll_s)
                continue
            if job.running:
                return
            if not job.waiting:
                raise ServerJobEnded(
                    f"your server's job {self.job_id} ended {job.state} before the server "
                    f"started: {job.why or job.reason or 'no reason given'}"
                )
            await asyncio.sleep(self.poll_s)
        waited = waiting_text(job) if job else "in the queue"
        await self._cancel(wait=0)
        raise ServerJobEnded(
            f"your server waited {_duration(time.monotonic() - since)} without getting its "
            f"resources ({waited}) and was cancelled; try a smaller size or start it later"
        )

    # ---- progress -----------------------------------------------------------------------

    async def progress(self) -> AsyncIterator[dict[str, Any]]:
        """The scheduler's live words for the spawn page, until the job runs."""
        last = ""
        while self.job_id is None:
            if not last:
                last = "Submitting your server to the LabHive queue"
                yield {"progress": 5, "message": last}
            await asyncio.sleep(min(self.poll_s, 0.5))
        while True:
            try:
                job = await self._job()
            except LabHiveError as err:
                yield {"message": f"asking LabHive about job {self.job_id}: {err.message}"}
                await asyncio.sleep(self.poll_s)
                continue
            if job.waiting:
                text = waiting_text(job)
                if text != last:
                    last = text  # (the standing is asked again only when the place changes)
                    standing = (await self._standing()).get(job.vc or "")
                    shown = f"{text} · fair share: {standing}" if standing else text
                    yield {"progress": 20, "message": shown}
            else:
                if job.running:
                    where = ", ".join(f"{t.node} GPUs {list(t.gpus) or 'none'}" for t in job.tasks)
                    text = (
                        f"RUNNING: job {self.job_id} in VC {job.vc} on "
                        f"{where or 'its node'}; starting JupyterLab"
                    )
                    yield {"progress": 70, "message": text}
                return
            await asyncio.sleep(self.poll_s)

    # ---- poll / stop --------------------------------------------------------------------

    async def poll(self) -> int | None:
        """None while the job runs (or the service cannot be asked: the hub then checks the
        server's URL itself); an exit status once it ended or was preempted."""
        if self.job_id is None:
            return 0
        try:
            job = await self._job()
        except NotFoundError:
            self.last_end = f"your server's job {self.job_id} is gone from LabHive"
            return 0
        except LabHiveError as err:
            self.log.warning("%s: cannot poll job %s: %s", self._log_name, self.job_id, err.message)
            return None
        if job.running:
            return None
        if job.waiting:
            self.last_end = _requeued_message(self.job_id, job, await self._requeue_why())
            self.log.warning("%s: %s", self._log_name, self.last_end)
            await self._cancel(wait=0)
            return 1
        if not self._ending:  # it ended on its own, or someone cancelled it in LabHive
            self.last_end = _ended_message(self.job_id, job)
        code = job.exit_code
        return int(code) if code else 1 if job.state == JobState.FAILED else 0

    async def _requeue_why(self) -> str:
        """Why the job went back to the queue, from its last event ("preempted by ...")."""
        try:
            events = await self._call(lambda c, i: c.events(i), self.job_id)
        except LabHiveError:
            return ""
        back = [e for e in events if e.get("to_state") == JobState.WAITING and e.get("from_state")]
        return str(back[-1].get("why") or back[-1].get("reason") or "") if back else ""

    async def stop(self, now: bool = False) -> None:
        """Cancel the job; unless ``now``, wait (up to 20 s) for its process to be gone. A
        server stopped while its job still queued leaves a notice for the next spawn form."""
        queued = None if self._ending else await self._queued_job()  # else it says already
        await self._cancel(wait=0 if now else 20)
        if queued is not None:
            self.last_end = (
                f"Your server's job {self.job_id} was still waiting in {queued.vc}'s queue "
                "when the server was stopped, so that queued job was cancelled."
            )
            self.log.info("%s: %s", self._log_name, self.last_end)
        self._remove_launch_file()
        self._close_clients()

    async def _queued_job(self) -> JobInfo | None:
        if self.job_id is None:
            return None
        try:
            job = await self._job()
        except LabHiveError:
            return None
        return job if job.waiting else None

    async def _cancel(self, wait: float) -> None:
        if self.job_id is None:
            return
        self._ending = True  # the hub (or poll) ends it: its end needs no notice
        try:
            await self._call(lambda c, i, w: c.cancel(i, wait=w), self.job_id, wait)
        except NotFoundError:
            pass
        except LabHiveError as err:
            self.log.warning(
                "%s: cannot cancel job %s: %s", self._log_name, self.job_id, err.message
            )

    def _remove_launch_file(self) -> None:
        (Path(self.secrets_dir) / f"{self._job_name()}.json").unlink(missing_ok=True)


def waiting_text(job: JobInfo, now: float | None = None) -> str:
    """ "WAITING: position 2 of 3 in vc1, expected to start in ~5 min — <why>" from a job as
    the service returns it (the estimate when the service has one; what it waits for when
    its start has no grounds: "..., waits for a notebook server in VC vc1 to stop; no
    estimate — <why>")."""
    why = _POSITION_TAIL.sub("", job.why or job.reason or "").strip()
    pos, length = job.queue_position, job.queue_length
    head = f"WAITING: position {pos} of {length} in {job.vc}" if pos else f"WAITING in {job.vc}"
    if job.eta is not None:
        low, high = job.eta_low or job.eta, job.eta_high or job.eta
        when = eta_text(job.eta, low, high, time.time() if now is None else now)
        head += ", expected to " + when.replace("starts", "start", 1)
    elif job.waits_for:
        head += ", " + no_estimate_text(job.waits_for)
    return f"{head} — {why}" if why else head


def _ended_message(job_id: int, job: JobInfo) -> str:
    """A notice for a server whose job ended without the hub asking (none for a clean exit)."""
    reason = job.reason
    if job.state == JobState.FAILED:
        return (
            f"Your server (job {job_id}) failed ({reason}, exit code {job.exit_code}); "
            f"its log: `labhive logs {job_id} --stderr`."
        )
    if job.state == JobState.STOPPED:
        return f"Your server (job {job_id}) was cancelled in LabHive ({reason})."
    return ""


def _requeued_message(job_id: int, job: JobInfo, why: str) -> str:
    """Why a server's job is waiting again although the hub thought it was up."""
    if (job.attempt or 1) > 1 or job.reason == "preempted":
        return (
            f"Your server (job {job_id}) was stopped by LabHive: a higher-priority job needed "
            f"its resources ({why or job.reason or 'requeued'}). Unsaved work in open "
            "notebooks may be lost; start a new server to continue."
        )
    return (
        f"Your server (job {job_id}) was still waiting in the queue when the hub restarted, "
        "so it was cancelled; start it again."
    )


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} seconds" if seconds < 120 else f"{seconds / 60:.0f} minutes"


def _profile_gpus(profile: dict[str, Any]) -> int | float:
    """A server size's GPUs: whole ones, or a share of one GPU (``"gpus": 0.25``: a notebook
    that needs a little GPU); a size the admin wrote wrong says so at spawn, with what works."""
    try:
        return as_number(profile.get("gpus", 0))
    except ShareError as err:
        raise ServerJobEnded(
            f"server size {profile.get('slug')!r} has gpus {profile.get('gpus')!r}: {err}; "
            f"the admin's profiles take whole GPUs or a share {SHARES_SHOWN}"
        ) from None
