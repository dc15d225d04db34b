"""End to end in a real browser: JupyterLab on loopback, headless Debian Chromium through
Playwright (no browser download), a real ``labhive serve``. A notebook runs ``%submit`` while
another job holds the VC, and the job widget is seen going WAITING (with its queue position),
then RUNNING once the blocker is cancelled, then SUCCEEDED.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import nbformat
from kernel_support import VENV_BIN, free_port, labhive_serve, stop_group, venv_env

from labhive.client import Client

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
TOKEN = "labhive-browser-test"


@contextmanager
def jupyterlab(root: Path, env: dict[str, str]) -> Iterator[str]:
    """JupyterLab serving ``root`` on a loopback port; yields its base URL."""
    port = free_port()
    cmd = [
        f"{VENV_BIN}/jupyter-lab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={TOKEN}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.news_url=None",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log = root.parent / "lab.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=venv_env(**env), start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/api/status?token={TOKEN}", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, f"jupyter lab exited: {log.read_text()}"
            assert time.monotonic() < deadline, f"jupyter lab not up: {log.read_text()}"
            time.sleep(0.3)
        yield base
    finally:
        stop_group(proc)


def write_notebook(path: Path, *cells: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)


def wait_until_running(client: Client, job_id: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while client.job(job_id).state != "RUNNING":
        assert time.monotonic() < deadline, "the blocker never started"
        time.sleep(0.2)


def test_job_widget_follows_a_job_from_waiting_to_succeeded(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "install Debian's chromium (.ci/deps.sh does)"
    root = tmp_path / "lab"
    root.mkdir()
    write_notebook(
        root / "watch.ipynb",
        "%load_ext labhive.kernel_ext",
        "%submit --name watched --vc vc1 --gpus 4 -- sleep 2",
    )
    with labhive_serve(tmp_path / "service") as svc:
        alice = Client(svc.url, svc.token("alice"))
        blocker = alice.submit(name="blocker", command="sleep 300", vc="vc1", gpus=4)
        wait_until_running(alice, blocker.id)
        with jupyterlab(root, svc.env("alice")) as base, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            try:
                page.set_default_timeout(40_000)
                page.goto(f"{base}/lab/tree/watch.ipynb?token={TOKEN}")
                page.wait_for_function("() => document.body.innerText.includes('| Idle')")
                page.evaluate(
                    "() => { window.jupyterapp.commands.execute('notebook:run-all-cells') }"
                )

                job = ".labhive-job-widget .labhive-job"
                page.wait_for_selector(f"{job}[data-state='WAITING']:has-text('position 1')")
                assert "blocker" not in page.inner_text(job)
                alice.cancel(blocker.id)
                page.wait_for_selector(f"{job}[data-state='RUNNING']", timeout=30_000)
                page.wait_for_selector(f"{job}[data-state='SUCCEEDED']", timeout=30_000)
                text = page.inner_text(job)
                assert text.startswith("job watched SUCCEEDED after"), text
                assert "vnode-" in text

                shot = tmp_path / "job-widget.png"
                page.screenshot(path=str(shot), full_page=True)
            except Exception:
                page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
                raise
            finally:
                browser.close()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
