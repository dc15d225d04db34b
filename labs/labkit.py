"""Plumbing the course labs share, kept out of the notebooks so that their cells show the ideas.

The labs talk to LabHive only through its public pieces: ``labhive serve`` (a private service
on the lab's own cluster config), ``labhive.client``, the scenario replayer and the simulator.
Nothing here computes an answer the lab asks for; it starts things, waits, and tabulates.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from labhive.client import Client, Job
from labhive.scheduler.executors.env import free_port


def course_data(data_dir: str | os.PathLike[str] = "", missing_ok: bool = False) -> Path:
    """Where the course's data is, wherever the lab was opened (the repository's ``labs/``, a
    copy in a student's hub home, Binder): the lab's ``data_dir`` parameter when given, else
    ``$LABHIVE_DATA`` (every hub server has it when the instructor set the course's data),
    else a ``shared/data`` folder beside the repository or above it."""
    if str(data_dir):
        return Path(data_dir).expanduser().resolve()
    if os.environ.get("LABHIVE_DATA"):
        return Path(os.environ["LABHIVE_DATA"]).expanduser().resolve()
    for folder in Path(__file__).resolve().parents:
        if (folder / "shared" / "data").is_dir():
            return folder / "shared" / "data"
    if missing_ok:
        return Path("shared-data-not-found")
    raise FileNotFoundError(
        "the course data was not found: set LABHIVE_DATA (or the lab's data_dir parameter) to "
        "the folder that holds strace/, philly/ and openpai-lab6/"
    )


# ---- a private service on the lab's own cluster ---


def _labhive_command() -> list[str]:
    """The ``labhive`` beside this kernel's Python (a venv's bin may not be on PATH)."""
    beside = Path(sys.executable).parent / "labhive"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("labhive")
    if found is None:
        raise RuntimeError("the labhive command is not installed: pip install -e . at the repo")
    return [found]


#: For shell cells: ``!{labkit.LABHIVE} replay demo``.
try:
    LABHIVE = _labhive_command()[0]
except RuntimeError:
    LABHIVE = "labhive"


@dataclass
class LabService:
    """``labhive serve --cluster FILE`` on a loopback port, its data in a temporary folder.

    It is exactly what an admin runs, only private to this notebook: the lab's two-node
    cluster (Carol and Dan) with the local executor, so jobs are real processes.
    """

    cluster: Path
    url: str = ""
    client: Client | None = None
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="labhive-lab-")))
    proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 90) -> LabService:
        port = free_port()
        data = self.root / "data"
        log = (self.root / "serve.log").open("wb")
        argv = [*_labhive_command(), "serve", "--port", str(port), "--data-dir", str(data)]
        argv += ["--cluster", str(self.cluster), "--grace-s", "1"]
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)  # fmt: skip
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        token = data / "admin.token"
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"labhive serve exited: {(self.root / 'serve.log').read_text()}")
            if token.exists() and token.read_text().strip():
                client = Client(self.url, token.read_text().strip())
                with contextlib.suppress(Exception):
                    client.health()
                    self.client = client
                    # a lab that fails never reaches its stop cell: stop when the kernel ends
                    atexit.register(self.stop)
                    return self
                client.close()
            if time.monotonic() > deadline:
                raise RuntimeError(f"labhive serve did not answer within {timeout:.0f} s")
            time.sleep(0.2)

    def stop(self) -> None:
        """Cancel the lab's jobs and stop the service (again: nothing; at exit too)."""
        atexit.unregister(self.stop)
        client, self.client = self.client, None
        if client is not None:
            for job in client.jobs(limit=1000):
                if not job.done:
                    with contextlib.suppress(Exception):
                        job.cancel()
            client.close()
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LabService:
        return self.start()

    def __exit__(self, *_: Any) -> None:
        self.stop()


def lab_job(path: Path, command: str, name: str | None = None) -> dict[str, Any]:
    """The lab's OpenPAI job file, unchanged except its commands (the MNIST epoch needs a GPU
    and a dataset; a short ``sleep`` keeps the same resources, VC, priority and gang setting)
    and its image: the course's Docker Hub image cannot be pulled on a laptop, so the tasks run
    as plain processes (a job naming an image the cluster lacks is refused at submit)."""
    spec = copy.deepcopy(yaml.safe_load(Path(path).read_text()))
    images = [p for p in spec.get("prerequisites") or [] if p.get("type") == "dockerimage"]
    spec["prerequisites"] = [p for p in spec.get("prerequisites") or [] if p not in images]
    for role in spec["taskRoles"].values():
        role["commands"] = [command]
        role.pop("dockerImage", None)
    if name is not None:
        spec["name"] = name
    return spec


# ---- waiting and looking ---


def wait_until(
    what: str, check: Callable[[], bool], timeout: float = 60, poll_s: float = 0.2
) -> None:
    """Poll ``check`` until it holds; a clear error after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for: {what}")
        time.sleep(poll_s)


def wait_state(job: Job, *states: str, timeout: float = 60) -> Job:
    wait_until(f"job {job.name} to be {'/'.join(states)}",
               lambda: job.refresh().state in states, timeout)  # fmt: skip
    return job


def nodes_of(job: Job) -> str:
    """The nodes the job's running tasks occupy, sorted and comma-separated."""
    running = {t["node"] for t in job.data.get("tasks") or [] if t.get("state") == "RUNNING"}
    return ",".join(sorted(running)) or "-"


def running_tasks(job: Job) -> int:
    return sum(1 for t in job.data.get("tasks") or [] if t.get("state") == "RUNNING")


def jobs_frame(jobs: Iterable[Job]) -> pd.DataFrame:
    """Each job's state now: the table a student reads after every step."""
    rows = []
    for job in jobs:
        job.refresh()
        rows.append(
            {
                "job": job.name,
                "vc": job.vc,
                "priority": job.priority,
                "state": job.state,
                "tasks running": f"{running_tasks(job)}/{job.task_count}",
                "nodes": nodes_of(job),
                "position": job.position if job.position is not None else "",
                "why": job.why or job.reason,
            }
        )
    return pd.DataFrame(rows)


def text_table(frame: pd.DataFrame) -> str:
    """A DataFrame as plain text that a papermill report keeps readable."""
    return frame.to_string(index=False) if len(frame) else "(empty)"


@dataclass
class Table:
    """A DataFrame shown as an HTML table in JupyterLab (cells do not wrap mid-word) and as
    ``text_table`` in a text report."""

    frame: pd.DataFrame

    def _repr_html_(self) -> str:
        if not len(self.frame):
            return "<p>(empty)</p>"
        html = self.frame.to_html(index=False, border=0, classes="labhive-lab-table")
        return (
            "<style>.labhive-lab-table td, .labhive-lab-table th {white-space: nowrap; "
            "text-align: left; padding: 2px 12px 2px 0}</style>" + html
        )

    def __repr__(self) -> str:
        return text_table(self.frame)


def show(frame: pd.DataFrame) -> None:
    """Display a table: HTML in JupyterLab, text in a papermill report."""
    from IPython.display import display

    display(Table(frame))


# ---- scenario replays ---


def replay_frame(steps: list[dict[str, Any]], jobs: Iterable[str] | None = None) -> pd.DataFrame:
    """One row per (virtual time, job) from ``replay(...).steps``, the last step per time."""
    wanted = set(jobs) if jobs is not None else None
    last: dict[float, dict[str, Any]] = {}
    for step in steps:
        last[step["t"]] = step
    rows = []
    for t, step in sorted(last.items()):
        for job in step["jobs"]:
            if wanted is not None and job["name"] not in wanted:
                continue
            nodes = ",".join(sorted({task["node"] for task in job["tasks"] if task["node"]})) or "-"
            rows.append(
                {
                    "t": t,
                    "event": step["event"],
                    "job": job["name"],
                    "state": job["state"],
                    "tasks running": len(job["tasks"]),
                    "nodes": nodes,
                    "reason": job["reason"],
                }
            )
    return pd.DataFrame(rows)


def state_at(steps: list[dict[str, Any]], t: float, name: str) -> dict[str, Any]:
    """A job as the replay showed it after everything that happened at or before ``t``."""
    found: dict[str, Any] | None = None
    for step in steps:
        if step["t"] > t:
            break
        for job in step["jobs"]:
            if job["name"] == name:
                found = job
    if found is None:
        raise KeyError(f"{name} was not submitted by t={t:g}")
    return found


def job_nodes(job: Mapping[str, Any]) -> str:
    return ",".join(sorted({t["node"] for t in job["tasks"] if t["node"]})) or "-"


# ---- the observation table and its check ---


@dataclass(frozen=True)
class Question:
    """One row of the lab's observation table."""

    key: str
    experiment: str
    question: str
    expected: str


#: Lab 2's observation table. The expected values live here, not in the notebook, so that a
#: student sees them only in the checking cell's output, after filling in their own answers.
# fmt: off
LAB2_QUESTIONS = [
    Question("e1_second", "1 VC safety", "state of the 2nd vc1 job while the 1st runs", "WAITING"),
    Question("e1_default", "1 VC safety", "node of default's job while vc1's queue is full",
             "hostname-carol"),
    Question("e1_where", "1 VC safety", "nodes the three vc1 jobs ran on", "hostname-dan"),
    Question("e2_victim", "2 priority", "test job, once the prod job is submitted",
             "WAITING (preempted)"),
    Question("e2_prod_node", "2 priority", "node of the prod job", "hostname-dan"),
    Question("e2_after", "2 priority", "test job, after the prod job ends", "RUNNING"),
    Question("e3_oppo_node", "3 opportunistic", "node of the oppo vc1 job while vc1 is full",
             "hostname-carol"),
    Question("e3_oppo_after", "3 opportunistic", "oppo job, once default submits a test job",
             "WAITING (preempted)"),
    Question("e4_gang", "4 gang", "gang tasks running while one node is busy", "0"),
    Question("e4_gang_later", "4 gang", "nodes of the gang once both are free",
             "hostname-carol,hostname-dan"),
    Question("e5_incr", "5 incremental", "tasks running while one node is busy", "1"),
    Question("e5_incr_later", "5 incremental", "tasks running once the other job ends", "2"),
]
# fmt: on


def observation_table(
    questions: list[Question],
    live: Mapping[str, str],
    replayed: Mapping[str, str],
    answers: Mapping[str, str],
    reveal: bool = False,
) -> pd.DataFrame:
    """The table students fill; the ``expected`` column only when ``reveal`` (the check)."""
    rows = []
    for q in questions:
        row = {
            "key": q.key,
            "experiment": q.experiment,
            "question": q.question,
            "live run": live.get(q.key, "(not run)"),
            "replay": replayed.get(q.key, "(not run)"),
            "your answer": answers.get(q.key) or "",
        }
        if reveal:
            row["expected"] = q.expected
        rows.append(row)
    return pd.DataFrame(rows)


def _same(got: str, want: str) -> bool:
    return " ".join(str(got).split()).lower() == " ".join(str(want).split()).lower()


def check_observations(
    questions: list[Question],
    live: Mapping[str, str],
    replayed: Mapping[str, str],
    answers: Mapping[str, str],
) -> list[str]:
    """What differs from the expected behaviour, one sentence each (empty: all as expected).

    The live run and the replay must match; an answer the student left empty is only reported
    as missing, a filled one must match too.
    """
    problems = []
    for q in questions:
        for source, values in (("the live run", live), ("the replay", replayed)):
            got = values.get(q.key)
            if got is None:
                problems.append(f"{q.experiment}: {q.question} - {source} did not record it")
            elif not _same(got, q.expected):
                problems.append(
                    f"{q.experiment}: {q.question} - {source} saw {got!r}, expected {q.expected!r}"
                )
        answer = answers.get(q.key)
        if answer and not _same(answer, q.expected):
            problems.append(
                f"{q.experiment}: {q.question} - you wrote {answer!r}; the cluster did "
                f"{q.expected!r}. Look at the table above for why."
            )
    return problems


def missing_answers(questions: list[Question], answers: Mapping[str, str]) -> list[str]:
    return [q.key for q in questions if not answers.get(q.key)]


def ran_on(job: Job) -> str:
    """The nodes the job's tasks were placed on (also after it ended)."""
    return ",".join(sorted({t["node"] for t in job.refresh().data.get("tasks") or []})) or "-"


# ---- alert rules, the simple kind ---

_THRESHOLD = re.compile(
    r"^\s*(?P<metric>[A-Za-z_:][A-Za-z0-9_:]*)\s*(?:\{(?P<labels>[^}]*)\})?\s*"
    r"(?P<op>==|!=|>=|<=|>|<)\s*(?P<value>[-+0-9.eE]+)\s*$"
)
_OPS: dict[str, Callable[[float, float], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
}


@dataclass(frozen=True)
class Rule:
    """An alert rule whose expression is ``metric{label="v",...} OP number``: the only kind a
    notebook can evaluate without Prometheus (range functions and ``up`` need the real thing)."""

    alert: str
    expr: str
    for_s: float
    severity: str
    summary: str
    metric: str | None = None
    labels: tuple[tuple[str, str, str], ...] = ()
    op: str = ""
    value: float = 0.0

    @property
    def simple(self) -> bool:
        return self.metric is not None

    def matches(self, labels: Mapping[str, str]) -> bool:
        for name, how, want in self.labels:
            got = labels.get(name, "")
            if (how == "=" and got != want) or (how == "!=" and got == want):
                return False
        return True

    def holds(self, metric: str, labels: Mapping[str, str], value: float) -> bool:
        return metric == self.metric and self.matches(labels) and _OPS[self.op](value, self.value)


def _duration(text: str | None) -> float:
    if not text:
        return 0.0
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return float(text[:-1]) * units[text[-1]]


def load_rules(path: Path) -> list[Rule]:
    """Every rule of a Prometheus rules file; ``simple`` says whether this module evaluates it."""
    doc = yaml.safe_load(Path(path).read_text())
    rules = []
    for group in doc.get("groups", []):
        for raw in group.get("rules", []):
            if "alert" not in raw:
                continue
            base = {
                "alert": raw["alert"],
                "expr": " ".join(str(raw["expr"]).split()),
                "for_s": _duration(raw.get("for")),
                "severity": (raw.get("labels") or {}).get("severity", ""),
                "summary": (raw.get("annotations") or {}).get("summary", ""),
            }
            m = _THRESHOLD.match(base["expr"])
            if m is None or m["metric"] == "up":  # `up` is Prometheus' own, not on /metrics
                rules.append(Rule(**base))
                continue
            matchers = tuple(
                (k.strip(), "!=" if "!=" in item else "=", v.strip().strip('"'))
                for item in (m["labels"] or "").split(",")
                if item.strip()
                for k, v in [item.replace("!=", "=").split("=", 1)]
            )
            rules.append(Rule(**base, metric=m["metric"], labels=matchers, op=m["op"],
                              value=float(m["value"])))  # fmt: skip
    return rules


def firing_now(
    rules: list[Rule], samples: Iterable[tuple[str, Mapping[str, str], float]]
) -> list[str]:
    """Simple rules whose condition holds on these samples now (``for:`` not waited out)."""
    samples = list(samples)
    out = []
    for rule in rules:
        if not rule.simple:
            continue
        for metric, labels, value in samples:
            if rule.holds(metric, labels, value):
                where = ", ".join(f"{k}={v}" for k, v in labels.items() if v)
                out.append(f"{rule.alert} ({rule.severity}): {metric}{{{where}}} = {value:g}")
    return out


def firing_over_time(
    rules: list[Rule], series: Mapping[float, list[tuple[str, Mapping[str, str], float]]]
) -> list[dict[str, Any]]:
    """Evaluate simple rules at each sample time, as Prometheus does at every evaluation: an
    alert is *pending* while its condition holds and *fires* once it has held for ``for:``."""
    since: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    fired: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, Any]] = {}
    for t in sorted(series):
        true_now = set()
        for rule in rules:
            if not rule.simple:
                continue
            for metric, labels, value in series[t]:
                if rule.holds(metric, labels, value):
                    key = (rule.alert, tuple(sorted(labels.items())))
                    true_now.add(key)
                    since.setdefault(key, t)
                    if t - since[key] >= rule.for_s and key not in fired:
                        fired[key] = {"alert": rule.alert, "severity": rule.severity,
                                      "labels": dict(labels), "pending_from": since[key],
                                      "fires_at": t}  # fmt: skip
        for key in list(since):
            if key not in true_now:
                since.pop(key)
                if key in fired and "resolved_at" not in fired[key]:
                    fired[key]["resolved_at"] = t
    return list(fired.values())


# ---- Lab 3, part 4: isolation ------------------------------------------------------------


def lab_image(name: str = "labhive/lab-busybox") -> tuple[str | None, str]:
    """An image for the isolation part (busybox, made offline), or None and why there is none:
    without podman the part prints a note and skips its cells."""
    from labhive.scheduler.core.errors import UserError
    from labhive.scheduler.executors import images

    try:
        if name in {i.name for i in images.list_images()}:
            return name, ""
        return images.busybox_image(name), ""
    except (UserError, OSError, subprocess.SubprocessError) as err:
        return None, str(err)


def run_and_log(client: Client, command: str, **short: Any) -> tuple[Job, str, str]:
    """Submit a short-form job, wait for its end: (job, stdout, stderr) of its first task."""
    job = client.submit(command=command, **short).wait(180, 0.2)
    out = client.logs(job.id).data
    err = client.logs(job.id, stream="stderr").data
    return job, out, err


def namespaces(listing: str) -> dict[str, str]:
    """``name ns:[inode]`` lines (from readlink /proc/self/ns/*) as a mapping."""
    return dict(line.split(maxsplit=1) for line in listing.splitlines() if " " in line)
