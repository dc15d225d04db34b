"""One poll of a job, and its HTML pieces, without ipywidgets.

A job's text/HTML snapshot (what papermill keeps, and what a cell run without a front end
shows) needs only these; ``widgets`` builds the live ipywidgets on top of them. Kept apart so
that ``%load_ext labhive.kernel_ext`` and a ``%submit`` that no front end watches never import
ipywidgets: every student's kernel in a class pays each import (docs/hub.md, "A class of 50").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any, Protocol

from labhive.kernel_ext.facts import JobFacts
from labhive.kernel_ext.logtail import LogTail
from labhive.scheduler.client import JobInfo, JobState

LOG_LINES = 15
STDERR_LINES = 10  # of a FAILED job: where a MemoryError or a traceback says why


class JobSource(Protocol):
    """What a job widget needs from a job handle; ``labhive.client.Job`` is one."""

    @property
    def info(self) -> JobInfo: ...

    def refresh(self) -> Any: ...

    def logs(self, offset: int = 0, **kw: Any) -> Any: ...

    def gpu_usage(self) -> list[dict[str, Any]]: ...

    def cancel(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class JobSnapshot:
    facts: JobFacts
    log: str
    gpus: tuple[Mapping[str, Any], ...]
    stderr: str = ""  # the last lines a FAILED job's tasks wrote to stderr
    gpu_note: str = ""  # why a running job shows no GPU readings


def fetch_snapshot(source: JobSource, tail: LogTail) -> JobSnapshot:
    """One poll: the job, what its tasks printed since the last poll, its GPUs' readings
    (or why there are none), and for a failed job the end of its stderr."""
    source.refresh()
    facts = JobFacts.from_job(source.info)
    if facts.state != JobState.WAITING:
        tail.read_new()
    gpus, note = gpu_readings(source, facts) if facts.state == JobState.RUNNING else ((), "")
    stderr = ""
    if facts.state == JobState.FAILED:
        errors = LogTail(source, STDERR_LINES, stream="stderr")
        errors.read_new()
        stderr = errors.text()
    return JobSnapshot(facts, tail.text(), gpus, stderr, note)


def gpu_readings(source: JobSource, facts: JobFacts) -> tuple[tuple[Mapping[str, Any], ...], str]:
    """The GPUs' latest readings, or a sentence saying why the metrics area stays empty."""
    if facts.gpus == 0:
        return (), "this job holds no GPU"
    history = getattr(source, "gpu_history", None)
    if history is None:
        return tuple(source.gpu_usage()), ""
    try:
        doc = history()
    except Exception:
        return (), ""
    if not doc.get("sampling"):
        return (), (
            "no GPU readings: the service samples no GPUs here (a virtual cluster's GPUs are "
            "slots handed to processes, with nothing to measure)"
        )
    current = tuple(doc.get("current") or ())
    return current, "" if current else f"no GPU readings yet (every {doc.get('interval_s')} s)"


def gpu_html(gpus: Sequence[Mapping[str, Any]]) -> str:
    """Utilization and memory bars per GPU the job holds (real devices only)."""
    rows = []
    for gpu in gpus:
        util = float(gpu.get("gpu_util") or 0)
        used = float(gpu.get("fb_used_mib") or 0)
        total = float(gpu.get("fb_total_mib") or 0) or 1.0
        label = f"{gpu.get('node') or ''} GPU {gpu.get('gpu', '?')}".strip()
        rows.append(
            f'<div class="labhive-gpu">{escape(label)}: {util:.0f}% util, '
            f"{used:.0f}/{total:.0f} MiB"
            f'<div style="background:#e5e7eb;width:200px;height:6px">'
            f'<div style="background:#2563eb;width:{2 * min(util, 100):.0f}px;height:6px">'
            "</div></div></div>"
        )
    return "".join(rows)


def log_html(log: str) -> str:
    if not log:
        return ""
    return (
        '<pre class="labhive-log" style="max-height:18em;overflow:auto;margin:2px 0">'
        f"{escape(log)}</pre>"
    )


def stderr_html(stderr: str) -> str:
    """A failed job's last stderr lines, red, under the log."""
    if not stderr:
        return ""
    return (
        f'<div class="labhive-stderr"><b>last lines of stderr</b>'
        '<pre style="color:#b91c1c;max-height:12em;overflow:auto;margin:2px 0">'
        f"{escape(stderr)}</pre></div>"
    )
