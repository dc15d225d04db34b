"""One real browser student in the class (``bench_classroom.py --browser``): headless Chromium
logs in through the hub's login page, is taken to JupyterLab by the hub's spawn page, opens
lab 1 from the course files copied into their home, and waits until that notebook's kernel
says Idle. Reported: login (the form's submit) -> kernel Idle, in seconds, or what went wrong.

The browser runs on the class's machine and takes CPU from it (a real student's browser runs
on their own computer): a browser student makes the class's figures a little worse, not better.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
#: Headless Chromium on a machine with no network but loopback (as tests/kernel_support.py).
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--no-first-run",
    "--disable-sync", "--disable-quic",
]  # fmt: skip
LAB1 = "lab1_a_jobs_life.ipynb"
NAME = "browser1"
SCREENSHOT = "browser-student-failed.png"  # in the current directory


@dataclass
class BrowserStudent:
    arrive_at: float = 0.0
    lab_open_at: float | None = None  # JupyterLab's main area shown
    kernel_idle_at: float | None = None  # lab 1's kernel said Idle
    error: str | None = None

    @property
    def login_to_kernel_s(self) -> float | None:
        return None if self.kernel_idle_at is None else self.kernel_idle_at - self.arrive_at


def attend_in_browser(url: str, password: str, timeout_s: float) -> BrowserStudent:
    """Log in, open lab 1, wait for its kernel; never raises (the error is recorded)."""
    student = BrowserStudent(arrive_at=time.time())
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        student.error = "playwright is not installed (pip install -e .[dev])"
        return student
    if not CHROMIUM.exists():
        student.error = f"no {CHROMIUM} (apt-get install chromium; .ci/deps.sh does)"
        return student
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
            page = browser.new_page()
            try:
                _lab1(page, url, password, student, timeout_s)
            except Exception:
                page.screenshot(path=SCREENSHOT)  # what the student saw when it failed
                raise
            finally:
                browser.close()
    except Exception as err:  # a browser student's failure is reported, as any student's
        student.error = f"{type(err).__name__}: {str(err).splitlines()[0][:200]} (see {SCREENSHOT})"
    return student


def _lab1(page: Any, url: str, password: str, student: BrowserStudent, timeout_s: float) -> None:
    until = time.monotonic() + timeout_s

    def left_ms() -> float:
        return max(1.0, (until - time.monotonic()) * 1000)

    page.goto(f"{url}/hub/login", timeout=left_ms())
    page.fill("#username_input", NAME)
    page.fill("#password_input", password)
    student.arrive_at = time.time()  # as the bench's students: from the login's submit
    page.click("#login_submit")
    page.wait_for_url(f"**/user/{NAME}/lab**", timeout=left_ms())  # through the spawn page
    page.wait_for_selector("#jp-main-dock-panel", timeout=left_ms())
    student.lab_open_at = time.time()
    page.goto(f"{url}/user/{NAME}/lab/tree/labs/{LAB1}", timeout=left_ms())  # ~/labs/
    page.wait_for_function(
        "() => document.body.innerText.includes('| Idle')", timeout=left_ms(), polling=250
    )
    student.kernel_idle_at = time.time()
