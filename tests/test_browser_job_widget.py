"""End to end in a real browser: JupyterLab on loopback, headless Debian Chromium through
Playwright (no browser download), a real ``labhive serve``. A notebook runs ``%submit`` while
another job holds the VC, and the job widget is seen going WAITING (with its queue position),
then RUNNING once the blocker is cancelled, then SUCCEEDED: its task table laid out, no Cancel
button left, and no JupyterLab news prompt (the server's settings overrides turn it off).
"""

from __future__ import annotations

from pathlib import Path

from kernel_support import CHROMIUM, CHROMIUM_FLAGS, jupyter_app, labhive_serve, write_notebook
from waiting import wait_until

from labhive.client import Client
from labhive.hub_extension.spawner import JUPYTER_CONFIG

TOKEN = "labhive-browser-test"
LAB_ARGS = (
    "--LabApp.news_url=None",
    "--LabApp.expose_app_in_browser=True",
    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
)


#: The news prompt's setting as the page received it (its default, with the server's overrides).
NEWS_SETTING = """async () => {
  const plugin = await window.jupyterapp.serviceManager.settings.fetch(
    '@jupyterlab/apputils-extension:notification');
  return plugin.schema.properties.fetchNews.default;
}"""


def wait_until_running(client: Client, job_id: int, timeout: float = 30) -> None:
    wait_until(lambda: client.job(job_id).state == "RUNNING", "the blocker to start", timeout, 0.2)


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
        with (
            jupyter_app(
                "jupyter-lab",
                root,
                *LAB_ARGS,
                token=TOKEN,
                **svc.env("alice"),
                JUPYTER_CONFIG_PATH=str(JUPYTER_CONFIG),  # as the hub's servers get it
            ) as base,
            sync_playwright() as pw,
        ):
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
                cell = ".labhive-job-widget .labhive-tasks td"
                assert page.eval_on_selector(cell, "e => getComputedStyle(e).textAlign") == "left"
                assert not page.is_visible(".labhive-job-widget button:has-text('Cancel')")
                news = page.evaluate(NEWS_SETTING)
                assert news == "false", f"JupyterLab's news setting is {news!r}"
                assert "Jupyter news" not in page.inner_text("body")

                shot = tmp_path / "job-widget.png"
                page.screenshot(path=str(shot), full_page=True)
            except Exception:
                page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
                raise
            finally:
                browser.close()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
