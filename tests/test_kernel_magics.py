"""The magics in a real IPython kernel against a real ``labhive serve`` (local executor, virtual
cluster of 2 nodes x 4 GPU slots, VCs ``default`` and ``vc1``), as alice, with bob next door.

The kernel is driven the way papermill drives it (no stdin), so ``%submit`` waits by default.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_support import Kernel, Service, labhive_serve
from waiting import wait_until

from labhive.client import Client, NotFoundError

ENDED = ("SUCCEEDED", "FAILED", "STOPPED")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with labhive_serve(tmp_path_factory.mktemp("service")) as svc:
        yield svc


@pytest.fixture(scope="module")
def kernel(service: Service) -> Iterator[Kernel]:
    k = Kernel(service.env("alice"))
    try:
        assert k.run("%load_ext labhive.kernel_ext").error is None
        yield k
    finally:
        k.close()


def as_user(service: Service, user: str) -> Client:
    return Client(service.url, service.token(user))


def wait_state(client: Client, job_id: int, states: tuple[str, ...], timeout: float = 30) -> str:
    def reached() -> str | None:
        state = client.job(job_id).state
        return state if state in states else None

    return wait_until(reached, f"job {job_id} to become {' or '.join(states)}", timeout, 0.2)


def test_gang_of_two_runs_and_both_tasks_output_shows_in_logs(kernel: Kernel) -> None:
    out = kernel.run(
        "gang = %submit --name gang --tasks 2 --gpus 1 --no-wait -- "
        "python -c \"import os; print('hello from task', os.environ['PAI_TASK_INDEX'])\""
    )
    assert out.error is None, out.stderr
    (submitted,) = out.texts()
    assert re.match(r"job gang: (WAITING|RUNNING)", submitted)

    waited = kernel.run("%wait $gang.id", timeout=60)
    assert waited.error is None, waited.stderr
    assert re.search(r"^job gang: SUCCEEDED after [\d.]+ s on vnode-\d GPUs? ", waited.stdout, re.M)
    # The display made at submission was updated in place to the final state.
    assert kernel.displays[next(iter(out.displays))]["text/plain"].startswith("job gang: SUCCEEDED")

    logs = kernel.run("%logs $gang.id")
    assert sorted(logs.stdout.splitlines()) == [
        "[main-0] hello from task 0",
        "[main-1] hello from task 1",
    ]


def test_cell_magic_runs_the_body_with_the_kernels_python(kernel: Kernel) -> None:
    out = kernel.run(
        "%%submit --name body\n"
        "import sys\n"
        "total = sum(range(10))\n"
        "print('sum is', total, 'on', sys.version_info[:2])\n",
        timeout=60,
    )
    assert out.error is None, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("job body: SUCCEEDED after")
    import sys

    assert f"sum is 45 on {tuple(sys.version_info[:2])}" in lines
    assert out.texts()[-1].startswith("job body: SUCCEEDED")
    (card,) = out.displays.values()  # the job's display: its final state, the log printed once
    assert "SUCCEEDED" in card["text/html"] and "sum is 45" not in card["text/html"]


def test_cancel_stops_a_running_job(kernel: Kernel, service: Service) -> None:
    out = kernel.run("sleeper = %submit --name sleeper --no-wait -- sleep 300")
    assert out.error is None, out.stderr
    job_id = int(kernel.run("print(sleeper.id)").stdout)
    alice = as_user(service, "alice")
    wait_state(alice, job_id, ("RUNNING",))

    cancelled = kernel.run("%cancel $sleeper.id")
    assert cancelled.error is None, cancelled.stderr
    assert wait_state(alice, job_id, ENDED, timeout=20) == "STOPPED"
    assert cancelled.stdout.startswith("job sleeper: ")
    # Shown again in a later cell, the job is as it is now, not as its first display cached it.
    for line in ("%job $sleeper.id", "sleeper"):
        shown = kernel.run(line)
        assert shown.error is None, shown.stderr
        texts = [b.get("text/plain", "") for b in [*shown.displays.values(), *shown.anonymous]]
        assert any(t.startswith("job sleeper: STOPPED") for t in texts), (line, texts)


@pytest.mark.parametrize(
    ("line", "first"),
    [
        (
            "%submit --gpus two -- echo hi",
            "%submit: argument --gpus: not a number of GPUs (got 'two')",
        ),
        ("%submit --vc nowhere -- echo hi", None),
        ("%logs 999999", None),
    ],
)
def test_mistakes_show_a_message_and_no_traceback(kernel: Kernel, line: str, first: str) -> None:
    out = kernel.run(line)
    assert out.error is not None and out.error[0] == "UsageError"
    assert "Traceback" not in out.stderr and "Error in" not in out.stdout
    message = out.error[1]
    if first:
        assert message.startswith(first)
        assert "usage: %submit [--gpus N] [--tasks M]" in message
    else:
        assert message and "HTTP" not in message


def test_sweep_submits_the_product(kernel: Kernel, service: Service) -> None:
    out = kernel.run(
        "table = %submit --name sw --sweep lr=0.1,0.01 --sweep bs=32,64 -- echo lr={lr} bs={bs}",
        timeout=90,
    )
    assert out.error is None, out.stderr
    alice = as_user(service, "alice")
    mine = {j.name: j for j in alice.jobs() if j.name.startswith("sw-")}
    assert sorted(mine) == ["sw-lr0.01-bs32", "sw-lr0.01-bs64", "sw-lr0.1-bs32", "sw-lr0.1-bs64"]
    for name, job in mine.items():
        assert job.state == "SUCCEEDED"
        point = re.match(r"sw-lr([\d.]+)-bs(\d+)", name)
        assert point, f"{name} is not a point of the sweep's grid"
        lr, bs = point.groups()
        assert job.logs().data == f"lr={lr} bs={bs}\n"
    table = out.texts()[-1].splitlines()
    assert len(table) == 5 and all("SUCCEEDED" in row for row in table[1:])


def test_a_cell_sweep_shows_its_table_once(kernel: Kernel) -> None:
    out = kernel.run("%%submit --name once --sweep n=1,2 --shell\necho n=$n\n", timeout=90)
    assert out.error is None, out.stderr
    (table,) = out.texts()  # one display, updated to the end: no printed copy, no Out[] copy
    assert len(table.splitlines()) == 3 and table.count("SUCCEEDED") == 2, table
    assert "SUCCEEDED" not in out.stdout


def test_a_failed_jobs_widget_shows_its_stderr_and_a_running_one_why_no_gpu_readings(
    kernel: Kernel,
) -> None:
    """A MemoryError is visible in the widget of the job it ended; a finished job has no
    Cancel button; on the virtual cluster the GPU-metrics area says why it is empty."""
    out = kernel.run(
        "import time\n"
        "boom = %submit --name boom --no-wait -- python -c \"print('step 1'); "
        "raise MemoryError('no room for step 2')\"\n"
        "w = boom.widget()\n"
        "w.poller.join(30)\n"
        "print(w.snapshot.facts.state, w.cancel_button.layout.display)\n"
        "print(repr(w.log_view.value))\n"
        "slow = %submit --name slow --no-wait -- sleep 60\n"
        "v = slow.widget()\n"
        "deadline = time.monotonic() + 30\n"
        "while not v.gpu_bars.value and time.monotonic() < deadline:\n"
        "    time.sleep(0.2)\n"
        "print(repr(v.gpu_bars.value), v.cancel_button.layout.display)\n"
        "slow.cancel(); v.close()\n",
        timeout=90,
    )
    assert out.error is None, out.stderr
    flags, log, gpus = out.stdout.splitlines()[:3]
    assert flags == "FAILED none"
    assert "step 1" in log and "last lines of stderr" in log
    assert "MemoryError: no room for step 2" in log
    assert "virtual cluster" in gpus and "no GPU readings" in gpus
    assert gpus.rstrip().endswith("None"), "a running job keeps its Cancel button"


def test_another_users_command_and_logs_stay_hidden(kernel: Kernel, service: Service) -> None:
    bob = as_user(service, "bob")
    running = bob.submit(name="bobs", command="echo bob-secret-42; sleep 300", vc="vc1", gpus=4)
    waiting = bob.submit(name="bobs2", command="echo bob-secret-43", vc="vc1", gpus=4)
    try:
        wait_state(bob, running.id, ("RUNNING",))
        out = kernel.run(
            f"from labhive import client\n"
            f"try:\n"
            f"    client.connect().job({running.id})\n"
            f"except client.LabHiveError as err:\n"
            f"    print(type(err).__name__, err.message)\n"
        )
        assert out.stdout.startswith("NotFoundError"), out.stdout  # as if it did not exist
        logs = kernel.run(f"%logs {running.id}")
        assert logs.error is not None and logs.error[0] == "UsageError"
        assert "bob-secret" not in logs.stdout + logs.stderr + logs.error[1]

        queue = kernel.run("%queue vc1")
        (shown,) = queue.texts()
        # bob's waiting job is counted in its VC; the queue lists no one else's jobs
        assert shown == "vc1: 4/4 guaranteed GPUs used, 0 opportunistic, 1 waiting", shown
        with pytest.raises(NotFoundError):
            as_user(service, "alice").logs(running.id)
    finally:
        bob.cancel(waiting.id)
        bob.cancel(running.id)


def test_papermill_report_ends_with_succeeded(service: Service, tmp_path: Path) -> None:
    import nbformat
    import papermill
    from kernel_support import venv_env

    notebook = Path(__file__).resolve().parents[1] / "notebooks" / "submit_and_watch.ipynb"
    out = tmp_path / "report.ipynb"
    env = venv_env(**service.env("alice"))
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        papermill.execute_notebook(
            str(notebook), str(out), parameters={"name": "report"}, kernel_name="python3",
            progress_bar=False,
        )  # fmt: skip
    cells = nbformat.read(out, as_version=4).cells
    outputs = [o for c in cells if c.cell_type == "code" for o in c.outputs]
    displays = [o for o in outputs if o.output_type in ("display_data", "execute_result")]
    assert displays[-1]["data"]["text/plain"].startswith("job report: SUCCEEDED after")
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "hello from LabHive task 0" in text and "hello from LabHive task 1" in text


def test_live_widget_follows_the_job_and_its_poller_stops_at_the_end(kernel: Kernel) -> None:
    """What a front end gets: the widget view beside the snapshot; the poller ends with the job."""
    out = kernel.run(
        "import os\n"
        "os.environ['LABHIVE_INTERACTIVE'] = '1'\n"
        "live = %submit --name live --tasks 2 -- echo live-$PAI_TASK_INDEX\n"
        "os.environ.pop('LABHIVE_INTERACTIVE')\n"
        "from labhive.kernel_ext import show\n"
        "view = show(live)\n"
    )
    assert out.error is None, out.stderr
    (bundle,) = out.displays.values()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"].startswith("job live: ")
    probe = kernel.run(
        "import time\n"
        "view.widget.poller.join(30)\n"
        "print(view.widget.poller.running, view.widget.cancel_button.disabled)\n"
        "print(view.widget.summary.value)\n"
        "print(view.widget.log_view.value)\n"
    )
    flags, summary, log = probe.stdout.split("\n", 2)
    assert flags == "False True"  # poller ended, cancel button disabled
    assert 'data-state="SUCCEEDED"' in summary
    assert "[main-0] live-0" in log and "[main-1] live-1" in log
    # The display made while it ran was re-published with the final state.
    assert kernel.displays[next(iter(out.displays))]["text/plain"].startswith("job live: SUCCEEDED")


def test_a_students_kernel_imports_ipywidgets_only_when_a_widget_is_shown(
    service: Service,
) -> None:
    """Given a fresh kernel as every student of a class starts one (bench_classroom's cell:
    ``%load_ext``, then a ``%submit --no-wait`` that no front end watches), expect ipywidgets
    not imported: each kernel of a class of 50 pays every import on a 2-core machine (docs/hub.md,
    "A class of 50"). The first live widget imports it, and it shows."""
    k = Kernel(service.env("alice"))
    try:
        assert k.run("%load_ext labhive.kernel_ext").error is None
        out = k.run(
            "job = %submit --name quiet --no-wait -- true\n"
            "import sys\n"
            "print('ipywidgets' in sys.modules)"
        )
        assert out.error is None, out.stderr
        assert out.stdout.strip().splitlines()[-1] == "False", out.stdout
        shown = k.run(
            "import os\n"
            "os.environ['LABHIVE_INTERACTIVE'] = '1'\n"
            "watched = %submit --name watched --no-wait -- true\n"
            "os.environ.pop('LABHIVE_INTERACTIVE')\n"
            "print('ipywidgets' in sys.modules)"
        )
        assert shown.error is None, shown.stderr
        assert shown.stdout.strip() == "True"
        (bundle,) = shown.displays.values()
        assert "application/vnd.jupyter.widget-view+json" in bundle
        assert bundle["text/plain"].startswith("job watched: ")
    finally:
        k.close()


def test_a_students_kernel_loads_no_http_cli_and_no_ca_bundle_for_a_plain_http_service(
    service: Service,
) -> None:
    """Given a fresh kernel as every student of a class starts one (``%load_ext``, then a
    ``%submit --no-wait``) and the service at an ``http://`` URL, expect neither httpx's
    command-line client (``rich``, ``click``: installed here, with the dev extra) imported nor
    a CA bundle loaded for a client that speaks no TLS (~0.15 CPU s of each kernel's start
    before); a client of an ``https://`` URL still loads the CAs and verifies."""
    k = Kernel(service.env("alice"))
    try:
        assert k.run("%load_ext labhive.kernel_ext").error is None
        out = k.run(
            "job = %submit --name lean --no-wait -- true\n"
            "import sys, ssl, labhive.client as lh\n"
            "print(sorted({'rich', 'click'} & set(sys.modules)))\n"
            "def context(c): return c._http._transport._pool._ssl_context\n"
            "plain = context(lh.Client())\n"
            "print(plain.cert_store_stats()['x509_ca'], plain.verify_mode == ssl.CERT_REQUIRED,"
            " plain.check_hostname)\n"
            "tls = context(lh.Client('https://127.0.0.1:9'))\n"
            "print(tls.cert_store_stats()['x509_ca'] > 0, tls.verify_mode == ssl.CERT_REQUIRED)"
        )
        assert out.error is None, out.stderr
        assert out.stdout.split("\n")[-4:] == ["[]", "0 True True", "True True", ""], out.stdout
    finally:
        k.close()


def test_cancel_button_stops_the_job_and_closing_stops_the_poller(
    kernel: Kernel, service: Service
) -> None:
    out = kernel.run(
        "import time\n"
        "w = %submit --name closer --no-wait -- sleep 300\n"
        "widget = w.widget()\n"
        "time.sleep(1)\n"
        "widget.cancel_button.click()\n"
        "widget.poller.join(20)\n"
        "print(widget.poller.running, widget.message.value, widget.snapshot.facts.state)\n"
        "other = %submit --name open --no-wait -- sleep 300\n"
        "second = other.widget()\n"
        "time.sleep(1)\n"
        "second.close()\n"
        "second.poller.join(5)\n"
        "print(second.poller.polls >= 2, second.poller.running)\n"
        "other.cancel()\n"
    )
    assert out.error is None, out.stderr
    assert out.stdout.splitlines() == ["False cancel requested STOPPED", "True False"]


def test_queue_and_cluster_widgets_refresh_until_closed(kernel: Kernel) -> None:
    out = kernel.run(
        "import os, time\n"
        "os.environ['LABHIVE_INTERACTIVE'] = '1'\n"
        "%queue\n"
        "%cluster\n"
        "os.environ.pop('LABHIVE_INTERACTIVE')\n"
    )
    assert out.error is None, out.stderr
    bundles = list(out.displays.values())
    assert len(bundles) == 2
    assert all("application/vnd.jupyter.widget-view+json" in b for b in bundles)
    assert bundles[0]["text/plain"].startswith("default: ")
    assert bundles[1]["text/html"].startswith("<svg")
    probe = kernel.run(
        "from labhive.kernel_ext.widgets import LiveHTML\n"
        "import gc\n"
        "live = [w for w in gc.get_objects() if isinstance(w, LiveHTML) and w.poller.running]\n"
        "time.sleep(1.5)\n"
        "print(len(live), all(w.poller.polls >= 1 for w in live),\n"
        "      any('svg' in w.html.value for w in live))\n"
        "for w in live:\n"
        "    w.close()\n"
        "    w.poller.join(5)\n"
        "print(any(w.poller.running for w in live))\n"
    )
    assert probe.stdout.splitlines() == ["2 True True", "False"], probe.stderr


def test_client_sweep_from_plain_python(service: Service) -> None:
    from labhive.client import Rejected, sweep

    alice = as_user(service, "alice")
    table = sweep("echo lr={lr} opt={opt}", {"lr": [0.1, 0.01], "opt": ["a b"]}, client=alice,
                  name="py").wait(60)  # fmt: skip
    frame = table.frame()
    assert list(frame.columns) == ["lr", "opt", "id", "name", "state"]
    assert list(frame["state"]) == ["SUCCEEDED", "SUCCEEDED"]
    assert [j.logs().data for j in table.jobs] == ["lr=0.1 opt=a b\n", "lr=0.01 opt=a b\n"]

    # A refused point cancels the points already submitted: all or nothing.
    def command(point: dict[str, str]) -> str:
        return "sleep 30" if point["n"] == "1" else "x" * 200_000  # too long for the service

    before = {j.id for j in alice.jobs()}
    with pytest.raises(Rejected, match=r"^sweep point n=2: "):
        sweep(command, {"n": [1, 2]}, client=alice, name="half")
    (first,) = [j for j in alice.jobs() if j.id not in before]
    assert first.name == "half-n1" and first.state == "STOPPED"
    with pytest.raises(Rejected, match=r"^sweep point n=1: job rejected"):
        sweep("true", {"n": [1, 2]}, client=alice, name="big", gpus=99)


def test_waits_print_sparse_progress_lines(kernel: Kernel) -> None:
    out = kernel.run(
        "import time\n"
        "from labhive.kernel_ext.views import job_view, wait_for\n"
        "slow = %submit --name slow --no-wait -- sleep 3.5\n"
        "lines = []\n"
        "facts = wait_for(job_view(slow), progress_every=1.0, min_gap=1.0,\n"
        "                 out=lambda line: lines.append((time.monotonic(), line)))\n"
        "gaps = [b[0] - a[0] for a, b in zip(lines, lines[1:])]\n"
        "print(facts.state, len(lines), min(gaps) >= 0.99)\n"
        "print(lines[-1][1])\n"
    )
    assert out.error is None, out.stderr
    summary, last = out.stdout.splitlines()
    state, count, spaced = summary.split()
    assert state == "SUCCEEDED" and 2 <= int(count) <= 4 and spaced == "True"
    assert last.startswith("job slow: RUNNING for ")
