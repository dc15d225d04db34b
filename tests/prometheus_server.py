"""A real Prometheus server (Debian's ``prometheus``) for the tests: loopback, a free high
port, a temporary storage dir, LabHive's shipped scrape config and alert rules with the
intervals shortened to one second."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from monitoring_files import RULES, SCRAPE

from labhive.scheduler.executors.env import free_port


class Prometheus:
    def __init__(self, url: str, log: Path) -> None:
        self.url, self.log = url, log

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        return self.api("query", query=promql)["result"]

    def wait_for(self, promql: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The query's result once it is not empty (discovery alone takes ~5 s)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = self.query(promql)
            if result:
                return result
            time.sleep(0.25)
        raise AssertionError(f"no data for {promql} in {timeout} s; log:\n{self.log.read_text()}")


@contextmanager
def prometheus(target: str, metrics_path: str, workdir: Path) -> Iterator[Prometheus]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus missing: run `bash .ci/deps.sh` (Debian package prometheus)"
    config = yaml.safe_load(SCRAPE.read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(RULES)]
    scrape = config["scrape_configs"][0]
    scrape["static_configs"] = [{"targets": [target]}]
    scrape["metrics_path"] = metrics_path
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = workdir / "prometheus.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        server = Prometheus(f"http://127.0.0.1:{port}", log)
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
