"""Given hub users whose names sanitize or truncate alike, expect one server job name and one
launch file each (issue 16: ``eve@x`` and ``eve_x`` shared both, so one user's server started
with the other's identity and token)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from labhive.hub_extension.spawner import JOB_NAME_LEN, LabHiveSpawner, server_job_name

LONG = "x" * 70


@pytest.mark.parametrize(
    "pairs",
    [
        [("eve@x", ""), ("eve_x", ""), ("eve x", ""), ("eve%x", "")],
        [(LONG + "a", ""), (LONG + "b", ""), (LONG, "")],
        [("a", "b"), ("a-b", ""), ("a_b", "")],
        [("eve_x", "srv"), ("eve@x", "srv"), ("eve_x", "srv2")],
    ],
    ids=["sanitizing", "truncation", "server-names", "named-servers"],
)
def test_names_that_sanitize_or_truncate_alike_stay_apart(pairs):
    names = [server_job_name(user, server) for user, server in pairs]
    assert len(set(names)) == len(names), names
    assert all(len(n) <= JOB_NAME_LEN for n in names)
    assert all(n.startswith("jupyter-") for n in names)


def test_plain_names_stay_readable_and_others_are_stable():
    assert server_job_name("alice") == "jupyter-alice"
    assert server_job_name("eve@x") == server_job_name("eve@x")  # a restart finds its file
    assert server_job_name("eve@x").startswith("jupyter-eve_x~")


def spawner(user: str, secrets: Path) -> LabHiveSpawner:
    from jupyterhub.objects import Hub

    hub_user = SimpleNamespace(
        name=user, escaped_name=user, url=f"/user/{user}/", id=1, settings={}
    )
    return LabHiveSpawner(
        user=hub_user,
        hub=Hub(ip="127.0.0.1", port=1, base_url="/hub/"),
        api_token=f"token-of-{user}",
        service_url="http://127.0.0.1:1/api/v1",
        service_token="unused",
        cmd=[sys.executable, "-c", "pass"],
        secrets_dir=str(secrets),
    )


def test_each_user_gets_their_own_launch_file_and_token(tmp_path):
    files = {user: spawner(user, tmp_path)._write_launch_file() for user in ("eve@x", "eve_x")}
    assert files["eve@x"] != files["eve_x"]
    for user, path in files.items():
        assert json.loads(path.read_text())["env"]["JUPYTERHUB_API_TOKEN"] == f"token-of-{user}"
