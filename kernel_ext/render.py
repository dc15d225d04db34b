"""Snapshots of jobs, queues and the cluster as text and HTML.

These are what a report keeps: papermill and nbconvert store ``text/plain`` and ``text/html``,
never a widget's live state, so every view renders itself through these functions and the
widgets reuse the same HTML.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from labhive.kernel_ext.facts import OTHERS, JobFacts, QueueFacts, TaskFacts
from labhive.scheduler.client import JobState, eta_text, no_estimate_text

STATE_COLOURS: dict[str, str] = {
    JobState.WAITING: "#d97706",
    JobState.RUNNING: "#2563eb",
    JobState.SUCCEEDED: "#16a34a",
    JobState.FAILED: "#dc2626",
    JobState.STOPPED: "#6b7280",
}


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 120:
        return f"{value:.1f} s"
    minutes, secs = divmod(int(value), 60)
    if minutes < 120:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def gpu_list(gpus: Sequence[int]) -> str:
    if not gpus:
        return "no GPU"
    word = "GPU" if len(gpus) == 1 else "GPUs"
    return f"{word} {','.join(str(g) for g in gpus)}"


def placement(tasks: Sequence[TaskFacts]) -> str:
    """``node-1 GPUs 0,1; node-2 GPUs 0,1``: where the tasks sit, one entry per node."""
    by_node: dict[str, list[int]] = {}
    for task in tasks:
        if task.node:
            by_node.setdefault(task.node, []).extend(task.gpus)
    return "; ".join(f"{node} {gpu_list(sorted(gpus))}" for node, gpus in by_node.items())


def position(job: JobFacts) -> str:
    if job.position is None:
        return ""
    total = f" of {job.queue_length}" if job.queue_length else ""
    where = f" in {job.vc}" if job.vc else ""
    return f"position {job.position}{total}{where}"


def starts(job: JobFacts, now: float) -> str:
    """ "starts in ~25 min (10-50)" for a waiting job the service has an estimate for; "waits
    for a notebook server in VC default to stop; no estimate" for one whose start has no
    grounds; empty otherwise."""
    if job.state != "WAITING":
        return ""
    if job.eta is not None:
        return eta_text(*job.eta, now)
    return no_estimate_text(job.waits_for) if job.waits_for else ""


def summary_line(job: JobFacts, now: float) -> str:
    """One line that says where the job stands: the text a papermill report ends with."""
    head = f"job {job.name}: {job.state}"
    took = job.elapsed(now)
    where = f" on {placement(job.tasks)}" if placement(job.tasks) else ""
    if job.state == JobState.WAITING:
        pos = position(job)
        text = f"{head} ({pos})" if pos else head
        text += f" for {seconds(took)}" if took is not None else ""
        text += f", {when}" if (when := starts(job, now)) else ""
        return f"{text} - {job.why}" if job.why else text
    if job.state == JobState.RUNNING:
        text = head + (f" for {seconds(took)}" if took is not None else "") + where
        return text + stopping(job, now)
    text = head + (f" after {seconds(took)}" if took is not None else "") + where
    if job.state == JobState.FAILED and (job.why or job.reason):
        text += f" - {job.why or job.reason}"
    return text


def stopping(job: JobFacts, now: float) -> str:
    """ " - stops in 58 s: culled: ..." for a running job with a stop notice."""
    if job.stopping is None:
        return ""
    reason, deadline = job.stopping
    return f" - stops in {seconds(max(0.0, deadline - now))}: {reason}"


def state_badge(state: str) -> str:
    colour = STATE_COLOURS.get(state, "#374151")
    return (
        f'<span class="labhive-state" style="background:{colour};color:white;'
        f'padding:1px 6px;border-radius:4px;font-weight:600">{escape(state)}</span>'
    )


def tasks_html(tasks: Sequence[TaskFacts]) -> str:
    if not tasks:
        return ""
    rows = "".join(
        f"<tr>{_td(f'{t.role}/{t.index}')}{_td(t.node or '-')}{_td(gpu_list(t.gpus))}"
        f"{_td(t.state or '')}</tr>"
        for t in tasks
    )
    head = "".join(f'<th style="{_CELL};border-bottom:1px solid #9ca3af">{h}</th>' for h in
                   ("task", "node", "GPUs", "state"))  # fmt: skip
    return (
        # styled inline: JupyterLab's output area resets table CSS, which misaligned the columns
        '<table class="labhive-tasks" style="border-collapse:collapse;margin:4px 0;'
        f'font-size:12px;table-layout:auto"><tr>{head}</tr>{rows}</table>'
    )


_CELL = "text-align:left;padding:2px 10px 2px 0;vertical-align:top;white-space:nowrap"


def _td(text: str) -> str:
    return f'<td style="{_CELL}">{escape(text)}</td>'


def job_html(job: JobFacts, now: float) -> str:
    """The job's card: coloured state, the summary, the why-text and the task placement."""
    rest = escape(summary_line(job, now).split(": ", 1)[1].removeprefix(job.state))
    parts = [
        f'<div class="labhive-job" data-state="{escape(job.state)}">',
        f"<b>job {escape(job.name)}</b> {state_badge(job.state)}{rest}",
    ]
    if job.why and job.state == JobState.WAITING:
        parts.append(f'<div class="labhive-why">{escape(job.why)}</div>')
    if job.gpu_sharing:  # a GPU share: the banner says whether anything enforces it
        share = f"{job.gpus:g} of a GPU" if job.gpus is not None else "a GPU share"
        parts.append(f'<div class="labhive-share">{escape(share)}: {escape(job.gpu_sharing)}</div>')
    parts.append(tasks_html(job.tasks))
    parts.append("</div>")
    return "".join(parts)


_COLUMNS = ("id", "name", "user", "vc", "state", "where / why", "time")


def _row(job: JobFacts, now: float) -> tuple[str, ...]:
    where = placement(job.tasks) if job.state != JobState.WAITING else position(job)
    if job.state == JobState.WAITING and (when := starts(job, now)):
        where = f"{where}, {when}" if where else when
    if job.state == JobState.WAITING and job.why:
        where = f"{where}: {job.why}" if where else job.why
    return (
        job.id,
        job.name,
        job.user or "",
        job.vc or "",
        job.state,
        where,
        seconds(job.elapsed(now)),
    )


def jobs_text(jobs: Sequence[JobFacts], now: float) -> str:
    """A fixed-width table, for papermill reports and terminals."""
    if not jobs:
        return "no jobs"
    rows = [_COLUMNS, *(_row(j, now) for j in jobs)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS) - 2)]
    lines = []
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r, widths, strict=False)]
        lines.append("  ".join([*cells, r[-1].rjust(8), r[-2]]).rstrip())
    return "\n".join(lines)


def jobs_html(jobs: Sequence[JobFacts], now: float) -> str:
    if not jobs:
        return "<p>no jobs</p>"
    head = "".join(f"<th>{c}</th>" for c in _COLUMNS)
    body = []
    for job in jobs:
        cells = list(_row(job, now))
        cells = [escape(c) for c in cells]
        cells[4] = state_badge(job.state)
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f'<table class="labhive-jobs"><tr>{head}</tr>{"".join(body)}</table>'


def queue_text(queue: QueueFacts, now: float) -> str:
    """Per VC: quota and use, then its waiting jobs in queue order."""
    lines = []
    for vc in queue.vcs:
        lines.append(
            f"{vc.name}: {vc.used_gpus}/{vc.guaranteed_gpus} guaranteed GPUs used, "
            f"{vc.opportunistic_gpus} opportunistic, {vc.waiting} waiting"
        )
        if queue.standing.get(vc.name):
            lines.append(f"  fair share: {queue.standing[vc.name]}")
        for job in (j for j in queue.waiting if j.vc == vc.name):
            line = summary_line(job, now) if job.id != OTHERS else f"{job.name}, {job.gpus} GPUs"
            line += f", {when}" if job.id == OTHERS and (when := starts(job, now)) else ""
            lines.append(f"  {job.position or '?'}. {line}")
    return "\n".join(lines) if lines else "no virtual clusters"


def queue_html(queue: QueueFacts, now: float) -> str:
    rows = []
    for vc in queue.vcs:
        waiting = [j for j in queue.waiting if j.vc == vc.name]
        items = "".join(
            f"<li>{escape(j.name)} ({escape(j.user or '?')}, {j.gpus or '?'} GPUs)"
            + (f", {escape(when)}" if (when := starts(j, now)) else "")
            + f": {escape(j.why or '')}</li>"
            for j in waiting
        )
        rows.append(
            f'<div class="labhive-vc"><b>{escape(vc.name)}</b>: '
            f"{vc.used_gpus}/{vc.guaranteed_gpus} guaranteed GPUs used, "
            f"{vc.opportunistic_gpus} opportunistic, {vc.waiting} waiting"
            + (
                f'<div class="labhive-standing">fair share: {escape(text)}</div>'
                if (text := queue.standing.get(vc.name))
                else ""
            )
            + (f"<ol>{items}</ol>" if items else "")
            + "</div>"
        )
    return "".join(rows) or "<p>no virtual clusters</p>"
