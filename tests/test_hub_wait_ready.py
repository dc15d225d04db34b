"""Given a hub whose API answers but whose LabHive service does not (a real HTTP server on the
hub's port, nothing on the service's, a live hub process), expect ``labhive up``'s wait to
give up saying which of the two answered what, with the end of the hub's log: a test's
throwaway data directory (and the log in it) is gone by the time anyone reads the failure."""

from __future__ import annotations

import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from kernel_support import free_port

from labhive.hub_extension.hubconfig import HubPlan
from labhive.hub_extension.up import wait_ready
from labhive.scheduler.core.errors import UserError


class HubApiOnly(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/hub/api/" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_service_that_never_answers_is_named_with_the_hubs_log(tmp_path: Path) -> None:
    server = HTTPServer(("127.0.0.1", 0), HubApiOnly)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_port
    plan = HubPlan(str(tmp_path), "t" * 64, public_port=port, service_port=free_port())
    log = tmp_path / "jupyterhub.log"
    log.write_text("[I hub] starting\n[E labhive] the service could not open its database\n")
    hub = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(UserError) as caught:
            wait_ready(plan, hub, log, timeout=1.5)
    finally:
        hub.kill()
        hub.wait()
        server.shutdown()
    said = str(caught.value)
    assert f"the hub's API: HTTP 200 at {plan.public_url}/hub/api/" in said
    assert f"the LabHive service: ConnectError at {plan.service_url}/api/v1/health" in said
    assert said.endswith("the service could not open its database\n")
