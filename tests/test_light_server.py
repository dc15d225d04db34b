"""Given the single-user server command that ``labhive up`` writes for every student, expect a
server that boots without the start-up work a student's server has no use for, and still
serves what a student needs.

A class of 50 boots 50 servers on 2 cores (docs/hub.md, "A class of 50"): watched with strace
from its start until it answers, such a server must run no ``npm`` (jupyter_lsp's search for
language servers) and must not load ``rfc3987_syntax`` (built ~35 Lark parsers at each import,
~1.4 CPU s, removed by the Makefile's venv step), no ``node`` but the one ``yarn config`` that
importing JupyterLab runs (``jupyter-lab`` started directly, as here; the spawner's servers skip
that one too: ``tests/test_server_boot.py``), and no classic-extension shim;
JupyterLab, the LabHive extension and the read-only extension list still answer, and a kernel
still starts. A student opening JupyterLab in a browser makes the server run no ``node`` at all
(JupyterLab's rebuild check ran it twice at each page load, ~0.8 CPU s)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from kernel_support import CHROMIUM, CHROMIUM_FLAGS, free_port, venv_env

from labhive.hub_extension.hubconfig import HubPlan, server_args
from labhive.hub_extension.spawner import JUPYTER_CONFIG
from labhive.hub_extension.up import stop_group

TOKEN = "light-server-test"
VENV_BIN = Path(sys.executable).parent


def traced_lab(root: Path, trace: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``jupyter-lab`` with the students' server arguments, under ``strace -f`` (every exec
    and every file opened), serving ``root``; its URL once it answers."""
    port = free_port()
    cmd = [
        *("strace", "-f", "-qq", "-e", "trace=execve,openat", "-o", str(trace)),
        f"{VENV_BIN}/jupyter-lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root}",
        *server_args(HubPlan(data_dir=str(root.parent / "hub"), service_token="unused")),
    ]  # fmt: skip
    env = venv_env(JUPYTER_CONFIG_PATH=str(JUPYTER_CONFIG))
    log = (root.parent / "lab.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{base}/api/status?token={TOKEN}", timeout=2).status_code == 200:
                return proc, base
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_group(proc)
            raise AssertionError(f"jupyter-lab not up: {(root.parent / 'lab.log').read_text()}")
        time.sleep(0.3)


def node_execs(trace: Path) -> list[str]:
    """The ``node`` processes started so far in an ``strace -f -e execve`` log."""
    return [
        line
        for line in trace.read_text().splitlines()
        if "execve(" in line and "ENOENT" not in line and re.search(r'execve\("[^"]*/node"', line)
    ]


def page_config(html: str) -> dict[str, Any]:
    """The ``jupyter-config-data`` JSON a JupyterLab page carries."""
    found = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                      html, re.S)  # fmt: skip
    assert found, html[:500]
    return dict(json.loads(found.group(1)))


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_a_students_server_boots_without_npm_or_rfc3987_syntax_and_serves_lab(
    tmp_path: Path,
) -> None:
    root = tmp_path / "home"
    root.mkdir()
    trace = tmp_path / "strace.log"
    proc, base = traced_lab(root, trace)
    try:
        http = httpx.Client(base_url=base, headers={"Authorization": f"token {TOKEN}"})
        booted = trace.read_text()
        execs = [line for line in booted.splitlines() if "execve(" in line and "ENOENT" not in line]
        assert not [e for e in execs if "npm" in e], execs  # jupyter_lsp is off
        nodes = node_execs(trace)
        assert len(nodes) <= 1 and all('"config", "--json"' in n for n in nodes), nodes
        # notebook_shim's server extension (classic Notebook extensions: a class has none)
        assert not re.search(r"notebook_shim/(__pycache__/)?nbserver", booted)
        assert "rfc3987_syntax" not in booted, "the server imported rfc3987_syntax (make it again)"

        page = http.get("/lab")
        assert page.status_code == 200  # JupyterLab itself
        config = page_config(page.text)  # what the page's scripts read: no rebuild check
        assert (config["buildCheck"], config["buildAvailable"]) == (False, False), config
        assert http.get("/labhive/api/v1/health").status_code in (200, 502)  # the extension
        listing = http.get("/lab/api/extensions")
        assert listing.status_code == 200, listing.text
        assert http.get("/lsp/status").status_code == 404  # jupyter_lsp not loaded
        kernel = http.post("/api/kernels", json={"name": "python3"})
        assert kernel.status_code == 201, kernel.text
        http.delete(f"/api/kernels/{kernel.json()['id']}")
    finally:
        stop_group(proc)
    assert os.path.getsize(trace) > 0


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_a_student_opening_jupyterlab_in_a_browser_makes_the_server_run_no_node(
    tmp_path: Path,
) -> None:
    """Given a student's server and the student opening JupyterLab in Chromium, expect the page
    to come up without the server running ``node``: JupyterLab's rebuild check
    (``/lab/api/build``: ``node-version-check.js`` and ``yarn config``) is off in the servers'
    ``labconfig/page_config.json``, so the page never asks for it."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "install Debian's chromium (.ci/deps.sh does)"
    root = tmp_path / "home"
    root.mkdir()
    trace = tmp_path / "strace.log"
    proc, base = traced_lab(root, trace)
    asked: list[str] = []
    try:
        booted = node_execs(trace)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
            try:
                page = browser.new_page()
                page.on("request", lambda request: asked.append(request.url))
                page.goto(f"{base}/lab?token={TOKEN}", timeout=120_000)
                page.wait_for_selector("#jp-main-dock-panel", timeout=120_000)
                page.wait_for_load_state("networkidle", timeout=60_000)
                time.sleep(3)  # the rebuild check asked once the app had started
            finally:
                browser.close()
        assert [u for u in asked if "/api/kernelspecs" in u], asked  # the page did start
        assert not [u for u in asked if "/lab/api/build" in u], asked
        assert node_execs(trace) == booted
    finally:
        stop_group(proc)
