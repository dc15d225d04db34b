"""Given LabHive's exporter on loopback, expect a real Prometheus server, configured with the
shipped scrape config and alert rules, to scrape it, answer PromQL for the GPU of a VC's job
and for the queue, evaluate every dashboard query, and fire the lost-GPU alert."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from metrics_world import ALICE, HOST, h100_sample, snapshot
from monitoring_files import dashboard_exprs, instantiate, rule_exprs
from prometheus_server import prometheus

from labhive.scheduler.observe.prometheus import CONTENT_TYPE_LATEST, render

PATH = "/api/v1/metrics"


def exporter_text() -> str:
    """Alice's job on the H100 of gpu-node-1, and a lost GPU on gpu-node-2."""
    return render(
        snapshot(),
        [h100_sample(), h100_sample("gpu-node-2", lost=True)],
        gpu_owners={(HOST, 0): ALICE},
        process_owners={1118: ALICE},
    )


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = exporter_text().encode() if self.path == PATH else b""
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", CONTENT_TYPE_LATEST)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_prometheus_scrapes_labhive_and_answers_promql(tmp_path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    target = f"127.0.0.1:{server.server_address[1]}"
    try:
        with prometheus(target, PATH, tmp_path) as prom:
            (up,) = prom.wait_for('up{job="labhive"}')
            assert up["value"][1] == "1"
            (gpu,) = prom.wait_for('DCGM_FI_DEV_GPU_UTIL{vc="vc1"}')
            assert gpu["value"][1] == "100"
            # honor_labels: the LabHive job survives the scrape job's own `job` label
            assert gpu["metric"]["job"] == "42" and gpu["metric"]["user"] == "alice"
            assert gpu["metric"]["Hostname"] == HOST and gpu["metric"]["gpu"] == "0"
            (queue,) = prom.query('labhive_queue_length{vc="vc2"}')
            assert queue["value"][1] == "1"
            # a GPU nobody holds carries no job label at all after the scrape
            assert (
                prom.query('labhive_gpu_lost{Hostname="gpu-node-2"}')[0]["metric"].get("job")
                is None
            )
            for expr in dashboard_exprs() + rule_exprs():
                prom.query(instantiate(expr))  # raises unless Prometheus accepts the query
            assert prom.query(instantiate('DCGM_FI_DEV_FB_USED{job="$job"}'))
            rules = prom.api("rules")["groups"]
            assert sum(len(g["rules"]) for g in rules) == 10
            (alert,) = prom.wait_for('ALERTS{alertname="LabHiveGpuLost",alertstate="firing"}')
            assert alert["metric"]["Hostname"] == "gpu-node-2"
    finally:
        server.shutdown()
        server.server_close()
