"""A student's fair-share standing on the hub's spawn page: given fair share (``labhive up``'s
default, 7d) and a job of the instructor's holding all of vc1, alice's server waits in vc1's
queue; expect the spawn page's progress message (what the page shows under its bar) to say her
place and her standing, and the server options form (when there is a choice to make) to show
her standing per VC. A real JupyterHub with the LabHive spawner and service
(``hub_support.real_hub``) for the page; the form through the spawner against the service."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from hub_support import real_hub, try_login, user_token, wait_for
from service_fixtures import live_service

from labhive.hub_extension.spawner import LabHiveSpawner

CLUSTER = """\
physicalCluster:
  cellTypes:
    NODE: {childCellType: GPU, childCellNumber: 4, isNodeLevel: true}
  physicalCells:
    - {cellType: NODE, cellAddress: node-0}
virtualClusters:
  vc1: {virtualCells: [{cellType: NODE.GPU, cellNumber: 2}]}
  default: {virtualCells: [{cellType: NODE.GPU, cellNumber: 2}]}
fairShare: {halfLife: 7d}
"""
STANDING = (
    r"fair share: you have used 0\.0 GPU-h of vc1 \(decayed: a GPU-hour counts half after "
    r"7d\); your share is 1/2, rank 1 of 2; your next job is first in line"
)


def first_waiting_event(hub_url: str, http: httpx.Client, token: str) -> str:
    """The first WAITING message of alice's spawn, read as the spawn page reads it."""
    url = f"{hub_url}/hub/api/users/alice/server/progress"
    auth = {"Authorization": f"token {token}"}
    with http.stream("GET", url, headers=auth, timeout=httpx.Timeout(10, read=120)) as events:
        assert events.status_code == 200, events.read()
        seen = []
        for line in events.iter_lines():
            if line.startswith("data:"):
                seen.append(json.loads(line[5:]))
                message = str(seen[-1].get("message", ""))
                if message.startswith("WAITING"):
                    return message
    raise AssertionError(f"the spawn's progress ended without a WAITING message: {seen}")


def test_the_spawn_page_shows_her_place_and_standing(tmp_path: Path) -> None:
    with real_hub(tmp_path) as hub:
        admin = hub.admin()
        blocker = admin.submit(
            name="blocker", command="sleep 600", vc="vc1", gpus=2, priority="prod"
        )
        wait_for(lambda: blocker.refresh().state == "RUNNING", 60, "the blocker to run")
        http, _ = try_login(hub.url, "alice", "any")
        try:
            token = user_token(http, "alice")
            started = http.post(
                "/hub/api/users/alice/server", headers={"Authorization": f"token {token}"}
            )
            assert started.status_code in (201, 202), started.text
            message = first_waiting_event(hub.url, http, token)
        finally:
            http.close()
        assert message.startswith("WAITING: position 1 of 1 in vc1"), message
        assert re.search(STANDING, message), message
        assert "blocker" not in message


def test_the_server_options_form_shows_the_standing_per_vc(tmp_path: Path) -> None:
    from jupyterhub.objects import Hub

    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    grants = tmp_path / "grants.yaml"
    grants.write_text("groups:\n  students: {vcs: [vc1, default]}\n")
    with live_service(tmp_path / "data", cluster=str(tmp_path / "cluster.yaml")) as live:
        live.client().submit(name="blocker", command="sleep 600", vc="vc1", gpus=2)
        user = SimpleNamespace(
            name="alice", escaped_name="alice", url="/user/alice/", id=1, settings={},
            groups=[SimpleNamespace(name="students")],
        )  # fmt: skip
        spawner = LabHiveSpawner(
            user=user,
            hub=Hub(ip="127.0.0.1", port=1, base_url="/hub/"),
            api_token="alice-token-123",
            service_url=live.url,
            service_token=live.admin,
            cmd=[sys.executable, "-c", "pass"],
            secrets_dir=str(tmp_path / "secrets"),
            grants_file=str(grants),
        )
        form = asyncio.run(spawner._options_form())
        # a site's own template gets the same values, each of them escaped text
        own = tmp_path / "form.html"
        own.write_text(
            "{% for vc in vcs %}[{{ vc }}{{ '*' if vc == selected_vc }}]{% endfor %}"
            "{% for vc, text in standing %}<i>{{ vc }}</i>{% endfor %}{{ '<b>' }}"
        )
        spawner.options_form_template = str(own)
        assert asyncio.run(spawner._options_form()) == (
            "[default*][vc1]<i>default</i><i>vc1</i>&lt;b&gt;"
        )
        spawner.options_form_template = str(tmp_path / "missing.html")
        with pytest.raises(FileNotFoundError, match="is not a file: give the path of a Jinja2"):
            asyncio.run(spawner._options_form())
    assert "<select id='labhive-vc'" in form  # a choice to make, so a form at all
    lines = re.findall(r"<p class='labhive-standing'>Fair share in (\w+): ([^<]+)</p>", form)
    assert [vc for vc, _ in lines] == ["default", "vc1"], form
    assert "your share is 1/2, rank 1 of 2" in dict(lines)["vc1"]  # (the blocker's user)
    assert "your share is 1/1, rank 1 of 1" in dict(lines)["default"]
