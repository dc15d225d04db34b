"""``labhive up`` for real: it prints the URL, the admin login and the export lines for the CLI
(which then lists jobs); the admin logs in and gets a server (a LabHive job); a training job
runs; Ctrl-C then stops the server (its job cancelled), the hub, the service and every job
process (the training job waits for the next start), and leaves nothing listening."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
from hub_support import wait_for
from kernel_support import free_port, venv_env

from labhive.client import Client
from labhive.scheduler.service.store import Store, queries


def _login(hub: str, name: str, password: str) -> httpx.Client:
    """A browser-like session: the login form with its XSRF token."""
    http = httpx.Client(base_url=hub, timeout=30)
    form = http.get("/hub/login")
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', form.text)
    assert xsrf, form.text[:500]
    done = http.post(
        "/hub/login?next=%2Fhub%2Fhome",
        data={"username": name, "password": password, "_xsrf": xsrf.group(1)},
    )
    assert done.status_code == 302 and done.headers["location"].endswith("/hub/home"), done.text
    return http


def _family(marker: str) -> list[psutil.Process]:
    """Processes whose command line names ``marker`` (the data dir: hub, service, task
    supervisors), with all their descendants (proxy, servers, job processes)."""
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if marker in " ".join(proc.info["cmdline"] or ()):
                found[proc.pid] = proc
                found.update((c.pid, c) for c in proc.children(recursive=True))
        except psutil.Error:
            continue
    return list(found.values())


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.Error:
            continue
    return out


def _names(procs: list[psutil.Process]) -> str:
    out = []
    for proc in procs:
        try:
            # long enough for a server's (python -P -m ...serverboot /venv/bin/jupyterhub-...)
            out.append(" ".join(proc.cmdline())[:300])
        except psutil.Error:
            continue
    return "\n".join(out)


def test_labhive_up_prints_the_login_serves_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    port, service_port = free_port(), free_port()
    data = tmp_path / "data"
    cmd = [sys.executable, "-m", "labhive.scheduler.cli", "up", "--port", str(port)]
    cmd += ["--service-port", str(service_port), "--data-dir", str(data), "--grace-s", "2"]
    up = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=venv_env(),
        start_new_session=True,
    )  # fmt: skip
    try:
        banner = []
        for line in up.stdout:  # type: ignore[union-attr]
            banner.append(line)
            if "Ctrl-C stops" in line:
                break
        text = "".join(banner)
        assert f"LabHive is up: http://127.0.0.1:{port}/" in text, text
        password = re.search(r"admin login:\s+admin / (\S+)", text)
        assert password, text
        assert "add users:" in text and "add groups:" in text
        assert "labhive hub adduser NAME" in text and "/hub/authorize" in text, text
        assert "each user their own password" in text, text  # no password shared by all

        hub = f"http://127.0.0.1:{port}"
        admin = _login(hub, "admin", password.group(1))
        assert admin.get("/hub/spawn").status_code in (200, 302)  # the admin's server queues
        keys = json.loads((data / "hub" / "secrets.json").read_text())
        service = Client(f"http://127.0.0.1:{service_port}", keys["service_token"])
        (server_id,) = wait_for(
            lambda: [
                j.id for j in service.jobs() if j.name == "jupyter-admin" and j.state == "RUNNING"
            ],
            60,
            "the admin's server job",
        )
        exports = re.search(r"export (LABHIVE_URL=\S+) (LABHIVE_TOKEN_FILE=\S+)", text)
        assert exports, text
        env = {**venv_env(), **dict(kv.split("=", 1) for kv in exports.groups())}
        env.pop("LABHIVE_TOKEN", None)
        cli = subprocess.run(
            [sys.executable, "-m", "labhive.scheduler.cli", "jobs"], env=env, cwd=tmp_path,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert cli.returncode == 0 and "jupyter-admin" in cli.stdout, cli.stdout + cli.stderr
        virtual = service.cluster()["virtual"]
        assert ("cluster:      VIRTUAL (no NVIDIA driver)" in text) == virtual, text
        if virtual:
            assert "2 nodes x 4 GPU slots; VCs default, vc1" in text, text

        train = service.submit(name="train", command="sleep 6543", gpus=1)
        wait_for(lambda: train.refresh().state == "RUNNING", 30, "the training job")

        def with_training() -> list[psutil.Process] | None:
            family = _family(str(data))
            return family if "sleep 6543" in _names(family) else None

        everything = wait_for(with_training, 10, "the training process")
        assert "jupyterhub-singleuser" in _names(everything), _names(everything)
        assert "configurable-http-proxy" in _names(everything), _names(everything)

        os.killpg(up.pid, signal.SIGINT)  # Ctrl-C in the terminal
        rest, _ = up.communicate(timeout=90)
        assert up.returncode == 0, rest
        assert "1 server(s) stopped" in rest, rest
    finally:
        if up.poll() is None:  # a failed test still stops what it started, as a user would
            os.killpg(up.pid, signal.SIGINT)
            try:
                up.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(up.pid, signal.SIGKILL)
                up.wait()

    left = _alive(everything)
    assert not left, f"outlived labhive up:\n{_names(left)}"
    store = Store(f"sqlite:///{data / 'hub' / 'service' / 'labhive.db'}")
    with store.read() as conn:
        server, training = queries.job(conn, server_id), queries.job(conn, train.id)
    store.dispose()
    assert server is not None and (server["state"], server["reason"]) == ("STOPPED", "cancelled")
    assert training is not None and training["state"] == "WAITING", "it runs again next start"
    for p in (port, service_port):
        try:
            httpx.get(f"http://127.0.0.1:{p}/", timeout=1)
        except httpx.TransportError:
            continue
        raise AssertionError(f"port {p} still answers")
