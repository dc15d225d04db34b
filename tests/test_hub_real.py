"""The hub for real: JupyterHub + configurable-http-proxy + the LabHive spawner and service,
driven by headless Debian Chromium through Playwright.

Alice (group vc1-users -> vc1) starts her server while a job holds all of vc1: the spawn page
shows her queue position; when the blocker is cancelled her server starts and JupyterLab
opens; ``%submit`` in her notebook makes a job owned by her. Bob (group others -> default)
gets a 404 for her job's logs through the hub's OAuth (as if it did not exist); the instructor
(admin) sees both users' jobs. Then the hub restarts while her server runs: it is re-adopted,
not started again.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from hub_support import Hub, real_hub, wait_for
from kernel_support import CHROMIUM, CHROMIUM_FLAGS, write_notebook

from labhive.client import Client


def login(browser: Any, hub: Hub, name: str, then: str = "") -> Any:
    """A logged-in page; without ``then`` the hub goes on to start the user's server."""
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{hub.url}/hub/login" + (f"?next={quote(then, safe='')}" if then else ""))
    page.fill("#username_input", name)
    page.fill("#password_input", "any")
    page.click("#login_submit")
    return page


def jobs_named(admin: Client, name: str) -> list[Any]:
    return [j for j in admin.jobs(limit=1000) if j.name == name]


def test_a_queued_server_starts_owns_its_jobs_and_survives_a_hub_restart(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "install Debian's chromium (.ci/deps.sh does)"
    write_notebook(
        tmp_path / "home" / "alice" / "submit.ipynb",
        "%load_ext labhive.kernel_ext\n%submit --name from-kernel --vc vc1 --gpus 0 -- echo hi",
    )
    with real_hub(tmp_path) as hub, sync_playwright() as pw:
        admin = hub.admin()
        blocker = admin.submit(
            name="blocker", command="sleep 600", vc="vc1", gpus=2, priority="prod"
        )
        wait_for(lambda: blocker.refresh().state == "RUNNING", 30, "the blocker to run")

        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        alice = login(browser, hub, "alice")
        try:
            # 1. the spawn page says where she is in the queue, and why
            alice.wait_for_selector("#progress-message:has-text('position')")
            waiting = alice.inner_text("#progress-message")
            # the estimate appears once the service's forecast has run (it may not have yet)
            eta = r"(, expected to start [^—]+|, waits for [^—]+; no estimate)?"
            expected = rf"WAITING: position 1 of 1 in vc1{eta} — vc1 has 0 free"
            assert re.match(expected, waiting), waiting
            alice.screenshot(path=str(tmp_path / "spawn-pending.png"))
            (server_job,) = jobs_named(admin, "jupyter-alice")
            assert (server_job.user, server_job.state, server_job.gpus) == ("alice", "WAITING", 1)

            # 2. the blocker goes; her server starts and JupyterLab opens
            blocker.cancel()
            alice.wait_for_url("**/user/alice/lab**", timeout=120_000)
            alice.wait_for_selector("#jp-main-dock-panel", timeout=60_000)

            # 3. %submit in her kernel acts as her, with no token handling by her
            alice.goto(f"{hub.url}/user/alice/lab/tree/submit.ipynb")
            alice.wait_for_function("() => document.body.innerText.includes('| Idle')")
            alice.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            (mine,) = wait_for(lambda: jobs_named(admin, "from-kernel"), 60, "%submit's job")
            assert (mine.user, mine.vc) == ("alice", "vc1")
            wait_for(lambda: mine.refresh().done, 30, "alice's job to finish")

            # ... and her server's extension serves the service as her, under her server's URL
            own = alice.request.get(f"{hub.url}/user/alice/labhive/api/v1/jobs")
            assert own.status == 200, own.text()
            assert {j["user"] for j in own.json()["jobs"]} == {"alice"}

            # 4. bob may not read her logs; his own job is his (OAuth cookie, no token)
            bob = login(browser, hub, "bob", then="/hub/home")
            denied = bob.goto(f"{hub.url}/services/labhive/api/v1/jobs/{mine.id}/logs")
            assert denied is not None and denied.status == 404, denied and denied.text()
            assert f"no job {mine.id} of yours" in denied.text()  # as if it did not exist
            bob.context.add_cookies(  # a stale OAuth cookie sends the browser to log in again
                [
                    {
                        "name": "labhive-oauth-token",
                        "value": "stale",
                        "url": f"{hub.url}/services/labhive/",
                    }
                ]
            )
            again = bob.goto(f"{hub.url}/services/labhive/api/v1/jobs/{mine.id}/logs")
            assert again is not None and again.status == 404, again and again.text()
            made = bob.request.post(
                f"{hub.url}/services/labhive/api/v1/jobs",
                data=json.dumps({"name": "bobs", "command": "true", "gpus": 0}),
                headers={"Content-Type": "application/json"},
            )
            assert made.status == 201 and made.json()["user"] == "bob", made.text()
            assert made.json()["vc"] == "default"

            # a hub token of bob's without access to the service is refused, with the fix
            xsrf = next(c["value"] for c in bob.context.cookies() if c["name"] == "_xsrf")
            minted = bob.request.post(
                f"{hub.url}/hub/api/users/bob/tokens",
                data=json.dumps({"scopes": ["read:users:name!user"], "note": "narrow"}),
                headers={"Content-Type": "application/json", "X-XSRFToken": xsrf},
            )
            assert minted.status == 201, minted.text()
            narrow = httpx.get(
                f"{hub.url}/services/labhive/api/v1/jobs",
                headers={"Authorization": f"Bearer {minted.json()['token']}"},
            )
            assert narrow.status_code == 403 and "access:services" in narrow.json()["detail"]

            # 5. the instructor sees every user's jobs, and alice's logs
            teacher = login(browser, hub, "teacher", then="/hub/home")
            listing = teacher.goto(f"{hub.url}/services/labhive/api/v1/jobs")
            assert listing is not None and listing.status == 200
            users = {j["user"] for j in json.loads(teacher.inner_text("body"))["jobs"]}
            assert {"alice", "bob"} <= users, users
            logs = teacher.goto(f"{hub.url}/services/labhive/api/v1/jobs/{mine.id}/logs")
            assert logs is not None and logs.status == 200
            assert "hi" in json.loads(teacher.inner_text("body"))["data"]
        except Exception:
            alice.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            raise

        # 6. the hub restarts while her server runs: re-adopted, not restarted
        before = server_job.refresh().data
        assert before["state"] == "RUNNING"
        hub.stop()
        hub.start()
        status = wait_for(
            lambda: alice.request.get(f"{hub.url}/user/alice/api/status").status == 200,
            60,
            "alice's server behind the restarted hub",
        )
        assert status
        after = server_job.refresh().data
        assert (after["state"], after["attempt"], after["started_at"]) == (
            "RUNNING",
            before["attempt"],
            before["started_at"],
        )
        assert len(jobs_named(admin, "jupyter-alice")) == 1, "the hub started a second server"
        assert not jobs_named(admin, "jupyter-bob"), "bob only looked; no server of his"
        alice.goto(f"{hub.url}/user/alice/lab")
        alice.wait_for_selector("#jp-main-dock-panel", timeout=60_000)

        # 7. a higher-priority job takes vc1: her server is preempted and the hub says why
        urgent = admin.submit(name="urgent", command="sleep 600", vc="vc1", gpus=2, priority="crit")
        wait_for(lambda: urgent.refresh().state == "RUNNING", 30, "the urgent job")
        wait_for(
            lambda: not alice.request.get(f"{hub.url}/hub/api/user").json().get("servers"),
            30,
            "the hub to see her server gone",
        )
        assert server_job.refresh().state == "STOPPED"
        alice.goto(f"{hub.url}/hub/spawn")
        notice = alice.inner_text("form")
        assert "was stopped by LabHive: a higher-priority job needed its resources" in notice
        assert "preempted by urgent" in notice, notice
        alice.screenshot(path=str(tmp_path / "preempted.png"))
        browser.close()
