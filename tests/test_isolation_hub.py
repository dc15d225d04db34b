"""Given two users' notebook servers started by the LabHive spawner against a root service
that runs tasks as their users, expect each server to run in a 0700 home of its own uid and to
read its own 0600 launch file, and alice's server to get EACCES listing the homes, bob's home
and bob's launch file (no hub in between: the spawner is driven directly, as in
test_hub_spawner.py)."""

from __future__ import annotations

import asyncio
import errno
import json
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from isolation_util import (
    ALICE_UID,
    FIRST_UID,
    PROBE,
    isolated_service,
    needs_root,
    open_tmp_dir,
    user_python,
)
from service_fixtures import Live
from waiting import wait_until

import labhive.hub_extension.launch as launch_module
from labhive.hub_extension.spawner import LabHiveSpawner

#: A "notebook server": the probe, its report written into its home, then an HTTP server where
#: the hub told it to listen.
FAKE_SERVER = PROBE.replace(
    "print(json.dumps(out), flush=True)", "json.dump(out, open('report.json', 'w'))"
) + (
    "import http.server, urllib.parse as u\n"
    "open('notes.txt', 'w').write('private notes')\n"
    "port = u.urlparse(os.environ['JUPYTERHUB_SERVICE_URL']).port\n"
    "http.server.HTTPServer(('127.0.0.1', port), http.server.SimpleHTTPRequestHandler)"
    ".serve_forever()\n"
)


def spawner(live: Live, hub_dir: Path, name: str, token: str, targets: list) -> LabHiveSpawner:
    from jupyterhub.objects import Hub

    user = SimpleNamespace(name=name, escaped_name=name, url=f"/user/{name}/", id=1, settings={})
    return LabHiveSpawner(
        user=user,
        hub=Hub(ip="127.0.0.1", port=1, base_url="/hub/"),
        api_token=token,
        service_url=live.url,
        service_token=live.admin,
        cmd=[user_python(), "-c", FAKE_SERVER],
        launcher=[user_python(), launch_module.__file__],
        secrets_dir=str(hub_dir / "servers"),
        notebook_dir=str(hub_dir / "home" / "{username}"),
        poll_s=0.1,
        environment={"PROBE_TARGETS": json.dumps([(a, b, str(c)) for a, b, c in targets])},
    )


def mode(path: Path) -> tuple[int, int]:
    st = path.stat()
    return stat.S_IMODE(st.st_mode), st.st_uid


@needs_root
def test_a_users_notebook_home_and_launch_file_are_theirs_alone() -> None:
    with open_tmp_dir() as tmp, isolated_service(tmp / "data") as live:
        # the homes and launch files in the data dir, as `labhive up` lays them out: a task's
        # /tmp is its own, and of the host's /tmp it sees the data dir only (sandbox_mounts)
        hub = live.data_dir
        homes, servers = hub / "home", hub / "servers"
        bob = spawner(live, hub, "bob", "bob-token-4567", [])
        alice = spawner(
            live, hub, "alice", "alice-token-123",
            [
                ("the homes", "list", homes),
                ("bob's home", "list", homes / "bob"),
                ("bob's notes", "read", homes / "bob" / "notes.txt"),
                ("bob's launch file", "read", servers / "jupyter-bob.json"),
                ("its own launch file", "read", servers / "jupyter-alice.json"),
                ("its own home", "list", homes / "alice"),
            ],
        )  # fmt: skip
        try:
            asyncio.run(_start(bob))
            wait_until(lambda: (homes / "bob" / "notes.txt").exists(), "bob's server", 30)
            asyncio.run(_start(alice))
            report = wait_until(lambda: _report(homes / "alice"), "alice's report", 30)
        finally:
            for s in (alice, bob):
                asyncio.run(s.stop(now=True))

    assert (report["uid"], report["groups"]) == (ALICE_UID, [])
    assert report["home"] == str(homes / "alice")
    assert report["tries"] == {
        "the homes": errno.EACCES,
        "bob's home": errno.EACCES,
        "bob's notes": errno.EACCES,
        "bob's launch file": errno.EACCES,
        "its own launch file": "ok",
        "its own home": "ok",
    }


@needs_root
def test_a_notebook_server_gets_the_hubs_variables_and_none_of_the_services(monkeypatch) -> None:
    """The service (here in this process) was started with a database password and an admin's
    secret: its server job gets neither, while the hub's token and URLs reach the server."""
    for name, value in {"PGPASSWORD": "pg-pass", "ADMIN_CLOUD_SECRET": "cloud-key"}.items():
        monkeypatch.setenv(name, value)
    with open_tmp_dir() as tmp, isolated_service(tmp / "data", task_paths=(str(tmp),)) as live:
        hub = tmp / "hub"  # beside the data dir, under /tmp: shared with tasks by --task-path
        alice = spawner(live, hub, "alice", "alice-token-123", [])
        try:
            asyncio.run(_start(alice))
            report = wait_until(lambda: _report(hub / "home" / "alice"), "alice's report", 30)
        finally:
            asyncio.run(alice.stop(now=True))
    env = set(report["env"])
    assert not {"PGPASSWORD", "ADMIN_CLOUD_SECRET", "LABHIVE_TOKEN"} & env
    assert {"JUPYTERHUB_API_TOKEN", "JUPYTERHUB_SERVICE_URL", "LABHIVE_URL", "PROBE_TARGETS"} <= env
    assert {"PAI_JOB_NAME", "LABHIVE_JOB_ID", "PATH", "HOME"} <= env


def _report(home: Path) -> Any:
    try:
        return json.loads((home / "report.json").read_text())
    except (OSError, ValueError):
        return None


async def _start(s: LabHiveSpawner) -> None:
    await asyncio.wait_for(s.start(), 60)
    hub = Path(s.secrets_dir).parent
    uid = ALICE_UID if s.user.name == "alice" else FIRST_UID
    assert mode(hub / "home") == (0o711, 0)
    assert mode(hub / "home" / s.user.name) == (0o700, uid)
    assert mode(hub / "servers") == (0o711, 0)
    assert mode(hub / "servers" / f"jupyter-{s.user.name}.json") == (0o600, uid)
