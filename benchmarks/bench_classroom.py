"""A class logs in at once: N students against a real ``labhive up`` on its embedded defaults.

Starts ``labhive up`` as an instructor does (``make up``: the default cluster, the native
logins, a roster of N generated students) on free ports with a fresh data dir. Each student,
their arrivals spread evenly over ``--arrival-s``, then does what a lab's first cells do:

1. logs in (the hub's login form, their own password) and makes an API token (as /hub/token);
2. starts their server (hub REST API) and follows its progress events until it is ready;
3. starts a kernel (the server's REST API) and talks to it over its websocket channel;
4. runs a lab-like cell: ``%load_ext labhive.kernel_ext``, then
   ``job = %submit --gpus 1 --no-wait -- sleep 5`` (the real magic and client), and polls the
   job from the kernel with ``job.refresh()`` (what the job widget's poller calls) until it runs;
5. stops their server.

Reported: p50/p95 of login -> kernel ready and of submit -> RUNNING (as the kernel saw it) for
jobs that found a free GPU, and separately how long the others waited for one (the VC's GPUs
bound how many 1-GPU jobs run at once; each job is short so later ones fit as earlier ones
end); each student's failures (a student past ``--student-timeout-s`` is one); the CPU seconds
and peak RSS of the hub (JupyterHub and its proxy), the service, and the tasks it runs
(servers, kernels, jobs), sampled with psutil over the class. Everything ``labhive up``
started is stopped in a ``finally``, and a process left behind fails the run.

    python benchmarks/bench_classroom.py [--students 50] [--arrival-s 120] [--job-s 5]
                                         [--student-timeout-s 300] [--browser] [--json out.json]
                                         [--hub-config more_jupyterhub_config.py]

CPU: the exact total from a ``cpuacct`` group around ``labhive up`` (``CpuAccount``) and, per
student, the hub's, the service's and each task role's share (``Sampler``, ``per_student``).
``--browser``: one more student in headless Chromium opens lab 1 (``browser_student.py``).

Goals (issue 30): 50 students over 2 minutes on a 2-core machine, p95 login -> kernel ready
<= 30 s and p95 submit -> RUNNING <= 10 s for jobs that fit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import websocket  # websocket-client, a dependency of jupyter_server
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_service import _no_leftovers  # noqa: E402
from browser_student import NAME as BROWSER_NAME  # noqa: E402
from browser_student import attend_in_browser  # noqa: E402
from hub_support import read_up_banner  # noqa: E402 (tests/, on the path bench_service sets)

GOALS = {"login_to_kernel_p95_s": 30.0, "submit_to_running_p95_s": 10.0}
SETUP_CELL = "%load_ext labhive.kernel_ext"
SUBMIT_CELL = (
    "job = %submit --name {name} --gpus 1 --no-wait -- sleep {job_s}\nprint('LABHIVE_JOB', job.id)"
)
#: Polls as the widget's poller does (``job.refresh()``, 4 Hz at most) until the job leaves
#: WAITING; prints the state and the service's own submit and start times.
POLL_CELL = """\
import time as _t
_until = _t.monotonic() + {timeout}
while job.state == 'WAITING' and _t.monotonic() < _until:
    _t.sleep(0.25)
    job.refresh()
print('LABHIVE_STATE', job.state, job.submitted_at, job.started_at)
"""


@dataclass
class Student:
    """One student's timings (wall clock, ``time.time()``) and what went wrong, if anything."""

    name: str
    arrive_at: float = 0.0
    logged_in_at: float | None = None
    server_ready_at: float | None = None
    kernel_ready_at: float | None = None
    submitted_at: float | None = None  # the bench sent the %submit cell
    running_seen_at: float | None = None  # the kernel's poll saw RUNNING (or later)
    job_id: int | None = None
    job_state: str | None = None
    job_submitted_at: float | None = None  # the service's times
    job_started_at: float | None = None
    job_finished_at: float | None = None
    stage: str = "arrive"
    error: str | None = None

    @property
    def login_to_kernel_s(self) -> float | None:
        if self.kernel_ready_at is None:
            return None
        return self.kernel_ready_at - self.arrive_at

    @property
    def submit_to_running_s(self) -> float | None:
        if self.running_seen_at is None or self.submitted_at is None:
            return None
        return self.running_seen_at - self.submitted_at


class StudentFailed(Exception):
    pass


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def left(self, what: str) -> float:
        left = self.at - time.monotonic()
        if left <= 0:
            raise StudentFailed(f"timed out {what}")
        return left


# ---- the platform ---------------------------------------------------------------------------


@dataclass
class Classroom:
    url: str
    service_url: str
    data: Path
    passwords: dict[str, str]
    proc: subprocess.Popen[str]
    admin_token: str = field(repr=False, default="")


def roster(path: Path, students: int, browser: bool = False) -> dict[str, str]:
    """A roster of ``students`` named s001... with passwords of their own (and the browser
    student, when there is one)."""
    passwords = {f"s{i:03d}": f"pw-{secrets.token_urlsafe(12)}" for i in range(1, students + 1)}
    if browser:
        passwords[BROWSER_NAME] = f"pw-{secrets.token_urlsafe(12)}"
    doc = {"students": {name: {"password": pw} for name, pw in passwords.items()}}
    path.write_text(yaml.safe_dump(doc))
    return passwords


def free_port() -> int:
    from labhive.scheduler.executors.env import free_port as free

    return free()


CPUACCT = Path("/sys/fs/cgroup/cpuacct")


class CpuAccount:
    """The exact CPU seconds of ``labhive up`` and everything it starts: a cgroup v1
    ``cpuacct`` group of its own, joined before it runs. LabHive's executors move tasks into
    their ``cpu``/``memory``/``pids`` groups, never ``cpuacct``'s, so every server, kernel,
    supervisor and job stays counted here, including processes too short-lived to sample.
    Where that hierarchy is missing or not writable, ``seconds`` is None (sampled figures only)."""

    def __init__(self, name: str) -> None:
        self.path: Path | None = CPUACCT / name
        try:
            self.path.mkdir()
        except OSError:
            self.path = None

    def join(self) -> None:
        """Put the calling process in the group (a ``preexec_fn``: before ``labhive up`` runs)."""
        if self.path is not None:
            (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def seconds(self) -> float | None:
        if self.path is None:
            return None
        return int((self.path / "cpuacct.usage").read_text()) / 1e9

    def remove(self) -> None:
        """The group goes once it is empty (everything ``labhive up`` started has ended)."""
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.rmdir()


@contextmanager
def labhive_up(
    tmp: Path,
    students: int,
    up_timeout: float = 300,
    account: CpuAccount | None = None,
    browser: bool = False,
    hub_config: Path | None = None,
) -> Iterator[Classroom]:
    """``labhive up --roster`` on free ports in ``tmp``; on the way out, however the run ends,
    Ctrl-C (it stops every server, the hub, the service and the jobs), then a check that
    nothing under ``tmp`` runs on (killed, and the run fails, if anything does)."""
    passwords = roster(tmp / "course.yaml", students, browser)
    port, service_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "labhive.scheduler.cli", "up", "--port", str(port)]
    cmd += ["--service-port", str(service_port), "--data-dir", str(tmp / "data")]
    cmd += ["--roster", str(tmp / "course.yaml"), "--grace-s", "2", *_uid_range(students)]
    if browser:  # lab 1 in every home, as `make up` does
        cmd += ["--course", str(HERE.parent / "labs")]
    if hub_config is not None:  # e.g. the old server start, to compare with
        cmd += ["--hub-config", str(Path(hub_config).resolve())]
    bin_dir = str(Path(sys.executable).parent)  # kernelspecs say "python": the venv's first
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=True, preexec_fn=account.join if account else None,
    )  # fmt: skip
    try:
        read_up_banner(proc, up_timeout)
        token = (tmp / "data" / "admin.token").read_text().strip()
        yield Classroom(
            f"http://127.0.0.1:{port}", f"http://127.0.0.1:{service_port}", tmp / "data",
            passwords, proc, token,
        )  # fmt: skip
    finally:
        try:
            _stop_up(proc)
        finally:
            _no_leftovers(tmp, None)


def _uid_range(students: int) -> list[str]:
    """A uid range of its own for this run's students: the default one may be another
    service's on this host, and the service refuses to share it (``uid_claims``)."""
    from labhive.scheduler.service.uid_claims import free_first, live_claims

    count = students + 16  # the admin and a few spare
    first = free_first(count, live_claims(), above=200000)
    return ["--first-uid", str(first), "--uid-count", str(count)]


def _stop_up(proc: subprocess.Popen[str]) -> None:
    """Ctrl-C, as the instructor stops it; SIGKILL to the group if it hangs (the hub then
    gets SIGTERM from its parent's death, and its service stops the jobs). Then wait for what
    it started (the hub, its proxy, the service, their tasks: in sessions of their own) to end;
    what still runs after a minute is killed and fails the run."""
    try:
        started = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        started = []
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    _, alive = psutil.wait_procs(started, timeout=60)
    if alive:
        for left in alive:  # a psutil handle checks the pid is still that process
            with contextlib.suppress(psutil.Error):
                left.kill()
        shown = ", ".join(f"{p.pid} {' '.join(_cmd(p))[:60]}" for p in alive)
        raise RuntimeError(f"labhive up left {len(alive)} processes running (killed): {shown}")


# ---- resources ------------------------------------------------------------------------------


#: What each of the service's tasks is, by its command line (first match): the parts of a
#: student's CPU that the per-student table shows.
TASK_ROLES = (
    ("supervisor", "labhive.scheduler.executors.supervise"),
    ("kernel", "ipykernel_launcher"),
    ("server", "jupyterhub-singleuser"),
    ("server", "labhive.hub_extension.launch"),  # the launcher, before it execs the server
    ("server", "jupyter_builder/yarn.js"),  # jupyterlab's `yarn config` at the server's start
)
PARTS = ("hub", "service", "tasks")
ROLES = ("server", "kernel", "supervisor", "job")


def task_role(cmdline: list[str]) -> str:
    """``server``, ``kernel``, ``supervisor`` or ``job`` (anything else a task runs)."""
    line = " ".join(cmdline)
    return next((role for role, mark in TASK_ROLES if mark in line), "job")


class Sampler:
    """CPU seconds and peak RSS of the hub (JupyterHub + proxy), the service process, and the
    tasks below the service, sampled every ``every`` seconds from ``labhive up``'s tree.

    A process born after the sampler started counts from zero (its start-up is most of what a
    server or a kernel costs); one already running counts from its first reading. A process
    that ends between two readings loses what it used after the last one (and one that lives
    less than ``every`` may never be seen): the exact total is ``CpuAccount``'s.
    ``roles_s`` splits the sampled task CPU by ``task_role``."""

    def __init__(self, up_pid: int, every: float = 0.5) -> None:
        self.up_pid, self.every = up_pid, every
        self.began = time.time()
        self.first: dict[int, float] = {}
        self.last: dict[int, tuple[str, float]] = {}
        self.role: dict[int, str] = {}
        self.seen: dict[int, float] = {}  # pid -> its start time: what must be gone at the end
        self.peak_rss: dict[str, int] = dict.fromkeys(PARTS, 0)
        self.loads: list[float] = []  # the machine's 1-minute load average at each sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def sample(self) -> None:
        rss = dict.fromkeys(PARTS, 0)
        self.loads.append(os.getloadavg()[0])  # what else ran: the figures depend on it
        for part, proc in self._parts():
            with contextlib.suppress(psutil.Error):
                cpu = proc.cpu_times()
                used = cpu.user + cpu.system
                if proc.pid not in self.first:
                    born = proc.create_time()
                    self.first[proc.pid] = 0.0 if born >= self.began else used
                    self.seen[proc.pid] = born
                if part == "tasks":
                    cmdline = _cmd(proc)  # empty once it has ended (a zombie): keep its role
                    if cmdline:  # read at each sample: the launcher execs the server
                        self.role[proc.pid] = task_role(cmdline)
                self.last[proc.pid] = (part, used)
                rss[part] += proc.memory_info().rss
        for part, value in rss.items():
            self.peak_rss[part] = max(self.peak_rss[part], value)

    def _parts(self) -> Iterator[tuple[str, psutil.Process]]:
        try:
            up = psutil.Process(self.up_pid)
            hub_procs = [p for p in up.children() if "jupyterhub" in " ".join(_cmd(p))]
        except psutil.Error:
            return
        for hub in hub_procs:
            yield "hub", hub
            for child in _children(hub):
                if " serve " in f" {' '.join(_cmd(child))} ":
                    yield "service", child
                    for task in _children(child, recursive=True):
                        yield "tasks", task
                else:
                    yield "hub", child  # configurable-http-proxy

    def cpu_s(self) -> dict[str, float]:
        out = dict.fromkeys(PARTS, 0.0)
        for pid, (part, used) in self.last.items():
            out[part] += used - self.first[pid]
        return out

    def roles_s(self) -> dict[str, float]:
        """The sampled tasks' CPU by role (each process under the role it last had)."""
        out = dict.fromkeys(ROLES, 0.0)
        for pid, (part, used) in self.last.items():
            if part == "tasks":
                out[self.role.get(pid, "job")] += used - self.first[pid]
        return out


def _cmd(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def _children(proc: psutil.Process, recursive: bool = False) -> list[psutil.Process]:
    try:
        return list(proc.children(recursive=recursive))
    except psutil.Error:
        return []


# ---- one student ----------------------------------------------------------------------------


class KernelChannel:
    """A kernel's websocket channel (JSON messages, as JupyterLab without a subprotocol)."""

    def __init__(self, url: str, token: str, timeout: float) -> None:
        self.ws = websocket.create_connection(
            url, header=[f"Authorization: token {token}"], timeout=timeout
        )
        self.session = uuid.uuid4().hex

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()

    def request(self, msg_type: str, content: dict[str, Any], deadline: Deadline) -> str:
        """Send a shell request; return the stdout it printed once its reply and the kernel's
        idle have come. An error reply or an error output fails the student."""
        msg_id = uuid.uuid4().hex
        header = {
            "msg_id": msg_id, "session": self.session, "username": "bench", "date": "",
            "msg_type": msg_type, "version": "5.3",
        }  # fmt: skip
        msg = {"header": header, "parent_header": {}, "metadata": {}, "content": content}
        self.ws.send(json.dumps({**msg, "channel": "shell", "buffers": []}))
        stdout, replied, idle = "", None, False
        while replied is None or not idle:
            self.ws.settimeout(deadline.left(f"for the kernel's answer to {msg_type}"))
            try:
                got = json.loads(self.ws.recv())
            except websocket.WebSocketTimeoutException:
                continue  # the deadline says when to give up
            if got.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, body = got["msg_type"], got["content"]
            if kind == "stream" and body.get("name") == "stdout":
                stdout += body["text"]
            elif kind == "error":
                raise StudentFailed(f"the cell failed: {body['ename']}: {body['evalue']}")
            elif kind == "status" and body.get("execution_state") == "idle":
                idle = True
            elif kind.endswith("_reply"):
                replied = body
        if replied.get("status") == "error":
            raise StudentFailed(f"{msg_type}: {replied.get('ename')}: {replied.get('evalue')}")
        return stdout

    def execute(self, code: str, deadline: Deadline) -> str:
        content = {
            "code": code, "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True,
        }  # fmt: skip
        return self.request("execute_request", content, deadline)


def attend(
    room: Classroom, student: Student, job_s: float, timeout: float,
    lab_timeout: float | None = None,
) -> None:  # fmt: skip
    """One student's class; failures are recorded on ``student``, never raised. ``timeout``
    counts from arrival; ``lab_timeout``, if given, from the login on instead (a student who
    gives up that long after logging in, whatever the login took)."""
    deadline = Deadline(timeout)
    student.arrive_at = time.time()
    http = httpx.Client(base_url=room.url, timeout=60)
    token = ""
    try:
        token = _log_in(http, student, room.passwords[student.name], deadline)
        if lab_timeout is not None:
            deadline = Deadline(lab_timeout)
        _lab(room, http, student, token, job_s, deadline)
    except StudentFailed as err:
        student.error = f"{student.stage}: {err}"
    except httpx.TimeoutException as err:  # a request cut at the student's deadline
        student.error = f"{student.stage}: timed out ({type(err).__name__})"
    except Exception as err:  # any other failure is the student's too, with its stage
        student.error = f"{student.stage}: {type(err).__name__}: {err}"
    finally:
        if token:
            _stop_server(http, student, token)
        http.close()


def _log_in(http: httpx.Client, student: Student, password: str, deadline: Deadline) -> str:
    student.stage = "login"
    form = http.get("/hub/login", timeout=deadline.left("for the login page"))
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', form.text)
    if not xsrf:
        raise StudentFailed(f"no login form ({form.status_code})")
    answer = http.post(
        "/hub/login?next=%2Fhub%2Fhome",
        data={"username": student.name, "password": password, "_xsrf": xsrf.group(1)},
        timeout=deadline.left("for the login"),
    )
    if answer.status_code != 302:
        raise StudentFailed(f"login refused ({answer.status_code})")
    student.logged_in_at = time.time()
    made = http.post(
        f"/hub/api/users/{student.name}/tokens",
        json={"note": "bench_classroom"},
        headers={"X-XSRFToken": http.cookies.get("_xsrf") or ""},
        timeout=deadline.left("for an API token"),
    )
    if made.status_code != 201:
        raise StudentFailed(f"no API token ({made.status_code}: {made.text[:200]})")
    return str(made.json()["token"])


def _lab(
    room: Classroom, http: httpx.Client, student: Student, token: str, job_s: float,
    deadline: Deadline,
) -> None:  # fmt: skip
    auth = {"Authorization": f"token {token}"}
    name = student.name
    student.stage = "spawn"
    started = http.post(
        f"/hub/api/users/{name}/server", headers=auth, timeout=deadline.left("to spawn")
    )
    if started.status_code not in (201, 202):
        raise StudentFailed(f"spawn refused ({started.status_code}: {started.text[:200]})")
    _follow_progress(http, name, auth, deadline)
    student.server_ready_at = time.time()
    student.stage = "kernel"
    made = http.post(
        f"/user/{name}/api/kernels", headers=auth, json={"name": "python3"},
        timeout=deadline.left("to start a kernel"),
    )  # fmt: skip
    if made.status_code != 201:
        raise StudentFailed(f"no kernel ({made.status_code}: {made.text[:200]})")
    ws_url = room.url.replace("http", "ws", 1) + f"/user/{name}/api/kernels/"
    channel = KernelChannel(
        ws_url + f"{made.json()['id']}/channels", token, deadline.left("for the websocket")
    )
    try:
        channel.request("kernel_info_request", {}, deadline)
        student.kernel_ready_at = time.time()
        student.stage = "setup cell"
        channel.execute(SETUP_CELL, deadline)
        student.stage = "submit"
        student.submitted_at = time.time()
        out = channel.execute(SUBMIT_CELL.format(name=f"bench-{name}", job_s=job_s), deadline)
        job = re.search(r"LABHIVE_JOB (\d+)", out)
        if not job:
            raise StudentFailed(f"%submit printed no job id: {out[:200]!r}")
        student.job_id = int(job.group(1))
        student.stage = "wait for RUNNING"
        out = channel.execute(POLL_CELL.format(timeout=deadline.left("for RUNNING")), deadline)
        seen = time.time()
        state = re.search(r"LABHIVE_STATE (\S+) (\S+) (\S+)", out)
        if not state:
            raise StudentFailed(f"the poll printed no state: {out[:200]!r}")
        student.job_state = state.group(1)
        if student.job_state == "WAITING":
            raise StudentFailed(f"job {student.job_id} still WAITING")
        if student.job_state not in ("RUNNING", "SUCCEEDED"):
            raise StudentFailed(f"job {student.job_id} ended {student.job_state}")
        student.running_seen_at = seen
        student.stage = "done"
    finally:
        channel.close()


def _follow_progress(
    http: httpx.Client, name: str, auth: dict[str, str], deadline: Deadline
) -> None:
    """Follow the spawn's progress events, as the spawn page does (one long request, not a
    poll per second per student), until the server is ready; then check that the hub says so."""
    url = f"/hub/api/users/{name}/server/progress"
    timeout = httpx.Timeout(10, read=deadline.left("for the server"))
    with http.stream("GET", url, headers=auth, timeout=timeout) as events:
        if events.status_code != 200:
            raise StudentFailed(f"no spawn progress ({events.status_code})")
        for line in events.iter_lines():
            deadline.left("for the server")  # keepalives come every 8 s: bound the whole wait
            if not line.startswith("data:"):
                continue  # keepalives
            event = json.loads(line[5:])
            if event.get("failed"):
                raise StudentFailed(f"the spawn failed: {event.get('message')}")
            if event.get("ready"):
                break
    _poll(lambda: _server_ready(http, name, auth), deadline, "for the server", 0.5)


def _server_ready(http: httpx.Client, name: str, auth: dict[str, str]) -> bool:
    user = http.get(f"/hub/api/users/{name}", headers=auth)
    if user.status_code != 200:
        raise StudentFailed(f"cannot read my server's state ({user.status_code})")
    server = (user.json().get("servers") or {}).get("")
    if server is None and user.json().get("pending") is None:
        raise StudentFailed("my server stopped before it was ready (see the hub's log)")
    return bool(server and server.get("ready"))


def _poll(check: Callable[[], bool], deadline: Deadline, what: str, every: float) -> None:
    while not check():
        time.sleep(min(every, deadline.left(what)))


def _stop_server(http: httpx.Client, student: Student, token: str) -> None:
    """Stop the student's server and wait until the hub says it is gone (at most 60 s)."""
    auth = {"Authorization": f"token {token}"}
    try:
        http.delete(f"/hub/api/users/{student.name}/server", headers=auth, timeout=60)
        until = time.monotonic() + 60
        while time.monotonic() < until:
            user = http.get(f"/hub/api/users/{student.name}", headers=auth).json()
            if not user.get("servers") and user.get("pending") is None:
                return
            time.sleep(0.5)
        raise StudentFailed("the server did not stop within 60 s")
    except Exception as err:
        student.error = student.error or f"stop: {type(err).__name__}: {err}"


# ---- the class ------------------------------------------------------------------------------


def run_class(
    students: int, arrival_s: float, job_s: float = 5, timeout: float = 300,
    tmp: Path | None = None, browser: bool = False, hub_config: Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The whole benchmark: start ``labhive up``, run the class, stop everything; the report.
    ``browser``: one more student, in a real browser, arrives halfway (``browser_student``)."""
    with contextlib.ExitStack() as stack:
        if tmp is None:  # not under /tmp: a task's /tmp is its own, its server's files not in it
            made = tempfile.TemporaryDirectory(prefix="bench-class-", dir="/var/tmp")
            tmp = Path(stack.enter_context(made))
        elif Path(tmp).resolve().is_relative_to("/tmp"):
            raise ValueError(f"{tmp}: not under /tmp (a task's /tmp is private); use /var/tmp")
        os.chmod(tmp, 0o755)  # tasks run as their users' uids and reach their homes below
        load = os.getloadavg()[0]
        account = CpuAccount(f"labhive-bench-class-{os.getpid()}")
        stack.callback(account.remove)
        with labhive_up(tmp, students, account=account, browser=browser,
                        hub_config=hub_config) as room:  # fmt: skip
            cluster = _cluster(room)
            roll = [Student(name) for name in sorted(room.passwords) if name != BROWSER_NAME]
            in_browser: list[Any] = []
            up_cpu = account.seconds()  # labhive up's own start: not the class's
            with Sampler(room.proc.pid) as sampler:
                threads = []
                began = time.monotonic()
                if browser:
                    threads.append(_browser_thread(room, arrival_s / 2, timeout, in_browser))
                for i, student in enumerate(roll):
                    time.sleep(max(0.0, began + i * arrival_s / students - time.monotonic()))
                    thread = threading.Thread(
                        target=attend, args=(room, student, job_s, timeout), daemon=True
                    )
                    thread.start()
                    threads.append(thread)
                for thread in threads:
                    thread.join()
                class_s = time.monotonic() - began
            _job_times(room, roll)
            class_cpu = account.seconds()  # servers stopped, jobs ended: the whole class
        report = summarize(roll, cluster, sampler, class_s, servers=students + browser)
        if up_cpu is not None and class_cpu is not None:
            report["cpu_s"]["all_exact"] = round(class_cpu - up_cpu, 1)
            each = (class_cpu - up_cpu) / (students + browser)
            report["cpu_per_student_s"]["total_exact"] = round(each, 2)
        report.update(students=students, arrival_s=arrival_s, job_s=job_s, load_at_start=load)
        report["processes_seen"] = sorted(sampler.seen.items())
        if in_browser:
            report["browser_student"] = {
                **asdict(in_browser[0]), "login_to_kernel_s": in_browser[0].login_to_kernel_s
            }  # fmt: skip
        return report


def _browser_thread(room: Classroom, after_s: float, timeout: float, out: list[Any]) -> Any:
    """The browser student, arriving ``after_s`` into the class; the result goes in ``out``."""

    def attend() -> None:
        time.sleep(after_s)
        out.append(attend_in_browser(room.url, room.passwords[BROWSER_NAME], timeout))

    thread = threading.Thread(target=attend, daemon=True)
    thread.start()
    return thread


def _cluster(room: Classroom) -> dict[str, Any]:
    """The GPUs of the VC students submit to (the cluster's first: the roster's default)."""
    from labhive.client import Client

    with Client(room.service_url, room.admin_token, timeout=30) as admin:
        vcs = admin.vcs()
        vc = next(iter(vcs))
        return {
            "vc": vc,
            "gpus": int(vcs[vc].get("guaranteed_gpus") or 0),
            "virtual": bool(admin.cluster().get("virtual")),
        }


def _submit_to_running(students: list[Student]) -> list[float]:
    return [s.submit_to_running_s for s in students if s.submit_to_running_s is not None]


def _job_times(room: Classroom, roll: list[Student]) -> None:
    """Each job's times as the service recorded them, once they have all ended."""
    from labhive.client import Client

    with Client(room.service_url, room.admin_token, timeout=30) as admin:
        until = time.monotonic() + 120
        for student in roll:
            if student.job_id is None:
                continue
            job = admin.job(student.job_id)
            while not job.done and time.monotonic() < until:
                time.sleep(0.5)
                job.refresh()
            info = job.info
            student.job_submitted_at = info.submitted_at
            student.job_started_at = info.started_at
            student.job_finished_at = info.finished_at


def waited_for_gpu(job: Student, others: list[Student], gpus: int) -> bool:
    """Whether the job found the VC's GPUs taken when it was submitted: ``gpus`` or more of
    the other jobs were then running or queued ahead of it (by the service's times)."""
    at = job.job_submitted_at
    if at is None:
        return False
    busy = 0
    for other in others:
        if other is job or other.job_submitted_at is None or other.job_submitted_at > at:
            continue
        started, finished = other.job_started_at, other.job_finished_at
        queued = started is None or started > at
        running = started is not None and started <= at and (finished is None or finished > at)
        busy += queued or running
    return busy >= gpus


def summarize(
    roll: list[Student], cluster: dict[str, Any], sampler: Sampler, class_s: float,
    servers: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Percentiles, failures and resources, as the table and the JSON show them; the CPU per
    student is shared among ``servers`` (the roll and the browser student, if any)."""
    ok = [s for s in roll if s.error is None]
    login = [s.login_to_kernel_s for s in roll if s.login_to_kernel_s is not None]
    fit: list[Student] = []
    waited: list[Student] = []
    for s in roll:
        if s.submit_to_running_s is None:
            continue
        (waited if waited_for_gpu(s, roll, cluster["gpus"]) else fit).append(s)
    gpu_wait = [
        s.job_started_at - s.job_submitted_at
        for s in waited
        if s.job_started_at is not None and s.job_submitted_at is not None
    ]
    return {
        "cluster": cluster,
        "class_s": round(class_s, 1),
        "ok": len(ok),
        "failed": len(roll) - len(ok),
        "errors": {s.name: s.error for s in roll if s.error},
        "login_to_kernel_s": _stats(login),
        "submit_to_running_fit_s": _stats(_submit_to_running(fit)),
        "submit_to_running_waited_s": _stats(_submit_to_running(waited)),
        "waited_for_gpu_s": _stats(gpu_wait),
        "cpu_s": {k: round(v, 1) for k, v in sampler.cpu_s().items()},
        "cpu_per_student_s": per_student(sampler, servers or len(roll)),
        "peak_rss_mb": {k: round(v / 2**20) for k, v in sampler.peak_rss.items()},
        "load_during": {
            "mean": round(statistics.fmean(sampler.loads), 1) if sampler.loads else None,
            "max": round(max(sampler.loads), 1) if sampler.loads else None,
        },
        "students_detail": [
            {
                **asdict(s),
                "login_to_kernel_s": s.login_to_kernel_s,
                "submit_to_running_s": s.submit_to_running_s,
            }
            for s in roll
        ],
    }


def per_student(sampler: Sampler, students: int) -> dict[str, float]:
    """A student's share of the CPU: the hub's, the service's and each role's of the tasks
    (their server, its kernel, the supervisors, the job), and the total (tasks counted
    exactly, see ``Sampler``)."""
    cpu, roles = sampler.cpu_s(), sampler.roles_s()
    each = {part: cpu[part] for part in ("hub", "service")} | roles
    each["total_sampled"] = sum(cpu.values())
    return {k: round(v / max(students, 1), 2) for k, v in each.items()}


def _stats(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50": None, "p95": None, "max": None}
    ordered = sorted(values)
    p95 = ordered[math.ceil(0.95 * len(ordered)) - 1]  # nearest rank
    return {
        "n": len(values),
        "p50": round(statistics.median(ordered), 2),
        "p95": round(p95, 2),
        "max": round(ordered[-1], 2),
    }


def table(report: dict[str, Any]) -> str:
    c = report["cluster"]
    lines = [
        f"{report['students']} students over {report['arrival_s']:.0f} s, jobs `sleep "
        f"{report['job_s']:g}` on VC {c['vc']} ({c['gpus']} GPUs"
        f"{', virtual' if c['virtual'] else ''}); load {report['load_at_start']:.1f} at start, "
        f"{report['load_during']['mean']} mean / {report['load_during']['max']} max during "
        f"({os.cpu_count()} CPUs); class took {report['class_s']:.0f} s",
        f"{'':34}{'n':>4}{'p50 s':>8}{'p95 s':>8}{'max s':>8}{'goal p95':>10}",
    ]
    rows = [
        ("login -> kernel ready", report["login_to_kernel_s"], GOALS["login_to_kernel_p95_s"]),
        ("submit -> RUNNING (fit)", report["submit_to_running_fit_s"],
         GOALS["submit_to_running_p95_s"]),
        ("submit -> RUNNING (waited for GPU)", report["submit_to_running_waited_s"], None),
        ("  of which waiting for a GPU", report["waited_for_gpu_s"], None),
    ]  # fmt: skip
    for label, st, goal in rows:
        nums = "".join(f"{'-' if st[k] is None else st[k]:>8}" for k in ("p50", "p95", "max"))
        lines.append(f"{label:<34}{st['n']:>4}{nums}{'' if goal is None else goal:>10}")
    lines.append(f"students ok {report['ok']}, failed {report['failed']}")
    for name, error in report["errors"].items():
        lines.append(f"  {name}: {error}")
    cpu, rss = report["cpu_s"], report["peak_rss_mb"]
    for part in PARTS:
        lines.append(f"{part:<8} CPU {cpu[part]:>7.1f} s   peak RSS {rss[part]:>6} MB")
    if "all_exact" in cpu:
        lines.append(
            f"all      CPU {cpu['all_exact']:>7.1f} s   (exact: labhive up's cpuacct group)"
        )
    if "browser_student" in report:
        b = report["browser_student"]
        took = "-" if b["login_to_kernel_s"] is None else f"{b['login_to_kernel_s']:.1f} s"
        lines.append(f"browser student: login -> lab 1's kernel Idle {took}"
                     + (f"; failed: {b['error']}" if b["error"] else ""))  # fmt: skip
    each = report["cpu_per_student_s"]
    lines.append("CPU s per student: " + ", ".join(f"{k} {v:.2f}" for k, v in each.items()))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--students", type=int, default=50)
    parser.add_argument("--arrival-s", type=float, default=120.0)
    parser.add_argument("--job-s", type=float, default=5.0, help="each job's `sleep` (seconds)")
    parser.add_argument("--student-timeout-s", type=float, default=300.0,
                        help="a student not done after this long has failed")  # fmt: skip
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--browser", action="store_true",
                        help="one more student, in headless Chromium, opens lab 1")  # fmt: skip
    parser.add_argument("--hub-config", type=Path,
                        help="labhive up --hub-config: more hub settings, e.g. "
                        "c.LabHiveSpawner.quick_boot = False (the old server start)")  # fmt: skip
    args = parser.parse_args()
    if args.students < 1 or args.arrival_s < 0 or args.job_s <= 0:
        parser.error("--students must be at least 1, --arrival-s >= 0, --job-s > 0")
    report = run_class(
        args.students,
        args.arrival_s,
        args.job_s,
        args.student_timeout_s,
        browser=args.browser,
        hub_config=args.hub_config,
    )
    print(table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    browser_failed = bool(report.get("browser_student", {}).get("error"))
    return 0 if report["failed"] == 0 and not browser_failed else 1


if __name__ == "__main__":
    sys.exit(main())
