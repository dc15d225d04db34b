"""The one client library for the LabHive service (imported as ``labhive.client``).

The CLI, the kernel extension and the JupyterHub integration all talk to the service through
this module and nothing else. Errors are exceptions carrying the service's own message::

    import labhive.client as lh
    c = lh.connect()                       # LABHIVE_URL / LABHIVE_TOKEN / token file / hub env
    job = c.submit(command="python train.py", gpus=2, vc="vc1", name="train")
    job.wait(timeout=600)
    print(job.state, job.logs().data)

Where the service is found (first that applies): the ``url`` argument, ``LABHIVE_URL``,
inside a JupyterHub single-user server the hub's ``/services/labhive/`` prefix, else
``http://127.0.0.1:8765``. The token: the ``token`` argument, ``LABHIVE_TOKEN``, the file named by
``LABHIVE_TOKEN_FILE``, ``JUPYTERHUB_API_TOKEN`` inside a hub, ``~/.config/labhive/token``, or
``./data/admin.token`` (where ``labhive serve`` puts the admin's).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shlex
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

# Exported with the client: the states and the typed job its users read.
from labhive.scheduler.client.eta_words import eta_text as eta_text
from labhive.scheduler.client.eta_words import no_estimate_text as no_estimate_text
from labhive.scheduler.client.job_info import JobInfo as JobInfo
from labhive.scheduler.client.job_info import TaskInfo as TaskInfo
from labhive.scheduler.client.lean_httpx import httpx, verify_for
from labhive.scheduler.core.states import TERMINAL as TERMINAL
from labhive.scheduler.core.states import JobState as JobState

DEFAULT_URL = "http://127.0.0.1:8765"
API = "/api/v1"


class LabHiveError(Exception):
    """A request the service refused, or a service that could not be reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class ServiceUnavailable(LabHiveError):
    pass


class AuthenticationError(LabHiveError):
    pass


class PermissionDenied(LabHiveError):
    pass


class NotFoundError(LabHiveError):
    pass


class Rejected(LabHiveError):
    """The service refused the request as invalid (a bad spec, a job that cannot fit...)."""


_BY_STATUS: dict[int, type[LabHiveError]] = {
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFoundError,
}


def service_url(url: str | None = None) -> str:
    """The service's base URL ending in /api/v1."""
    url = url or os.environ.get("LABHIVE_URL")
    if not url and os.environ.get("JUPYTERHUB_SERVICE_PREFIX"):
        hub = os.environ.get("JUPYTERHUB_BASE_URL", "/")
        host = os.environ.get("LABHIVE_HUB_HOST", "http://127.0.0.1:8000")
        url = f"{host.rstrip('/')}{hub.rstrip('/')}/services/labhive"
    url = (url or DEFAULT_URL).rstrip("/")
    return url if url.endswith(API) else url + API


_POSITION_TAIL = re.compile(r";?\s*position \d+ of \d+ in \S+\s*$")


def why_without_position(why: str) -> str:
    """The scheduler's why-text without its "; position 2 of 3 in vc1" tail, for displays
    that show the position already (it would read twice)."""
    return _POSITION_TAIL.sub("", why or "").strip()


def find_token(token: str | None = None) -> str | None:
    if token:
        return token
    if os.environ.get("LABHIVE_TOKEN"):
        return os.environ["LABHIVE_TOKEN"]
    named = os.environ.get("LABHIVE_TOKEN_FILE")
    if named:
        try:
            return Path(named).read_text().strip() or None
        except OSError as err:
            raise LabHiveError(f"cannot read LABHIVE_TOKEN_FILE {named}: {err.strerror}") from None
    if os.environ.get("JUPYTERHUB_API_TOKEN"):
        return os.environ["JUPYTERHUB_API_TOKEN"]
    for path in (Path.home() / ".config" / "labhive" / "token", Path("data") / "admin.token"):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text:
            return text
    return None


@dataclass
class LogChunk:
    data: str
    offset: int
    next_offset: int
    complete: bool
    task: str | None
    tasks: list[str]


class Display(Protocol):
    """Who shows job handles and tables in a notebook (the kernel extension registers one)."""

    def show(self, job: Job) -> Any: ...
    def show_table(self, table: JobTable) -> Any: ...
    def widget(self, job: Job) -> Any: ...
    def strace(self, job: Job, task: str | None, top: int) -> list[Any]: ...


_display: Display | None = None


def register_display(display: Display | None) -> Display | None:
    """Hand the display of handles to ``display`` (``None``: to nobody); returns the one it
    replaces. The client draws nothing itself, so it imports no Jupyter and no kernel
    extension: ``labhive.kernel_ext`` registers itself when imported (``%load_ext``)."""
    global _display
    replaced, _display = _display, display
    return replaced


def _displayer() -> Display:
    if _display is None:
        raise LabHiveError(
            "showing a job needs the notebook extension: run %load_ext labhive.kernel_ext first"
        )
    return _display


@dataclass
class Job:
    """A job as last fetched; ``refresh``/``wait`` update it in place."""

    client: Client = field(repr=False)
    data: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["data"][name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def info(self) -> JobInfo:
        """The job as last fetched, typed (fields as the API names them)."""
        return JobInfo.from_json(self.data)

    @property
    def state(self) -> JobState | str:
        return self.info.state

    @property
    def position(self) -> int | None:
        return self.info.queue_position

    @property
    def done(self) -> bool:
        return self.info.done

    def refresh(self) -> Job:
        self.data = self.client._get(f"/jobs/{self.data['id']}")
        return self

    def wait(self, timeout: float | None = None, poll_s: float = 0.5) -> Job:
        """Block until the job ends (TimeoutError after ``timeout`` seconds)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.refresh().done:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {self.data['id']} still {self.data['state']}")
            time.sleep(poll_s)
        return self

    def cancel(self) -> Job:
        self.data = self.client.cancel(self.data["id"]).data
        return self

    def events(self) -> list[dict[str, Any]]:
        return self.client.events(self.data["id"])

    def gpu_history(self) -> dict[str, Any]:
        """GPU readings of the job (monitoring). Not ``gpus``: that is the job's GPU count."""
        return self.client.job_gpus(self.data["id"])

    def logs(self, offset: int = 0, **kw: Any) -> LogChunk:
        return self.client.logs(self.data["id"], offset, **kw)

    def follow(self, **kw: Any) -> Iterator[str]:
        return self.client.follow_logs(self.data["id"], **kw)

    # ---- notebook-facing additions (drawn by the registered ``Display``) --------------------

    def gpu_usage(self) -> list[dict[str, Any]]:
        """Latest readings (utilization, memory) of the GPUs the job holds; empty on a
        virtual cluster, where slots have no readings, or a service without GPU sampling."""
        try:
            doc = self.gpu_history()
        except NotFoundError:
            return []
        return list(doc.get("current") or []) if doc.get("sampling") else []

    def strace(self, task: str | None = None, top: int = 15) -> list[Any]:
        """Show the job's strace logs (submitted with ``observe="strace"``): counts, ioctls,
        timeline and transition graph per task; returns the views."""
        return _displayer().strace(self, task, top)

    def widget(self) -> Any:
        """A live ipywidget that follows this job (needs ``ipywidgets``)."""
        return _displayer().widget(self)

    def _ipython_display_(self) -> None:
        if _display is None:  # no extension loaded: the plain text a console shows
            print(repr(self))
            return
        _display.show(self)


class Client:
    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 30):
        self.url = service_url(url)
        self.token = (find_token(token) or "").strip() or None
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, verify=verify_for(self.url)
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    # ---- transport ----------------------------------------------------------------------

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kw)
        except httpx.TransportError as err:
            raise ServiceUnavailable(
                f"cannot reach the LabHive service at {self.url} ({err}); is it running? "
                "Start it with `labhive serve` or set LABHIVE_URL"
            ) from None
        if response.status_code >= 400:
            raise _error(response)
        return response

    def _get(self, path: str, **params: Any) -> Any:
        clean = {k: v for k, v in params.items() if v is not None}
        return self._request("GET", path, params=clean).json()

    def me(self) -> dict[str, Any]:
        """Who this client's token is: name, admin, VCs, and the OS uid/gid their tasks run as."""
        return self._get("/me")  # type: ignore[no-any-return]

    def standing(self, user: str | None = None) -> dict[str, Any]:
        """Your fair-share standing per VC you may submit to (``GET /me/standing``):
        ``{"fair_share": bool, "user", "vcs": {vc: {"usage_gpu_hours", "share_of_vc", "rank",
        "users", "position", "ahead", "ahead_less_used", "text", ...}}, "note"}``. ``user``:
        someone else's (admins)."""
        return dict(self._get("/me/standing", user=user))

    # ---- jobs ---------------------------------------------------------------------------

    def submit(self, spec: Mapping[str, Any] | str | Path | None = None, **short: Any) -> Job:
        """Submit an OpenPAI v2 job or short-form dict, a YAML/JSON file, or short-form keywords
        (``command``, ``gpus``, ``tasks``, ``vc``, ``priority``, ``cpu``, ``memory_mb``,
        ``cpu_limit``, ``memory_limit_mb``, ``retries``, ``name``, ``cwd``...). A short-form job
        without a name is named after its command; ``cwd`` (where its tasks run) goes where the
        job's form keeps it, unless the job names its own."""
        if isinstance(spec, str | Path):
            spec = load_spec_file(spec)
        doc = dict(spec or {})
        cwd = short.pop("cwd", None)
        doc.update({k: v for k, v in short.items() if v is not None})
        if cwd is not None:
            doc = with_cwd(doc, cwd)
        if "taskRoles" not in doc and "name" not in doc:
            doc["name"] = default_name(doc.get("command"))
        body = json_body(doc)
        headers = {"content-type": "application/json"}
        return Job(self, self._request("POST", "/jobs", content=body, headers=headers).json())

    def jobs(self, state: str | None = None, vc: str | None = None, limit: int = 100) -> list[Job]:
        data = self._get("/jobs", state=state, vc=vc, limit=limit)
        return [Job(self, j) for j in data["jobs"]]

    def job(self, job_id: int | str) -> Job:
        return Job(self, self._get(f"/jobs/{_id(job_id)}"))

    def cancel(self, job_id: int | str, wait: float | None = None) -> Job:
        params = {} if wait is None else {"wait": wait}
        return Job(self, self._request("POST", f"/jobs/{_id(job_id)}/cancel", params=params).json())

    def events(self, job_id: int | str) -> list[dict[str, Any]]:
        return list(self._get(f"/jobs/{_id(job_id)}/events")["events"])

    def stop_notice(
        self, job_id: int | str, reason: str, in_s: float, *, culled: bool = False,
        gpu_idle_s: float = 0.0,
    ) -> Job:  # fmt: skip
        """(Admins.) Announce a stop ``in_s`` from now; ``in_s`` 0 stops the job now."""
        body = {"reason": reason, "in_s": in_s, "culled": culled, "gpu_idle_s": gpu_idle_s}
        return Job(
            self, self._request("POST", f"/jobs/{_id(job_id)}/stop-notice", json=body).json()
        )

    def withdraw_stop_notice(self, job_id: int | str) -> Job:
        """(Admins.) Take back an announced stop."""
        path = f"/jobs/{_id(job_id)}/stop-notice/withdraw"
        return Job(self, self._request("POST", path).json())

    def logs(
        self,
        job_id: int | str,
        offset: int = 0,
        *,
        task: str | None = None,
        stream: str = "stdout",
        limit: int = 65536,
        attempt: int | None = None,
    ) -> LogChunk:
        data = self._get(
            f"/jobs/{_id(job_id)}/logs",
            offset=offset,
            task=task,
            stream=stream,
            limit=limit,
            attempt=attempt,
        )
        return LogChunk(
            data["data"], data["offset"], data["next_offset"], data["complete"], data["task"],
            data["tasks"],
        )  # fmt: skip

    def follow_logs(
        self,
        job_id: int | str,
        *,
        task: str | None = None,
        stream: str = "stdout",
        poll_s: float = 0.5,
    ) -> Iterator[str]:
        """Yield the log as it grows, until the task has ended and everything was read."""
        offset = 0
        while True:
            chunk = self.logs(job_id, offset, task=task, stream=stream)
            if chunk.data:
                yield chunk.data
            offset = chunk.next_offset
            if chunk.complete:
                return
            if not chunk.data:
                time.sleep(poll_s)

    def log_tail(
        self,
        job_id: int | str,
        lines: int = 20,
        *,
        task: str | None = None,
        stream: str = "stderr",
        attempt: int | None = None,
    ) -> str:
        """The last ``lines`` lines of a task's stream (default: the first task's stderr of
        the latest attempt), read from the end: the service serves byte ranges, so the end is
        found by probing offsets (a few requests for a large log), and only the last
        ``TAIL_BYTES`` are fetched."""
        kw: dict[str, Any] = {"task": task, "stream": stream, "attempt": attempt}
        first = self.logs(job_id, 0, limit=TAIL_BYTES, **kw)
        if first.next_offset < TAIL_BYTES:  # the whole log
            return _last_lines(first.data, lines)
        low, high = first.next_offset - 1, first.next_offset * 2  # a byte at low exists
        while self.logs(job_id, high, limit=1, **kw).data:
            low, high = high, high * 2
        while high - low > 1:  # the size lies in (low, high]: the first offset with no data
            mid = (low + high) // 2
            low, high = (mid, high) if self.logs(job_id, mid, limit=1, **kw).data else (low, mid)
        start = max(0, high - TAIL_BYTES)
        chunk = self.logs(job_id, start, limit=TAIL_BYTES, **kw)
        return _last_lines(chunk.data, lines)  # its first line may be the end of a long one

    def observations(self, job_id: int | str) -> list[dict[str, Any]]:
        return list(self._get(f"/jobs/{_id(job_id)}/observations")["observations"])

    def job_gpus(self, job_id: int | str) -> dict[str, Any]:
        """The job's GPU history (downsampled) and its GPUs' latest readings (monitoring)."""
        return dict(self._get(f"/jobs/{_id(job_id)}/gpus"))

    # ---- the cluster --------------------------------------------------------------------

    def queue(
        self, vc: str | None = None, limit: int | None = None, offset: int | None = None
    ) -> dict[str, Any]:
        """One page of the queue: your active jobs as rows (``running``, ``waiting``; an
        admin's: everyone's), others' as counts per VC (``others``), ``total`` rows in all and
        the ``next_offset`` to ask for (None: no more). ``limit``: rows a page (service
        default 100, at most 1000)."""
        return dict(self._get("/queue", vc=vc, limit=limit, offset=offset))

    def cluster(self) -> dict[str, Any]:
        return dict(self._get("/cluster"))

    def node_down(self, node: str, reason: str = "", notice_s: float = 0.0) -> dict[str, Any]:
        """Take a node out of service (admins): its jobs are requeued, nothing starts there,
        and it stays down across service restarts until ``node_up``. ``notice_s``: its jobs are
        told first, and it goes down that much later."""
        path = f"/nodes/{quote(node, safe='')}/down"
        body = {"reason": reason, "notice_s": notice_s}
        return dict(self._request("POST", path, json=body).json())

    def node_up(self, node: str) -> dict[str, Any]:
        """Put a node an admin took down back into service (admins)."""
        return dict(self._request("POST", f"/nodes/{quote(node, safe='')}/up").json())

    def vcs(self) -> dict[str, Any]:
        return dict(self._get("/vcs")["vcs"])

    def gpus(self) -> list[dict[str, Any]]:
        return list(self._get("/gpus")["gpus"])

    def health(self) -> dict[str, Any]:
        return dict(self._get("/health"))


def connect(url: str | None = None, token: str | None = None) -> Client:
    """A client for the service (see the module docstring for how it is found)."""
    return Client(url, token)


#: How much of a log's end ``log_tail`` reads (its lines are cut from that).
TAIL_BYTES = 16384


def _last_lines(text: str, lines: int) -> str:
    return "\n".join(text.rstrip("\n").split("\n")[-lines:]) if text.strip() else ""


def with_cwd(doc: dict[str, Any], cwd: str) -> dict[str, Any]:
    """``doc`` set to run in ``cwd``, unless it names its own: the short form's ``cwd``, an
    OpenPAI job's ``extras.labhive.cwd`` (OpenPAI's own keys stay as they are)."""
    if "taskRoles" not in doc and "protocolVersion" not in doc:
        return doc if doc.get("cwd") else {**doc, "cwd": cwd}
    extras = doc.get("extras")
    labhive = extras.get("labhive") if isinstance(extras, dict) else None
    if not isinstance(extras, dict | type(None)) or not isinstance(labhive, dict | type(None)):
        return doc  # malformed: the service says what is wrong with it
    if labhive and labhive.get("cwd"):
        return doc
    return {**doc, "extras": {**(extras or {}), "labhive": {**(labhive or {}), "cwd": cwd}}}


def load_spec_file(path: str | Path) -> dict[str, Any]:
    """A job file as a mapping, read with the same limits (size, depth, aliases) and line
    numbers as ``labhive validate``."""
    from labhive.scheduler.core.errors import UserError
    from labhive.scheduler.core.yamlines import load_yaml, read_text

    try:
        doc = load_yaml(read_text(Path(path), "job file"), origin=f"job file {path}")
    except UserError as err:  # unreadable, not YAML, or over the limits
        raise LabHiveError(str(err)) from None
    if not isinstance(doc, dict):
        raise LabHiveError(f"job file {path} must hold one mapping (a job)")
    return doc


def json_body(doc: Any) -> bytes:
    """``doc`` as the JSON the service reads; a value JSON cannot carry (YAML's ``.inf`` and
    ``.nan``, a date) is refused here, naming where it is, instead of failing in the encoder."""
    bad = _not_json(doc, "")
    if bad is not None:
        where, value = bad
        raise LabHiveError(
            f"{where or 'the job'}: {value!r} cannot be sent to the service; "
            "give a finite number, text, true/false, a list or a mapping"
        )
    return json.dumps(doc, allow_nan=False).encode()


def _not_json(value: Any, where: str) -> tuple[str, Any] | None:
    """The first value under ``value`` (and the dotted path to it) that JSON cannot carry."""
    if value is None or isinstance(value, str | bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else (where, value)
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, list | tuple | Mapping) or _not_json(key, where):
                return (where, key)
            found = _not_json(item, f"{where}.{key}" if where else str(key))
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = _not_json(item, f"{where}[{i}]")
            if found:
                return found
        return None
    return (where, value)


def default_name(command: Any) -> str:
    text = command[0] if isinstance(command, list) and command else command
    words = str(text or "job").split()
    return Path(words[0]).name[:64] if words else "job"


def _id(job_id: int | str) -> str:
    text = str(job_id).strip()
    if not text.isdigit():
        raise LabHiveError(f"job ids are numbers, got {job_id!r}")
    return text


def _error(response: httpx.Response) -> LabHiveError:
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = None
    message = str(detail) if detail else f"HTTP {response.status_code}: {response.text[:200]}"
    cls = _BY_STATUS.get(response.status_code)
    if cls is None:
        cls = Rejected if response.status_code < 500 else LabHiveError
    return cls(message, response.status_code)


# ---- sweeps (owned by the kernel extension; usable from any Python) ---------------------------


def sweep_points(axes: Mapping[str, Sequence[Any]]) -> list[dict[str, str]]:
    """Every combination of the axes' values, the first axis varying slowest."""
    keys = list(axes)
    values = [[str(v) for v in axes[k]] for k in keys]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*values)]


def sweep_name(base: str, point: Mapping[str, str]) -> str:
    """A readable, name-safe job name per point: ``train-lr0.1-bs32``."""
    parts = [base, *(f"{k}{v}" for k, v in point.items())]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(parts))


def fill_command(template: str, point: Mapping[str, str]) -> str:
    """Replace ``{key}`` placeholders of the point's keys, shell-quoting each value; other
    braces (``${HOME}``, ``{a,b}``) are left alone."""
    for key, value in point.items():
        template = template.replace("{" + key + "}", shlex.quote(value))
    return template


@dataclass
class JobTable:
    """The jobs of a sweep, one per point; displays itself as a table in a notebook."""

    jobs: list[Job]
    points: list[dict[str, str]]

    def refresh(self) -> JobTable:
        for job in self.jobs:
            job.refresh()
        return self

    def wait(self, timeout: float | None = None, poll_s: float = 0.5) -> JobTable:
        deadline = None if timeout is None else time.monotonic() + timeout
        for job in self.jobs:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            job.wait(left, poll_s)
        return self

    def rows(self) -> list[dict[str, Any]]:
        return [
            {**point, "id": job.data["id"], "name": job.data["name"], "state": job.data["state"]}
            for job, point in zip(self.jobs, self.points, strict=True)
        ]

    def frame(self) -> Any:
        """The rows as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.rows())

    def __str__(self) -> str:
        return "\n".join(" ".join(f"{k}={v}" for k, v in row.items()) for row in self.rows())

    def _ipython_display_(self) -> None:
        if _display is None:  # no extension loaded: the rows as text
            print(self)
            return
        _display.show_table(self)


def sweep(
    command: str | Callable[[dict[str, str]], str],
    axes: Mapping[str, Sequence[Any]],
    *,
    client: Client | None = None,
    name: str = "sweep",
    **short: Any,
) -> JobTable:
    """Submit one job per point of the product of ``axes`` (short-form keywords apply to all).

    ``command`` is a template whose ``{key}`` placeholders take each point's values, or a
    function from the point to the command. If one submission is refused, the jobs already
    submitted are cancelled and the error names the point.
    """
    client = client or connect()
    build = command if callable(command) else (lambda p: fill_command(command, p))
    points = sweep_points(axes)
    jobs: list[Job] = []
    for point in points:
        try:
            jobs.append(client.submit(name=sweep_name(name, point), command=build(point), **short))
        except LabHiveError as err:
            for job in jobs:
                job.cancel()
            where = ", ".join(f"{k}={v}" for k, v in point.items())
            raise type(err)(f"sweep point {where}: {err.message}", err.status) from None
    return JobTable(jobs, points)
