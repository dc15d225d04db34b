"""ETAs where users look: given the service's ETA fields on a waiting job or queue entry,
expect "starts in ~25 min (10-50)" in the job card and widget, the queue widget and the text
a papermill report keeps."""

from __future__ import annotations

import time
from types import SimpleNamespace

from labhive.kernel_ext.facts import JobFacts, QueueFacts
from labhive.kernel_ext.render import job_html, jobs_text, queue_html, queue_text, summary_line

T0 = 1_700_000_000.0
MIN = 60.0
#: ~25 min, range 10-50 min, from T0
ETA = {"eta": T0 + 25 * MIN, "eta_low": T0 + 10 * MIN, "eta_high": T0 + 50 * MIN}
VCS = {"vc1": {"guaranteed_gpus": 4, "used_gpus": 4, "opportunistic_gpus": 0, "waiting": 2}}


def waiting(**fields) -> JobFacts:
    data = {"id": "j1", "name": "a", "state": "WAITING", "vc": "vc1", "submitted_at": T0}
    return JobFacts.from_api({**data, "queue_position": 2, "queue_length": 3, **fields})


def test_a_waiting_job_says_when_it_starts() -> None:
    job = waiting(why="vc1 has 0 free of the 2 cells", **ETA)
    assert summary_line(job, T0) == (
        "job a: WAITING (position 2 of 3 in vc1) for 0.0 s, starts in ~25 min (10-50)"
        " - vc1 has 0 free of the 2 cells"
    )
    assert "starts in ~25 min (10-50)" in job_html(job, T0)
    assert "position 2 of 3 in vc1, starts in ~25 min (10-50): vc1 has 0" in jobs_text([job], T0)


def test_an_exact_estimate_has_no_range_and_a_late_one_says_now() -> None:
    exact = waiting(eta=T0 + 30, eta_low=T0 + 30, eta_high=T0 + 30)
    assert summary_line(exact, T0).endswith(", starts in ~30 s")
    assert summary_line(exact, T0 + 40).endswith(", starts now")


def test_no_estimate_no_text_and_none_once_running() -> None:
    assert "starts" not in summary_line(waiting(), T0)
    running = waiting(state="RUNNING", started_at=T0, **ETA)
    assert "starts" not in summary_line(running, T0) and "starts" not in jobs_text([running], T0)


def test_the_queue_shows_every_waiting_job_s_estimate() -> None:
    entries = [
        {"id": 3, "name": "c", "vc": "vc1", "position": 1, "gpus": 2, "user": "ann", **ETA},
        {"id": None, "vc": "vc1", "position": 2, "gpus": 4, "eta": T0 + 2 * 3600,
         "eta_low": T0 + 3600, "eta_high": T0 + 3 * 3600},
    ]  # fmt: skip
    queue = QueueFacts.from_api({"vcs": VCS, "waiting": entries})
    assert queue_text(queue, T0).splitlines()[1:] == [
        "  1. job c: WAITING (position 1 in vc1), starts in ~25 min (10-50)",
        "  2. another user's job, 4 GPUs, starts in ~2 h (1-3)",
    ]
    html = queue_html(queue, T0)
    assert "c (ann, 2 GPUs), starts in ~25 min (10-50)" in html
    assert "starts in ~2 h (1-3)" in html


def test_the_job_widget_shows_the_estimate() -> None:
    from labhive.kernel_ext.snapshot import JobSnapshot
    from labhive.kernel_ext.widgets import JobWidget

    source = SimpleNamespace(info=SimpleNamespace(id=1))  # what it polls; never started
    widget = JobWidget(source)  # type: ignore[arg-type]
    now = time.time()
    facts = waiting(eta=now + 25 * MIN, eta_low=now + 10 * MIN, eta_high=now + 50 * MIN)
    widget.show(JobSnapshot(facts, "", ()))
    assert "starts in ~25 min (10-50)" in widget.summary.value
    widget.close()


def test_the_spawn_page_says_when_a_queued_server_starts() -> None:
    from labhive.hub_extension.spawner import waiting_text
    from labhive.scheduler.client.job_info import JobInfo

    job = {
        "id": 1,
        "vc": "vc1",
        "queue_position": 2,
        "queue_length": 3,
        "why": "vc1 is full",
        **ETA,
    }
    assert waiting_text(JobInfo.from_json(job), T0) == (
        "WAITING: position 2 of 3 in vc1, expected to start in ~25 min (10-50) — vc1 is full"
    )
    exact = {**job, "eta": T0 + 300, "eta_low": T0 + 300, "eta_high": T0 + 300, "why": None}
    assert (
        waiting_text(JobInfo.from_json(exact), T0)
        == "WAITING: position 2 of 3 in vc1, expected to start in ~5 min"
    )
    assert waiting_text(JobInfo.from_json(exact), T0 + 400).endswith(", expected to start now")


#: What the service sends for a job whose start waits on a notebook server: no ETA fields.
WAITS = {"waits_for": "a notebook server in VC vc1 to stop"}
NO_ESTIMATE = "waits for a notebook server in VC vc1 to stop; no estimate"


def test_a_job_behind_a_server_says_what_it_waits_for_not_a_time() -> None:
    job = waiting(why="vc1 has 0 free of the 2 cells", **WAITS)
    assert summary_line(job, T0) == (
        f"job a: WAITING (position 2 of 3 in vc1) for 0.0 s, {NO_ESTIMATE}"
        " - vc1 has 0 free of the 2 cells"
    )
    assert NO_ESTIMATE in job_html(job, T0) and NO_ESTIMATE in jobs_text([job], T0)
    assert "starts" not in summary_line(job, T0)
    entries = [{"id": None, "vc": "vc1", "position": 1, "gpus": 4, **WAITS}]
    queue = QueueFacts.from_api({"vcs": VCS, "waiting": entries})
    assert (
        queue_text(queue, T0).splitlines()[1] == f"  1. another user's job, 4 GPUs, {NO_ESTIMATE}"
    )
    assert NO_ESTIMATE in queue_html(queue, T0)


def test_the_job_widget_and_the_spawn_page_say_it_too() -> None:
    from labhive.hub_extension.spawner import waiting_text
    from labhive.kernel_ext.snapshot import JobSnapshot
    from labhive.kernel_ext.widgets import JobWidget
    from labhive.scheduler.client.job_info import JobInfo

    widget = JobWidget(SimpleNamespace(info=SimpleNamespace(id=1)))  # type: ignore[arg-type]
    widget.show(JobSnapshot(waiting(**WAITS), "", ()))
    assert NO_ESTIMATE in widget.summary.value
    widget.close()
    job = {"id": 1, "vc": "vc1", "queue_position": 1, "queue_length": 2, "why": "vc1 is full"}
    assert waiting_text(JobInfo.from_json({**job, **WAITS}), T0) == (
        f"WAITING: position 1 of 2 in vc1, {NO_ESTIMATE} — vc1 is full"
    )
