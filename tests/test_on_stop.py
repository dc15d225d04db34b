"""``labhive.on_stop`` inside a running job, with the real service and real signals.

Given a job (standing in for a notebook server's kernel: the same process-wide watch the kernel
extension starts) that registered an ``on_stop`` callback and has its own SIGTERM handler: an
announced stop runs the callback with the reason and the deadline, and the SIGTERM of the stop
comes after it. Both ways the notice reaches a job: its notice file, and the job's ``stopping``
field over REST (where no file is written).
"""

from __future__ import annotations

import base64
import sys
import time
from pathlib import Path

import pytest
from waiting import wait_until

from labhive.kernel_ext.notice import banner_html, banner_text

KERNEL = r"""
import signal, sys, time
import labhive
def term(*_):
    print(f"SIGTERM {time.time():.3f}", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
@labhive.on_stop
def checkpoint(notice):
    print(f"CALLBACK {time.time():.3f} {notice['kind']} {notice['reason']}", flush=True)
print("READY", flush=True)
while True:
    time.sleep(0.05)
"""


def job_command(prefix: str = "") -> str:
    code = base64.b64encode(KERNEL.encode()).decode()
    run = f"{sys.executable} -u -c 'import base64; exec(base64.b64decode(\"{code}\"))'"
    return f"{prefix}{run}"


@pytest.fixture
def service(tmp_path: Path):
    from service_fixtures import live_service

    with live_service(tmp_path / "data", grace_s=2.0) as live:
        yield live


def lines(job, word: str) -> list[str]:
    return [line for line in job.logs().data.splitlines() if line.startswith(word)]


def stop_with_notice(service, command: str) -> tuple[list[str], list[str]]:
    admin = service.client()
    job = admin.submit(command=command, vc="vc1", gpus=1, name="jupyter-alice")
    wait_until(lambda: lines(job, "READY"), what="the job's kernel to be ready", timeout=60)
    admin.stop_notice(job.id, "culled: idle for 15 min", 30, culled=True)
    callback = wait_until(lambda: lines(job, "CALLBACK"), what="the on_stop callback", timeout=30)
    assert not lines(job, "SIGTERM")  # the notice came first; nothing has stopped it yet
    admin.stop_notice(job.id, "culled: idle for 15 min", 0, culled=True, gpu_idle_s=900)
    done = job.wait(60, 0.1)
    assert done.state == "STOPPED" and done.data["reason"] == "culled"
    return callback, lines(done, "SIGTERM")


def test_on_stop_runs_from_the_notice_file_before_sigterm(service):
    callback, term = stop_with_notice(service, job_command())
    (line,) = callback
    assert line.split(" ", 3)[2:] == ["culled", "culled: idle for 15 min"]
    assert term and float(term[0].split()[1]) > float(line.split()[1])


def test_on_stop_runs_from_the_jobs_stopping_field_where_there_is_no_file(service):
    prefix = f"LABHIVE_URL={service.url} LABHIVE_TOKEN={service.admin} env -u LABHIVE_NOTICE_FILE "
    callback, term = stop_with_notice(service, job_command(prefix))
    assert len(callback) == 1 and "culled: idle for 15 min" in callback[0]
    assert term and float(term[0].split()[1]) > float(callback[0].split()[1])


def test_the_banner_says_the_reason_and_the_deadline():
    now = time.time()
    notice = {"reason": "time limit of 2 h reached", "deadline": now + 60, "kind": "time-limit"}
    text = banner_text(notice, now)
    assert "time limit of 2 h reached" in text and "in 60 s" in text
    assert time.strftime("%H:%M", time.localtime(now + 60)) in text
    assert "<script" not in banner_html({**notice, "reason": "<script>x</script>"}, now)


def test_the_job_widget_says_a_running_job_will_stop_and_why():
    from labhive.kernel_ext.facts import JobFacts
    from labhive.kernel_ext.render import job_html, summary_line

    now = time.time()
    doc = {"id": 3, "name": "train", "state": "RUNNING", "started_at": now - 100}
    notice = {"reason": "preempted by job 7", "deadline": now + 10, "kind": "stopping"}
    facts = JobFacts.from_api({**doc, "stopping": notice})
    assert summary_line(facts, now).endswith("- stops in 10.0 s: preempted by job 7")
    assert "preempted by job 7" in job_html(facts, now)
    assert "stops" not in summary_line(JobFacts.from_api({**doc, "stopping": None}), now)


def test_each_notice_runs_the_callbacks_once_and_a_withdrawn_one_does_not_hide_the_next(
    tmp_path, monkeypatch
):
    from labhive.scheduler.drivers.stop_watch import StopWatch, default_fetch
    from labhive.scheduler.executors.notice_file import write_notice

    monkeypatch.setenv("LABHIVE_NOTICE_FILE", str(tmp_path / "notice.json"))
    watch = StopWatch(fetch=default_fetch())
    seen: list[str] = []
    shown: list[str] = []
    watch.callbacks.append(lambda n: seen.append(n["reason"]))
    watch.shown = lambda n: shown.append(n["reason"])
    assert watch.check() is None and seen == []
    cull = {"reason": "culled", "deadline": 100.0, "kind": "culled"}
    write_notice(tmp_path, cull, {})
    watch.check()
    watch.check()
    assert seen == ["culled"] and shown == ["culled"]
    write_notice(tmp_path, None, {})  # withdrawn: the student came back
    assert watch.check() is None and watch.notice is None
    write_notice(tmp_path, {"reason": "time limit", "deadline": 200.0, "kind": "time-limit"}, {})
    watch.check()
    assert seen == ["culled", "time limit"]


def test_a_real_kernel_shows_the_banner_and_runs_on_stop_when_the_notice_file_appears(tmp_path):
    """An IPython kernel over the Jupyter protocol, with the extension loaded, in a task whose
    notice file the executor writes (the same function the local executor calls)."""
    from kernel_support import Kernel

    from labhive.scheduler.executors.notice_file import write_notice

    kernel = Kernel({"LABHIVE_NOTICE_FILE": str(tmp_path / "notice.json")})
    try:
        setup = kernel.run(
            "%load_ext labhive.kernel_ext\n"
            "import labhive\n"
            "seen = []\n"
            "labhive.on_stop(lambda notice: seen.append(notice['reason']))\n"
        )
        assert setup.error is None, setup
        assert not kernel.run("print(seen)").anonymous  # no notice, no banner
        deadline = time.time() + 60
        write_notice(
            tmp_path, {"reason": "culled: idle", "deadline": deadline, "kind": "culled"}, {}
        )
        wait_until(lambda: "['culled: idle']" in kernel.run("print(seen)").stdout, what="on_stop")
        banner = kernel.run("1 + 1").anonymous  # shown above each cell while it stands
        assert any("culled: idle" in d.get("text/plain", "") for d in banner)
        assert any("labhive-stop-notice" in d.get("text/html", "") for d in banner)
        write_notice(tmp_path, None, {})  # withdrawn
        wait_until(lambda: not kernel.run("x = 1").anonymous, what="the banner to go", timeout=10)
    finally:
        kernel.close()
