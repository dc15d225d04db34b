"""LabHiveSpawner against the real service and the real local executor, without a hub.

The service runs on the default virtual cluster (vc1 is one node of 4 GPU slots) with token
auth: alice (group students -> vc1) is the server's owner, her LabHive token standing in for
the hub-issued server token, and the admin token is the spawner's own. The "server" is a tiny
HTTP server that listens where the hub told it to (``JUPYTERHUB_SERVICE_URL``), so the tests
see the launch file carry the hub's environment into the task.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from service_fixtures import Live, live_service

from labhive.hub_extension.spawner import JUPYTER_CONFIG, LabHiveSpawner, ServerJobEnded

ALICE = "alice-token-123"
FAKE_SERVER = (
    "import json, os, http.server, urllib.parse as u;"
    "json.dump(dict(os.environ), open(os.environ['ENV_DUMP'], 'w'));"
    "port = u.urlparse(os.environ['JUPYTERHUB_SERVICE_URL']).port;"
    "http.server.HTTPServer(('127.0.0.1', port), http.server.SimpleHTTPRequestHandler)"
    ".serve_forever()"
)
GPU = [{"slug": "1gpu", "display_name": "1 GPU", "gpus": 1}, {"slug": "cpu", "gpus": 0}]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    data = tmp_path_factory.mktemp("svc") / "data"
    with live_service(data) as service:
        yield service


def make_spawner(live: Live, tmp: Path, token: str = ALICE, **traits: Any) -> LabHiveSpawner:
    from jupyterhub.objects import Hub

    name = traits.pop("user", "alice")
    user = SimpleNamespace(name=name, escaped_name=name, url=f"/user/{name}/", id=1, settings={})
    return LabHiveSpawner(
        user=user,
        hub=Hub(ip="127.0.0.1", port=1, base_url="/hub/"),
        api_token=token,
        service_url=live.url,
        service_token=live.admin,
        cmd=[sys.executable, "-c", FAKE_SERVER],
        secrets_dir=str(tmp / "secrets"),
        profiles=GPU,
        poll_s=0.1,
        environment={"ENV_DUMP": str(tmp / "server-env.json")},
        **traits,
    )


def job_of(spawner: LabHiveSpawner) -> int:
    """The id of the job the spawner started (or last knew of)."""
    assert spawner.job_id is not None, "the spawner has no job"
    return spawner.job_id


def block_vc1(live: Live, gpus: int = 4, priority: str = "prod") -> Any:
    """An admin job holding vc1's GPUs until cancelled."""
    job = live.client().submit(
        name="blocker", command="sleep 600", gpus=gpus, vc="vc1", priority=priority
    )
    deadline = time.monotonic() + 20
    while job.refresh().state != "RUNNING":
        assert time.monotonic() < deadline, f"blocker did not start: {job.data}"
        time.sleep(0.1)
    return job


async def first_waiting_message(spawner: LabHiveSpawner, timeout: float = 20) -> str:
    async def read() -> str:
        async for event in spawner.progress():
            if event["message"].startswith("WAITING"):
                return str(event["message"])
        raise AssertionError("progress ended without a WAITING message")

    return await asyncio.wait_for(read(), timeout)


def test_a_queued_server_shows_its_position_starts_when_gpus_free_and_stops(
    live: Live, tmp_path: Path
) -> None:
    blocker = block_vc1(live)
    spawner = make_spawner(live, tmp_path)
    spawner.user_options = {"profile": "1gpu"}

    async def scenario() -> tuple[str, str, dict[str, Any]]:
        start = asyncio.ensure_future(spawner.start())
        message = await first_waiting_message(spawner)
        assert not start.done()
        blocker.cancel()
        url = await asyncio.wait_for(start, 30)
        return message, url, spawner.get_state()

    message, url, state = asyncio.run(scenario())
    assert re.match(
        r"WAITING: position 1 of 1 in vc1(, expected to start [^—]+|, waits for [^—]+)? — ", message
    )
    assert "vc1" in message.split("—", 1)[1]
    assert _answers(url), "the server task does not answer at the URL start returned"

    job = live.client().job(state["labhive_job_id"])
    assert (job.user, job.vc, job.gpus, job.state) == ("alice", "vc1", 1, "RUNNING")
    assert ALICE not in str(job.spec), "the server's token must not be stored with the job"
    env = json.loads((tmp_path / "server-env.json").read_text())
    assert env["JUPYTERHUB_API_TOKEN"] == ALICE  # came through the 0600 launch file
    assert env["LABHIVE_JOB_ID"] == str(job.id)
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, job.tasks[0]["gpus"]))
    assert env["LABHIVE_URL"] == live.url
    assert str(JUPYTER_CONFIG) in env["JUPYTER_CONFIG_PATH"].split(os.pathsep)

    # a hub restart: a fresh spawner from the saved state re-adopts the running job
    again = make_spawner(live, tmp_path, token="")
    again.load_state(state)
    assert asyncio.run(again.poll()) is None
    assert again.get_state()["labhive_job_id"] == state["labhive_job_id"]

    asyncio.run(again.stop())
    assert live.client().job(state["labhive_job_id"]).state == "STOPPED"
    assert asyncio.run(again.poll()) is not None
    assert again.last_end == "", "a server the hub stopped needs no notice next time"
    assert _refused(url), "the server process outlived stop()"
    again.clear_state()
    assert "labhive_job_id" not in again.get_state()
    assert asyncio.run(again.poll()) == 0


def test_a_preempted_server_ends_with_a_message_shown_next_time(live: Live, tmp_path: Path) -> None:
    spawner = make_spawner(live, tmp_path, priority="test")
    spawner.user_options = {"profile": "1gpu"}
    url = asyncio.run(asyncio.wait_for(spawner.start(), 30))
    assert _answers(url)
    preemptor = live.client().submit(
        name="urgent", command="sleep 600", gpus=4, vc="vc1", priority="prod"
    )
    try:
        deadline = time.monotonic() + 20
        status = asyncio.run(spawner.poll())
        while status is None:
            assert time.monotonic() < deadline, "the server was not preempted"
            time.sleep(0.2)
            status = asyncio.run(spawner.poll())
        assert status == 1
        assert "higher-priority job" in spawner.last_end
        assert live.client().job(job_of(spawner)).state == "STOPPED"
        spawner.clear_state()
        assert "higher-priority job" in spawner.get_state()["labhive_last_end"]
        assert "higher-priority job" in asyncio.run(spawner._options_form())
    finally:
        preemptor.cancel()


def test_a_server_goes_to_a_vc_its_users_groups_grant_and_sizes_are_checked(
    live: Live, tmp_path: Path
) -> None:
    spawner = make_spawner(live, tmp_path, token="bob-token-4567", vcs=["vc1"])
    spawner.user_options = {"profile": "cpu"}
    url = asyncio.run(asyncio.wait_for(spawner.start(), 30))  # bob's groups grant default
    try:
        assert live.client().job(job_of(spawner)).vc == "default"
    finally:
        asyncio.run(spawner.stop(now=True))
    with pytest.raises(ServerJobEnded, match="unknown server size 'huge'"):
        spawner.user_options = {"profile": "huge"}
        asyncio.run(spawner.start())
    assert url


def test_a_server_that_waits_too_long_is_cancelled_with_a_clear_message(
    live: Live, tmp_path: Path
) -> None:
    blocker = block_vc1(live)
    try:
        spawner = make_spawner(live, tmp_path, start_timeout=3)
        spawner.user_options = {"profile": "1gpu"}
        with pytest.raises(ServerJobEnded, match=r"waited \d seconds .*position 1 of 1 in vc1"):
            asyncio.run(spawner.start())
        assert live.client().job(job_of(spawner)).state == "STOPPED"
    finally:
        blocker.cancel()


def _answers(url: str) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.TransportError:
            time.sleep(0.2)
    return False


def _refused(url: str) -> bool:
    try:
        httpx.get(url, timeout=2)
    except httpx.TransportError:
        return True
    return False


def test_a_new_users_home_gets_the_course_files_once_and_keeps_their_edits(
    live: Live, tmp_path: Path
) -> None:
    course = tmp_path / "course" / "labs"
    (course / "data").mkdir(parents=True)
    (course / "lab1.ipynb").write_text('{"cells": []}')
    (course / "labkit.py").write_text("KIT = 1\n")
    (course / "data" / "trace.csv").write_text("id,gpus\n1,2\n")
    (course / "__pycache__").mkdir()
    (course / "__pycache__" / "labkit.cpython-311.pyc").write_bytes(b"\0")
    data = tmp_path / "course-data"
    spawner = make_spawner(
        live, tmp_path, notebook_dir=str(tmp_path / "home" / "{username}"),
        course_dir=str(course), course_data=str(data),
    )  # fmt: skip
    spawner.user_options = {"profile": "cpu"}
    home = tmp_path / "home" / "alice" / "labs"

    url = asyncio.run(asyncio.wait_for(spawner.start(), 30))
    try:
        assert _answers(url)
        assert (home / "lab1.ipynb").read_text() == '{"cells": []}'
        assert (home / "data" / "trace.csv").read_text() == "id,gpus\n1,2\n"
        assert not (home / "__pycache__").exists()
        env = json.loads((tmp_path / "server-env.json").read_text())
        assert env["LABHIVE_DATA"] == str(data) and env["LABHIVE_COURSE_DIR"] == str(course)
    finally:
        asyncio.run(spawner.stop())

    (home / "labkit.py").write_text("KIT = 'my edit'\n")  # the student's edit
    (home / "lab1.ipynb").unlink()  # and a lab they deleted
    (course / "lab2.ipynb").write_text('{"cells": [1]}')  # the instructor adds a lab
    url = asyncio.run(asyncio.wait_for(spawner.start(), 30))
    try:
        assert _answers(url)
        assert (home / "labkit.py").read_text() == "KIT = 'my edit'\n"
        assert not (home / "lab1.ipynb").exists()
        assert (home / "lab2.ipynb").read_text() == '{"cells": [1]}'
    finally:
        asyncio.run(spawner.stop())


CAROL_GRANTS = """\
users:
  carol: {token: carol-token-789, groups: [vc1]}
groups:
  "*": {vcs: [default]}
  vc1: {vcs: [vc1]}
  instructors: {vcs: ["*"]}
"""


def test_the_spawn_form_offers_the_users_vcs_their_own_first_and_says_a_queued_job_was_cancelled(
    tmp_path: Path,
) -> None:
    """Given carol in group vc1 (and everyone granted default): the form offers vc1 (her own,
    selected) and default; a server without a choice goes to vc1, not the first granted;
    a choice she has no grant for is refused; stopping her server while it queues says its
    queued job was cancelled, on the next form."""
    grants = tmp_path / "grants.yaml"
    grants.write_text(CAROL_GRANTS)
    with live_service(tmp_path / "data", users=CAROL_GRANTS) as live:
        spawner = make_spawner(
            live, tmp_path, token="carol-token-789", user="carol", grants_file=str(grants)
        )
        spawner.user = SimpleNamespace(**{**vars(spawner.user), "groups": [_Group("vc1")]})
        form = asyncio.run(spawner._options_form())
        assert "<option value='vc1' selected>vc1 (your VC)</option>" in form, form
        assert "<option value='default'>default</option>" in form, form
        assert spawner.options_from_form({"vc": ["default"]}) == {"profile": "", "vc": "default"}
        teacher = make_spawner(live, tmp_path, user="tina", grants_file=str(grants))
        teacher.user = SimpleNamespace(**{**vars(teacher.user), "groups": [_Group("instructors")]})
        assert asyncio.run(teacher._vc_choices()) == list(live.client().vcs()), "all, in order"

        blocker = block_vc1(live)
        try:
            spawner.user_options = {}
            started = asyncio.run(_start_then_stop_while_waiting(spawner))
            assert started.startswith("WAITING: position 1 of 1 in vc1"), started
            assert live.client().job(job_of(spawner)).state == "STOPPED"
            assert "was still waiting in vc1's queue" in spawner.last_end
            assert "queued job was cancelled" in asyncio.run(spawner._options_form())
        finally:
            blocker.cancel()

        spawner.user_options = {"vc": "default"}
        asyncio.run(asyncio.wait_for(spawner.start(), 30))
        try:
            assert live.client().job(job_of(spawner)).vc == "default"
        finally:
            asyncio.run(spawner.stop(now=True))
        spawner.user_options = {"vc": "vc2"}
        with pytest.raises(ServerJobEnded, match=r"may not start a server in VC 'vc2'.*vc1"):
            asyncio.run(spawner.start())


class _Group(SimpleNamespace):
    def __init__(self, name: str) -> None:
        super().__init__(name=name)


async def _start_then_stop_while_waiting(spawner: LabHiveSpawner) -> str:
    """The user presses stop on the spawn page while the server queues: the hub cancels
    start() and calls stop()."""
    start = asyncio.ensure_future(spawner.start())
    message = await first_waiting_message(spawner)
    start.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await start
    await spawner.stop()
    return message


# ---- server_on_nodes: the address from the task, the tokens by handoff ------------------------


def test_a_server_on_nodes_gets_its_address_from_the_task_and_its_token_by_handoff(
    live: Live, tmp_path: Path
) -> None:
    """The node mode over the local executor (its tasks' address is 127.0.0.1); the Slurm
    nodes are in tests/test_slurm_hub.py."""
    spawner = make_spawner(live, tmp_path, server_on_nodes=True)
    spawner.user_options = {"profile": "cpu"}
    url = asyncio.run(asyncio.wait_for(spawner.start(), 60))
    job = live.client().job(job_of(spawner))
    assert url == f"http://{job.tasks[0]['address']}:{spawner.port}" and _answers(url)
    env = json.loads((tmp_path / "server-env.json").read_text())
    assert env["JUPYTERHUB_API_TOKEN"] == ALICE  # handed over TCP by the hub
    assert ALICE not in str(job.data) and ALICE not in str(job.spec)  # nor in its command
    assert not (tmp_path / "secrets").exists(), "node mode writes no launch file on the hub"
    asyncio.run(spawner.stop())
    assert _refused(url)


def test_a_server_whose_port_is_taken_on_its_node_ends_saying_where_to_look(
    live: Live, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    from labhive.hub_extension import spawner as spawner_module

    with socket.create_server(("0.0.0.0", 0)) as taken:
        port = taken.getsockname()[1]
        monkeypatch.setattr(spawner_module, "random_port", lambda: port)  # the hub's pick
        spawner = make_spawner(live, tmp_path, server_on_nodes=True)
        spawner.user_options = {"profile": "cpu"}
        with pytest.raises(ServerJobEnded, match=r"ended FAILED .*labhive logs \d+ --stderr"):
            asyncio.run(asyncio.wait_for(spawner.start(), 60))
        stderr = live.client().logs(job_of(spawner), stream="stderr").data
    assert f"port {port} is in use on this node" in stderr


#: A server that boots slowly, as JupyterLab does on a loaded machine: it listens 3 s after its
#: job runs.
SLOW_SERVER = "import time; time.sleep(3); " + FAKE_SERVER


def test_start_returns_once_the_server_listens_not_when_its_job_runs(
    live: Live, tmp_path: Path
) -> None:
    """The hub's own wait for a server backs off up to 5 s between tries: a start that
    returned when the job ran left each student of a class waiting seconds past their
    server's boot. Expect start to return when the server answers, and not before."""
    spawner = make_spawner(live, tmp_path)
    spawner.cmd = [sys.executable, "-c", SLOW_SERVER]
    spawner.user_options = {"profile": "cpu"}
    began = time.monotonic()
    url = asyncio.run(asyncio.wait_for(spawner.start(), 60))
    try:
        assert time.monotonic() - began >= 3, "start returned before the server could listen"
        assert httpx.get(url, timeout=5).status_code == 200  # at once: no retry
    finally:
        asyncio.run(spawner.stop(now=True))


def test_a_server_whose_job_ends_before_it_listens_ends_the_start_saying_so(
    live: Live, tmp_path: Path
) -> None:
    spawner = make_spawner(live, tmp_path)
    spawner.cmd = [sys.executable, "-c", "import sys, time; time.sleep(2); sys.exit(3)"]
    spawner.user_options = {"profile": "cpu"}
    with pytest.raises(ServerJobEnded, match=r"ended FAILED before the server listened"):
        asyncio.run(asyncio.wait_for(spawner.start(), 60))


def test_polling_a_server_makes_no_new_http_client_each_time(
    live: Live, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each httpx client costs ~50 ms of CPU (its CA bundle). The hub polls every starting
    server every second: a spawner that made a client per call spent a 2-core hub's CPU on
    a class of 50 logging in. Expect 20 polls of a running server to make no new client."""
    spawner = make_spawner(live, tmp_path)
    spawner.user_options = {"profile": "cpu"}
    asyncio.run(asyncio.wait_for(spawner.start(), 60))
    made = []
    real_init = httpx.Client.__init__

    def counting_init(self: httpx.Client, *args: Any, **kw: Any) -> None:
        made.append(1)
        real_init(self, *args, **kw)

    monkeypatch.setattr(httpx.Client, "__init__", counting_init)
    try:
        assert all(asyncio.run(spawner.poll()) is None for _ in range(20))
        assert made == []
    finally:
        monkeypatch.undo()
        asyncio.run(spawner.stop(now=True))


def test_a_booting_server_is_asked_about_at_doubling_gaps_not_every_second(
    live: Live, tmp_path: Path
) -> None:
    """Given a server that boots in 8 s (JupyterLab while a class of 50 logs in on 2 cores
    takes 10-40 s) and the hub's default ``poll_s`` of 1 s, expect the spawner to ask the
    service about its running job at most 6 times (once as it runs, then after 0, 1, 3, 7 s
    of the boot, and once more if the boot is slow here), not every second (10 times): each
    ask costs the hub and the service ~5 ms of CPU, for each of 50 booting servers. It still
    starts once the server listens."""
    spawner = make_spawner(live, tmp_path)
    spawner.poll_s = 1.0
    spawner.cmd = [sys.executable, "-c", "import time; time.sleep(8); " + FAKE_SERVER]
    spawner.user_options = {"profile": "cpu"}
    asks: list[float] = []
    real_job = spawner._job

    async def counted_job() -> Any:  # the real ask, counted
        job = await real_job()
        if job.running:
            asks.append(time.monotonic())
        return job

    spawner._job = counted_job  # type: ignore[method-assign]
    url = asyncio.run(asyncio.wait_for(spawner.start(), 90))
    try:
        assert httpx.get(url, timeout=5).status_code == 200
        gaps = [round(b - a, 2) for a, b in itertools.pairwise(asks)]
        assert 2 <= len(asks) <= 6, f"{len(asks)} asks while the server booted, gaps {gaps}"
    finally:
        asyncio.run(spawner.stop(now=True))
